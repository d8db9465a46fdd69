"""The tiny model's tokenizer: byte-level BPE, 4096 tokens, trained on Python's own sources.

Why the standard library: it ships with every Python, so the model is made from nothing that has
to be downloaded, and the result is the same on every machine with the same Python. The corpus is
the sorted top-level ``*.py`` files of the standard library, read in that order until
``CORPUS_CHARS``; training on it takes about half a second.

The seven added tokens sit at ids 0–6, in the order of ``ADDED``. The first three are control
tokens (special: tokenizers hide them from decoded text unless asked). The four tags are *ordinary*
added tokens, exactly as Qwen3 has them: always one token each, but plain text. Were they special,
vLLM (``skip_special_tokens``) would drop ``</think>`` from the output and its reasoning parser
could not split on it.

Training is deterministic: merges are picked by count, ties by the pair's token ids, and those ids
come from the sorted alphabet, so neither thread count nor hash seeds change the result (checked
across processes). A different Python has a different standard library, hence a different
tokenizer; :func:`corpus` is part of the cache key for that reason.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

VOCAB_SIZE = 4096
CORPUS_CHARS = 3_000_000  # ~0.7 s of training; enough text for 4096 real merges

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CONTROL = (ENDOFTEXT, IM_START, IM_END)
TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
ADDED = CONTROL + TAGS  # ids 0..6, in this order
EOS = IM_END


def corpus(limit: int = CORPUS_CHARS) -> list[str]:
    """The training texts: sorted standard-library modules, whole files, until ``limit`` chars."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_bytes().decode("utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= limit:
            break
    if not texts:
        raise RuntimeError(f"no standard-library sources found in {stdlib}; cannot train the tiny tokenizer")
    return texts


def train_tokenizer(texts: list[str]) -> dict[str, Any]:
    """Train and return the tokenizer as ``tokenizer.json`` data (tags already made non-special)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    # The GPT-2 split regex, the one llama.cpp applies for ``tokenizer.ggml.pre = "gpt-2"``: both
    # engines then cut text into the same pieces and produce the same ids.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        show_progress=False,
        special_tokens=list(ADDED),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    data: dict[str, Any] = json.loads(tokenizer.to_str())
    for entry in data["added_tokens"]:
        entry["special"] = entry["content"] in CONTROL
        entry["normalized"] = False
    _check_layout(data)
    return data


def _check_layout(data: dict[str, Any]) -> None:
    vocab: dict[str, int] = data["model"]["vocab"]
    if len(vocab) != VOCAB_SIZE or sorted(vocab.values()) != list(range(VOCAB_SIZE)):
        raise RuntimeError(f"tokenizer training gave {len(vocab)} tokens, not ids 0..{VOCAB_SIZE - 1}")
    for token_id, token in enumerate(ADDED):
        if vocab.get(token) != token_id:
            raise RuntimeError(f"added token {token!r} is not at id {token_id}")


def vocab_list(data: dict[str, Any]) -> list[str]:
    """Token strings by id (byte-level encoded, e.g. ``Ġdef``), as GGUF lists them."""
    vocab: dict[str, int] = data["model"]["vocab"]
    tokens = [""] * len(vocab)
    for token, token_id in vocab.items():
        tokens[token_id] = token
    return tokens


def merges_list(data: dict[str, Any]) -> list[str]:
    """Merges as ``"a b"`` strings (GGUF's form); tokenizers may store them as pairs."""
    merges: list[str | list[str]] = data["model"]["merges"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges]
