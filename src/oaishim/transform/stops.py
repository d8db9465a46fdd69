"""Stop strings at the gateway, with the semantics of OpenAI's ``stop`` (up to 4 strings).

Some backends ignore ``stop`` or apply it differently (vLLM keeps the string when
``include_stop_str_in_output`` is set, a backend that only knows stop *tokens* misses a string that
spans two tokens), so the gateway can apply it to the text itself. The rules:

* **The first stop to complete wins.** Text arrives in generation order, and a generator stops as
  soon as the text so far contains a stop string; so the stop whose occurrence *ends* earliest is the
  one that ends the text. With stops ``["ab", "abc"]`` and text ``"abc"`` that is ``"ab"``: the
  stream would have stopped before ``"c"`` existed, so the longer stop at the same start never gets
  the chance. Two stops ending at the same place (``["b", "ab"]`` on ``"ab"``): the one that starts
  earlier (the longer) wins, so no stop string is left in the output.
* **The text is cut at the start of that occurrence**; with ``include_stop=True`` (vLLM's
  ``include_stop_str_in_output``) at its end, so the stop string itself is kept. Everything after
  it, in that piece and in every later one, is dropped: ``feed`` returns ``""`` once ``hit`` is set.
* **Only a possible beginning of a stop is held back**: the longest tail that is a proper prefix of
  some stop string, never more than ``max(len(s) for s in stops) - 1`` characters. The rule above
  is what makes that bound enough: a stop that is already complete decides at once, it never has to
  wait to see whether a longer, earlier-starting one completes too.
* Empty stop strings are ignored (an empty string would "match" before the first character).

Splitting is invisible: any split of a text into pieces gives the same output, and the same ``hit``,
as the whole text in one piece (tested at every offset).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher"]


class StopMatcher:
    """``feed(text)`` returns the text that is safe to emit now; ``flush()`` what was held at the end.

    States: ``open`` (no stop seen yet, possibly holding a partial stop) and ``stopped`` (``hit``
    names the stop string that ended the text; nothing more comes out).
    """

    def __init__(self, stops: Sequence[str], *, include_stop: bool = False) -> None:
        # Deduplicated, order kept; the order never decides anything (see the module docstring).
        self.stops: tuple[str, ...] = tuple(dict.fromkeys(s for s in stops if s))
        self.include_stop = include_stop
        self.hit: str | None = None
        self._held = ""
        self._longest = max((len(s) for s in self.stops), default=0)

    @property
    def max_hold(self) -> int:
        """The most characters ``feed`` can ever hold back."""
        return max(self._longest - 1, 0)

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> str:
        if self.hit is not None:
            return ""
        if not self.stops:
            return text
        held = len(self._held)
        buf = self._held + text
        found = self._first_stop(buf, held)
        if found is not None:
            start, stop = found
            self.hit = stop
            self._held = ""
            return buf[: start + len(stop)] if self.include_stop else buf[:start]
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """No stop completed: the held tail was ordinary text after all."""
        held, self._held = self._held, ""
        return held

    def _first_stop(self, buf: str, held: int) -> tuple[int, str] | None:
        """The occurrence that ends first (ties: the one starting first), as ``(start, stop)``.

        The held tail contains no complete stop, so an occurrence must end in the new text: each
        search starts just far enough back to catch one that began inside the tail.
        """
        best: tuple[int, int, str] | None = None  # (end, start, stop)
        for stop in self.stops:
            start = buf.find(stop, max(held - len(stop) + 1, 0))
            if start < 0:
                continue
            end = start + len(stop)
            if best is None or (end, start) < best[:2]:
                best = (end, start, stop)
        return None if best is None else (best[1], best[2])

    def _partial_tail(self, buf: str) -> int:
        """Length of the longest tail of ``buf`` that is a proper prefix of some stop string.

        Only positions holding a stop's first character are tried (``str.find`` jumps between them),
        so the cost is bounded by the stop lengths, not by the text.
        """
        n = len(buf)
        best = n  # start of the longest partial tail found so far; n means none
        for stop in self.stops:
            first = stop[0]
            q = buf.find(first, max(n - len(stop) + 1, 0))
            while 0 <= q < best:
                if stop.startswith(buf[q:]):
                    best = q
                    break
                q = buf.find(first, q + 1)
        return n - best

    def __repr__(self) -> str:
        state = f"stopped by {self.hit!r}" if self.hit is not None else f"open, holding {self._held!r}"
        return f"<StopMatcher {list(self.stops)!r} {state}>"
