"""``oaishim serve`` with no upstream: a local model behind the gateway, in one command.

The model is the project's tiny generated model (built and cached on first use) or ``--model
FILE.gguf``. Its special tokens come from the GGUF metadata, so the gateway keeps them whole and
never loses the end of a turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oaishim.engine.llamacpp import EngineError, LlamaServer
from oaishim.transform.special import SpecialTokens, special_tokens_from_gguf

log = logging.getLogger("oaishim.engine")


@dataclass
class Embedded:
    server: LlamaServer
    special: SpecialTokens | None


def gguf_special_tokens(path: Path) -> SpecialTokens | None:
    """The protected tokens of a GGUF model, read from its metadata (None when unreadable)."""
    try:
        from gguf import GGUFReader  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return None
    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        log.warning("cannot read the GGUF metadata of %s: %s", path, exc)
        return None
    metadata: dict[str, Any] = {}
    for name, value in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name != "tokenizer.ggml.merges":
            metadata[name] = value.contents()
    return special_tokens_from_gguf(metadata)


TINY_CONTEXT = 65536  # agent clients send 10-20k-token prompts (Codex CLI ~9k, OpenClaw 12-19k)


def start_embedded(
    model: Path | None,
    alias: str,
    *,
    ctx_size: int | None = None,
    threads: int = 1,
    parallel: int | None = None,
    extra_args: tuple[str, ...] = (),
    log_path: Path | None = None,
) -> Embedded:
    """Start llama-server on ``model`` (default: the tiny model, built on first use).

    ``ctx_size`` None: the tiny model gets TINY_CONTEXT (its trained context is raised to it at load:
    its KV cache is 512 bytes a token, and random weights lose nothing by it), a user's GGUF its own
    trained context. No generation limit is set: each request's ``max_tokens`` is the limit, as at OpenAI.
    """
    special: SpecialTokens | None
    if model is None:
        from oaishim.engine.tinymodel import ensure_tiny_models

        tiny = ensure_tiny_models()
        model, special = tiny.gguf, tiny.special
        context = TINY_CONTEXT if ctx_size is None else ctx_size
        # llama-server caps a slot at the trained context: raise the model's own at load
        extra_args = ("--override-kv", f"llama.context_length=int:{max(context, 4096)}", *extra_args)
    else:
        if not model.exists():
            raise EngineError(f"model file not found: {model}")
        special = gguf_special_tokens(model)
        context = 0 if ctx_size is None else ctx_size
    server = LlamaServer(
        model=model,
        alias=alias,
        context=context,
        threads=threads,
        parallel=parallel,
        log_path=log_path,
        extra_args=extra_args,
    )
    server.start()
    return Embedded(server, special)


__all__ = ["TINY_CONTEXT", "Embedded", "EngineError", "gguf_special_tokens", "start_embedded"]
