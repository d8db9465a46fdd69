"""Reading a model's special tokens from its Hugging Face files (the I/O half of
:mod:`oaishim.transform.special`, which parses what is read)."""

from __future__ import annotations

from pathlib import Path

import orjson

from oaishim.transform.special import SpecialTokens, special_tokens_from_hf

__all__ = ["HF_FILES", "load_special_tokens"]

# Hugging Face files read from a model folder, each for the keys below that it happens to carry.
HF_FILES = ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "generation_config.json")


def load_special_tokens(path: Path) -> SpecialTokens:
    """The special and end-of-turn tokens of a Hugging Face model folder (the files in
    ``HF_FILES`` it has), or of one of its files; what each file says is read by
    :func:`~oaishim.transform.special.special_tokens_from_hf`."""
    if path.is_dir():
        files = [path / name for name in HF_FILES if (path / name).is_file()]
        if not files:
            raise FileNotFoundError(f"no tokenizer or generation config in {path} (looked for {', '.join(HF_FILES)})")
    else:
        files = [path]
    return special_tokens_from_hf([orjson.loads(file.read_bytes()) for file in files])
