"""Special tokens in streamed text: which tokens they are, and keeping each one whole.

The failure this prevents: a proxy in front of vLLM cleaned ChatML markup out of the stream with ``<\\|[^|]*\\|>``. The pattern also
matched ``<|im_end|>``, the one token that told the front end the answer was complete, so the UI
waited forever. Three rules come out of it; the first two live here, the third in
:mod:`oaishim.transform.cleanup`:

* **The protected set comes from the tokenizer, not from a hand-written pattern.**
  :class:`SpecialTokens` is read from the model's own files (:func:`load_special_tokens` for a
  Hugging Face folder, :func:`special_tokens_from_gguf` for llama.cpp) or from configuration, and
  says which tokens end the turn (eos/eot).
* **A token is never cut in two.** Backends send text in arbitrary pieces (``"<|im_"`` then
  ``"end|>"``); :class:`SpecialTokenHolder` holds back a tail that could still grow into a special
  token, so every token comes out whole, in one piece. (Multi-byte characters are already whole
  here: this level works on ``str``; the SSE decoder joins split UTF-8.)
* **The end signal travels apart from the display text.** ``cleanup.DisplayCleanup`` strips only
  tokens it is told are markup, never an end-of-turn token, and notes when one passes.

Where tokens overlap, the text is read left to right and the longest token starting at a place
wins, as a tokenizer's added-token split does; the result never depends on how the text was split.
The scanner that does this (``_Scanner``) serves both :class:`SpecialTokenHolder` and the cleanup.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

__all__ = [
    "SpecialTokenHolder",
    "SpecialTokens",
    "load_special_tokens",
    "special_tokens_from_gguf",
]


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
# Reading the model's files

# Hugging Face files read from a model folder, each for the keys below that it happens to carry.
HF_FILES = ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "generation_config.json")
# Named token fields of tokenizer_config.json / special_tokens_map.json: only eos ends the turn.
_NAMED_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")
_END_NAMED = frozenset({"eos_token"})


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


def load_special_tokens(path: Path) -> SpecialTokens:
    """The special and end-of-turn tokens of a Hugging Face model folder, or of one of its files.

    Read: ``added_tokens_decoder`` entries marked ``"special": true`` and the named tokens
    (``eos_token`` ends the turn; ``bos_token``, ``pad_token``, … are only protected), strings or
    ``{"content": …}`` objects, and ``additional_special_tokens`` / ``extra_special_tokens``
    (tokenizer_config.json, special_tokens_map.json); ``added_tokens`` marked special
    (tokenizer.json); ``eos_token_id``, one id or a list, mapped to text through the added tokens
    (generation_config.json: Qwen3 lists ``<|endoftext|>`` there besides ``<|im_end|>``, and
    MiniMax-M2 names its eos only there). A single file is read for whichever of these keys it has.
    """
    if path.is_dir():
        files = [path / name for name in HF_FILES if (path / name).is_file()]
        if not files:
            raise FileNotFoundError(f"no tokenizer or generation config in {path} (looked for {', '.join(HF_FILES)})")
    else:
        files = [path]
    found = _Found()
    for file in files:
        data = orjson.loads(file.read_bytes())
        if isinstance(data, dict):
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


GGUF_CONTROL = 3  # llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
# Token-id keys of GGUF metadata: eos/eot/eom end generation in llama.cpp (its "end of generation" set).
_GGUF_END_IDS = ("eos", "eot", "eom")
_GGUF_OTHER_IDS = ("bos", "unknown", "padding", "separator", "mask", "cls")


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


# ---------------------------------------------------------------------------------------------------
# Holding streamed text

_PartKind = Literal["text", "keep", "strip"]


class _Scanner:
    """Cuts text into plain text, protected tokens (``keep``) and markup (``strip``), left to right.

    Both sets are literal strings (a tokenizer's special tokens, markup a profile names): no
    pattern decides what is markup, so ordinary text the model wrote (``<||>``, ``<|x|>`` inside a
    tool call's arguments) is never mistaken for it. At each place the longest token wins; a
    string in both sets is kept. A token is emitted only once it is decided: everything before the
    *hold point* is, the hold point being the first place where the rest of the buffer is still a
    proper prefix of a token, so whatever follows could change what is there.
    """

    def __init__(self, keep: Iterable[str], strip: Iterable[str] = ()) -> None:
        kept = {t for t in keep if t}
        self._strip = frozenset(t for t in strip if t) - kept
        tokens = sorted(kept | self._strip, key=lambda t: (-len(t), t))
        self._tokens = re.compile("|".join(map(re.escape, tokens))) if tokens else None
        self._longest = len(tokens[0]) if tokens else 0
        self._prefixes = frozenset(t[:k] for t in tokens for k in range(1, len(t)))
        firsts = "".join(sorted({t[0] for t in tokens}))
        self._firsts = re.compile(f"[{re.escape(firsts)}]") if firsts else None
        self.buf = ""

    def feed(self, text: str) -> list[tuple[_PartKind, str]]:
        self.buf += text
        return self._parts(final=False)

    def flush(self) -> list[tuple[_PartKind, str]]:
        return self._parts(final=True)

    def _parts(self, *, final: bool) -> list[tuple[_PartKind, str]]:
        buf, i = self.buf, 0
        parts: list[tuple[_PartKind, str]] = []
        while True:
            hold = len(buf) if final else self._hold_point(buf, i)
            found = self._tokens.search(buf, i) if self._tokens is not None else None
            if found is None or found.start() >= hold:
                if hold > i:
                    parts.append(("text", buf[i:hold]))
                self.buf = buf[hold:]
                return parts
            start, end = found.span()
            if start > i:
                parts.append(("text", buf[i:start]))
            token = found.group()
            parts.append(("strip" if token in self._strip else "keep", token))
            i = end

    def _hold_point(self, buf: str, i: int) -> int:
        n = len(buf)
        if self._firsts is not None:
            for first in self._firsts.finditer(buf, max(i, n - self._longest + 1)):
                if buf[first.start() :] in self._prefixes:
                    return first.start()
        return n


class SpecialTokenHolder:
    """``feed(text)`` returns the text with no special token cut in two; ``flush()`` the held tail.

    Holds back only a tail that is a proper prefix of a special token: never more than the
    longest token's length minus one. State: the held tail.
    """

    def __init__(self, tokens: SpecialTokens | Iterable[str]) -> None:
        special = tokens.special if isinstance(tokens, SpecialTokens) else tokens
        self._scanner = _Scanner(special)

    @property
    def held(self) -> str:
        return self._scanner.buf

    def feed(self, text: str) -> str:
        return "".join(text for _, text in self._scanner.feed(text))

    def flush(self) -> str:
        return "".join(text for _, text in self._scanner.flush())

    def __repr__(self) -> str:
        return f"<SpecialTokenHolder holding {self._scanner.buf!r}>"
