"""The tiny local model: made on the spot, the same bytes every time, for llama.cpp and vLLM.

``oaishim serve`` and the engine tests need a real model that real engines load, without
downloading one. This makes it in about a second from things every machine has: a tokenizer
trained on Python's standard library (:mod:`._tokenizer`), seeded random weights
(:mod:`._weights`), a Qwen3-style chat template (:mod:`._template`), written as a GGUF
(:mod:`._gguf`) and as a Hugging Face folder (:mod:`._hf`). Its text is junk; its wire format,
special tokens, reasoning tags and tool-call tags are those of a Qwen3 model.

Layout of one build (``tiny-<key>/``)::

    tiny.gguf                 llama.cpp (~1.8 MB)
    hf/                       vLLM: config.json, model.safetensors (~0.8 MB), tokenizer.json,
                              tokenizer_config.json (with the template), generation_config.json
    tiny.json                 manifest: key, versions, token ids

Caching: builds live under ``cache_dir``, else ``$OAISHIM_CACHE``, else
``$XDG_CACHE_HOME/oaishim`` (``~/.cache/oaishim``). The key hashes everything the bytes depend
on: the generator's own source (so an edit never serves a stale model), the training text (it
differs between Python versions), and the versions of ``tokenizers``, ``gguf`` and ``numpy``.
A build is written into a temporary folder and renamed into place, so a process never sees half
a model; when two build at once, the first rename wins and the other's copy is dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from oaishim.engine._gguf import write_gguf
from oaishim.engine._hf import write_hf
from oaishim.engine._template import CHAT_TEMPLATE
from oaishim.engine._tokenizer import ADDED, CONTROL, EOS, corpus, train_tokenizer
from oaishim.engine._weights import SEED, SHAPE, hf_weights
from oaishim.transform.special import SpecialTokens

__all__ = ["GENERATOR_VERSION", "TinyModels", "build_tiny_models", "cache_root", "ensure_tiny_models", "main"]

GENERATOR_VERSION = 1  # the layout above; the cache key also hashes the source, see cache_key
_SOURCES = ("_tokenizer.py", "_weights.py", "_template.py", "_gguf.py", "_hf.py", "tinymodel.py")
MANIFEST = "tiny.json"
NEWLINE = "\n"
_BYTE_LEVEL_NEWLINE = "\u010a"  # "Ċ": how byte-level BPE spells the byte 0x0A

log = logging.getLogger("oaishim.engine")


@dataclass(frozen=True, slots=True)
class TinyModels:
    """Paths of one build, its protected tokens, and the ids of the tokens tests steer with."""

    root: Path
    gguf: Path
    hf_dir: Path
    tokenizer: Path
    special: SpecialTokens
    ids: Mapping[str, int]  # the seven added tokens and "\n" (for logit_bias)


def _special() -> SpecialTokens:
    return SpecialTokens.from_config(special=CONTROL, end_of_turn=[EOS])


def _models(root: Path, ids: Mapping[str, int]) -> TinyModels:
    hf_dir = root / "hf"
    return TinyModels(root, root / "tiny.gguf", hf_dir, hf_dir / "tokenizer.json", _special(), dict(ids))


def build_tiny_models(out: Path, texts: Sequence[str] | None = None, key: str = "") -> TinyModels:
    """Build into ``out`` (created; no caching, not atomic). ``texts``: the training corpus."""
    texts = list(texts) if texts is not None else corpus()
    tokenizer = train_tokenizer(texts)
    weights = hf_weights(SHAPE, SEED)
    out.mkdir(parents=True, exist_ok=True)
    write_gguf(out / "tiny.gguf", tokenizer, weights, SHAPE, CHAT_TEMPLATE)
    write_hf(out / "hf", tokenizer, weights, SHAPE, CHAT_TEMPLATE)
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    ids = {token: vocab[token] for token in ADDED} | {NEWLINE: vocab[_BYTE_LEVEL_NEWLINE]}
    manifest = {
        "generator": GENERATOR_VERSION,
        "key": key,
        "python": sys.version.split()[0],
        "versions": _versions(),
        "seed": SEED,
        "ids": ids,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return _models(out, ids)


ENGINE_PACKAGES = ("tokenizers", "gguf", "numpy")


def _versions() -> dict[str, str]:
    """Versions of the packages the bytes depend on; a clear error when the extra is missing."""
    try:
        return {name: version(name) for name in ENGINE_PACKAGES}
    except PackageNotFoundError as exc:
        raise RuntimeError(
            f"building the tiny model needs {', '.join(ENGINE_PACKAGES)}: pip install 'oaishim[engine]'"
        ) from exc


def cache_key(texts: Sequence[str]) -> str:
    """``py3.11-<hash>``: the Python version for people, the hash for exactness."""
    digest = hashlib.sha256(f"oaishim-tiny {GENERATOR_VERSION} {json.dumps(_versions(), sort_keys=True)}".encode())
    here = Path(__file__).parent
    for name in _SOURCES:
        source = here / name
        digest.update(b"\0" + (source.read_bytes() if source.is_file() else name.encode()))
    for text in texts:
        digest.update(b"\0" + text.encode())
    return f"py{sys.version_info.major}.{sys.version_info.minor}-{digest.hexdigest()[:16]}"


def cache_root(cache_dir: Path | None = None) -> Path:
    if cache_dir is not None:
        return cache_dir
    if env := os.environ.get("OAISHIM_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "oaishim"


def _load(root: Path) -> TinyModels:
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    return _models(root, {str(k): int(v) for k, v in manifest["ids"].items()})


def ensure_tiny_models(cache_dir: Path | None = None) -> TinyModels:
    """The cached build for this Python and these library versions, built first if missing."""
    texts = corpus()
    key = cache_key(texts)
    base = cache_root(cache_dir)
    final = base / f"tiny-{key}"
    if (final / MANIFEST).is_file():
        return _load(final)
    base.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log.info("building the tiny model in %s (a few seconds, once)", final)
    tmp = Path(tempfile.mkdtemp(prefix=f".tiny-{key}-", dir=base))
    try:
        build_tiny_models(tmp, texts, key)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / MANIFEST).is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built the tiny model in %.1f s", time.perf_counter() - started)
    return _load(final)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m oaishim.engine.tinymodel",
        description="Build (or find in the cache) the tiny random-weight model and print its paths.",
    )
    parser.add_argument("--out", type=Path, default=None, help="cache folder to build under (default: %(default)s → "
                        "$OAISHIM_CACHE or ~/.cache/oaishim)")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    models = ensure_tiny_models(args.out)
    print(f"gguf:      {models.gguf}")
    print(f"hf_dir:    {models.hf_dir}")
    print(f"tokenizer: {models.tokenizer}")
    print(f"ids:       {json.dumps(dict(models.ids), ensure_ascii=False)}")
    print(f"({time.perf_counter() - started:.2f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
