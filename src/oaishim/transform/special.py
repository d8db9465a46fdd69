"""Special tokens: which tokens a model protects, and which of them end its turn.

The failure this prevents: a proxy in front of vLLM cleaned ChatML markup out of the stream with
``<\\|[^|]*\\|>``. The pattern also matched ``<|im_end|>``, the one token that told the front end
the answer was complete, so the UI waited forever. Three rules come out of it:

* **The protected set comes from the tokenizer, not from a hand-written pattern.**
  :class:`SpecialTokens` is what the model's own files say (:func:`special_tokens_from_hf` for the
  JSON of a Hugging Face folder, :func:`special_tokens_from_gguf` for llama.cpp's metadata) or what
  configuration names, and says which tokens end the turn (eos/eot). Reading the files is I/O and
  lives outside this package (:mod:`oaishim.engine.tokens`).
* **A token is never cut in two**: :class:`oaishim.transform.markup.Scanner` holds back a tail
  that could still grow into a special token.
* **The end signal travels apart from the display text.** ``cleanup.DisplayCleanup`` strips only
  tokens it is told are markup, never an end-of-turn token, and notes when one passes.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["SpecialTokens", "special_tokens_from_gguf", "special_tokens_from_hf"]


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    """The model's protected tokens; ``end_of_turn`` (eos/eot) is always a subset of ``special``."""

    special: frozenset[str] = frozenset()
    end_of_turn: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        end = frozenset(t for t in self.end_of_turn if t)
        object.__setattr__(self, "end_of_turn", end)
        object.__setattr__(self, "special", frozenset(t for t in self.special if t) | end)

    @classmethod
    def from_config(cls, special: Iterable[str] = (), end_of_turn: Iterable[str] = ()) -> SpecialTokens:
        return cls(frozenset(special), frozenset(end_of_turn))

    def union(self, other: SpecialTokens) -> SpecialTokens:
        """Tokens read from the model plus tokens named in configuration."""
        return SpecialTokens(self.special | other.special, self.end_of_turn | other.end_of_turn)


# ---------------------------------------------------------------------------------------------------
# What the model's files say

# Named token fields of tokenizer_config.json / special_tokens_map.json: only eos ends the turn.
_NAMED_TOKENS: Final = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")
_END_NAMED: Final = frozenset({"eos_token"})


@dataclass(slots=True)
class _Found:
    """What the files said so far; ``end_ids`` are resolved through ``ids`` once all are read."""

    ids: dict[int, str] = field(default_factory=dict)
    special: set[str] = field(default_factory=set)
    end: set[str] = field(default_factory=set)
    end_ids: set[int] = field(default_factory=set)

    def result(self) -> SpecialTokens:
        end = self.end | {self.ids[i] for i in self.end_ids if i in self.ids}
        return SpecialTokens(frozenset(self.special), frozenset(end))


def special_tokens_from_hf(documents: Iterable[Any]) -> SpecialTokens:
    """The special and end-of-turn tokens the JSON documents of a Hugging Face model say, together.

    Read: ``added_tokens_decoder`` entries marked ``"special": true`` and the named tokens
    (``eos_token`` ends the turn; ``bos_token``, ``pad_token``, … are only protected), strings or
    ``{"content": …}`` objects, and ``additional_special_tokens`` / ``extra_special_tokens``
    (tokenizer_config.json, special_tokens_map.json); ``added_tokens`` marked special
    (tokenizer.json); ``eos_token_id``, one id or a list, mapped to text through the added tokens
    of any document (generation_config.json: Qwen3 lists ``<|endoftext|>`` there besides
    ``<|im_end|>``, and MiniMax-M2 names its eos only there). Each document is read for whichever of
    these keys it has; one that is not a JSON object says nothing. Reading the files is
    :func:`oaishim.engine.tokens.load_special_tokens`.
    """
    found = _Found()
    for data in documents:
        if isinstance(data, Mapping):
            _read_hf(data, found)
    return found.result()


def _read_hf(data: Mapping[str, Any], found: _Found) -> None:
    decoder = data.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for key, entry in decoder.items():
            _added(found, _as_int(key), entry)
    added = data.get("added_tokens")
    if isinstance(added, list):
        for entry in added:
            _added(found, _as_int(entry.get("id")) if isinstance(entry, dict) else None, entry)
    for name in _NAMED_TOKENS:
        text = _token_text(data.get(name))
        if text:
            found.special.add(text)
            if name in _END_NAMED:
                found.end.add(text)
    for name in ("additional_special_tokens", "extra_special_tokens"):
        extra = data.get(name)
        values = extra.values() if isinstance(extra, dict) else extra if isinstance(extra, list) else ()
        found.special.update(t for t in map(_token_text, values) if t)
    eos_ids = data.get("eos_token_id")
    for value in eos_ids if isinstance(eos_ids, list) else [eos_ids]:
        token_id = _as_int(value)
        if token_id is not None:
            found.end_ids.add(token_id)


def _added(found: _Found, token_id: int | None, entry: Any) -> None:
    if not isinstance(entry, dict):
        return
    text = _token_text(entry)
    if not text:
        return
    if token_id is not None:
        found.ids[token_id] = text
    if entry.get("special") is True:
        found.special.add(text)


def _token_text(value: Any) -> str | None:
    """A token written as a string or as an ``AddedToken`` object (``{"content": …}``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _as_int(value: Any) -> int | None:
    """An id as JSON or GGUF readers give it: an int, or a decimal string (dict keys, llama-cpp-python)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return int(value) if value.strip().lstrip("-").isdigit() else None
    try:
        return operator.index(value)  # int, or a NumPy integer from the gguf package's reader
    except TypeError:
        return None


GGUF_CONTROL: Final = 3  # llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
# Token-id keys of GGUF metadata: eos/eot/eom end generation in llama.cpp (its "end of generation" set).
_GGUF_END_IDS: Final = ("eos", "eot", "eom")
_GGUF_OTHER_IDS: Final = ("bos", "unknown", "padding", "separator", "mask", "cls")


def special_tokens_from_gguf(metadata: Mapping[str, Any]) -> SpecialTokens:
    """Control tokens (type 3) plus every token a ``tokenizer.ggml.*_token_id`` key names.

    Ids may be ints or decimal strings (llama-cpp-python's ``Llama.metadata`` gives strings); ids
    outside the token list are ignored. User-defined tokens (type 4, e.g. Qwen3's ``<think>``) are
    ordinary text, as they are for the Hugging Face tokenizer.
    """
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return SpecialTokens()
    types = metadata.get("tokenizer.ggml.token_type")
    types = types if isinstance(types, list) else []
    special = {tok for tok, kind in zip(tokens, types, strict=False) if _as_int(kind) == GGUF_CONTROL}

    def named(roles: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        for role in roles:
            token_id = _as_int(metadata.get(f"tokenizer.ggml.{role}_token_id"))
            if token_id is not None and 0 <= token_id < len(tokens):
                out.add(tokens[token_id])
        return out

    special |= named(_GGUF_OTHER_IDS)
    return SpecialTokens(frozenset(t for t in special if isinstance(t, str)), frozenset(named(_GGUF_END_IDS)))
