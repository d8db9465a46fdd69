"""The scanner behind every place that must keep special tokens whole in streamed text.

Backends send text in arbitrary pieces (``"<|im_"`` then ``"end|>"``). :class:`Scanner` cuts what it
is fed into plain text, protected tokens and markup, holding back only a tail that could still grow
into a token, so every token comes out whole, in one piece, and the result never depends on how the
text was split. (Multi-byte characters are already whole here: this level works on ``str``; the SSE
decoder joins split UTF-8.) :mod:`oaishim.transform.cleanup` strips display markup with it; the token
sets come from :mod:`oaishim.transform.special`.

Where tokens overlap, the text is read left to right and the longest token starting at a place
wins, as a tokenizer's added-token split does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

__all__ = ["PartKind", "Scanner"]

PartKind = Literal["text", "keep", "strip"]


class Scanner:
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

    def feed(self, text: str) -> list[tuple[PartKind, str]]:
        self.buf += text
        return self._parts(final=False)

    def flush(self) -> list[tuple[PartKind, str]]:
        return self._parts(final=True)

    def _parts(self, *, final: bool) -> list[tuple[PartKind, str]]:
        buf, i = self.buf, 0
        parts: list[tuple[PartKind, str]] = []
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
