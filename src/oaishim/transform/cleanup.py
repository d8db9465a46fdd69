"""Display cleanup: markup stripped from streamed text, never a protected token; the end of turn noted.

Seed 003 (see :mod:`oaishim.transform.special`): a proxy's ``<\\|[^|]*\\|>`` cleanup also ate
``<|im_end|>``, the one token that told the front end the answer was complete. The rule that comes
out of it here:

* **The end signal travels apart from the display text.** :class:`DisplayCleanup` strips markup
  that is *not* protected, never a protected token, and sets ``saw_end_of_turn`` when an
  end-of-turn token passes, so the gateway can end the choice with ``finish_reason`` and ``[DONE]``
  whether or not the token stays visible.

:class:`Markup` says what may be stripped (:data:`CHATML_MARKUP`, seed 003's pattern, by default).
The text is cut by the same left-to-right scanner as
:class:`~oaishim.transform.special.SpecialTokenHolder`, so a protected token is never cut in two
and the result never depends on how the text was split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from oaishim.transform.special import SpecialTokens, _PartKind, _Scanner

__all__ = ["CHATML_MARKUP", "DisplayCleanup", "Markup"]


@dataclass(frozen=True, slots=True)
class Markup:
    """Display markup :class:`DisplayCleanup` may strip: one tag, and every unfinished tag.

    ``pattern`` matches one whole tag and must be self-delimiting: a match found in a prefix of the
    text stays the match whatever follows (tags that end in a closing delimiter are). ``partial``
    fullmatches every proper prefix of a tag (it may match more; that only holds text longer), so
    the cleanup holds back exactly the tails that could still become a tag. Tags longer than
    ``max_len`` are left alone, which bounds what is held: the decision about a tag never depends
    on more than ``max_len`` characters. Neither pattern may use inline global flags (``(?i)``;
    pass flags to ``re.compile``), lookbehind or ``^``.
    """

    pattern: re.Pattern[str]
    partial: re.Pattern[str]
    max_len: int = 64

    @classmethod
    def from_pattern(cls, pattern: re.Pattern[str], max_len: int = 64) -> Markup:
        """A tag pattern alone: without a ``partial`` every tail may be a tag, so ``max_len - 1``
        characters are always held back."""
        return cls(pattern, re.compile(".+", re.DOTALL), max_len)


# Seed 003's pattern (ChatML-like ``<|…|>`` tags and ``<s>``, ``</s>``), made safe by the protected set.
CHATML_MARKUP = Markup(
    pattern=re.compile(r"<\|[^|]*\|>|</?s>"),
    partial=re.compile(r"<(?:\|[^|]*\|?|/?s?)?"),
)


class DisplayCleanup:
    """Strips display markup from streamed text, never a protected token; notes the end of turn.

    ``strip`` is the markup to remove (default :data:`CHATML_MARKUP`, seed 003's pattern; a bare
    pattern is taken with :meth:`Markup.from_pattern`; ``None`` strips nothing). ``protect`` says
    which tokens are safe from it: every special token (default, seed 003's fix), or only the
    end-of-turn ones, so that e.g. a stray ``<|im_start|>`` is stripped too. End-of-turn tokens stay
    in the text by default (``keep_end_of_turn``) as in seed 003's fix; with ``False`` they are
    removed from the display, and either way ``saw_end_of_turn`` records them so the gateway can
    end the choice (``finish_reason``, ``[DONE]``) from the signal, not from the text.

    Holds back only possible partial tokens and tags. States: ``streaming`` and ``ended`` (an
    end-of-turn token has passed; text after it still flows, unless ``end_at_end_of_turn``, which
    the gateway sets: then nothing after the token comes out, however the text was split, and a
    backend that missed its own end of turn cannot run on).
    """

    def __init__(
        self,
        tokens: SpecialTokens,
        *,
        strip: Markup | re.Pattern[str] | None = CHATML_MARKUP,
        protect: Literal["special", "end_of_turn"] = "special",
        keep_end_of_turn: bool = True,
        end_at_end_of_turn: bool = False,
    ) -> None:
        markup = Markup.from_pattern(strip) if isinstance(strip, re.Pattern) else strip
        self.tokens = tokens
        self.keep_end_of_turn = keep_end_of_turn
        self.end_at_end_of_turn = end_at_end_of_turn
        self.protected = tokens.special if protect == "special" else tokens.end_of_turn
        self.end_token: str | None = None
        self.stripped: list[str] = []  # what was removed, in order, for logs and tests
        self._scanner = _Scanner(self.protected, markup)

    @property
    def saw_end_of_turn(self) -> bool:
        return self.end_token is not None

    @property
    def held(self) -> str:
        return self._scanner.buf

    def feed(self, text: str) -> str:
        return self._render(self._scanner.feed(text))

    def flush(self) -> str:
        return self._render(self._scanner.flush())

    def _render(self, parts: list[tuple[_PartKind, str]]) -> str:
        if self.end_at_end_of_turn and self.end_token is not None:
            return ""  # the turn ended: nothing after its token comes out, however the text was split
        out: list[str] = []
        for kind, text in parts:
            if kind == "strip":
                self.stripped.append(text)
                continue
            if kind == "keep" and text in self.tokens.end_of_turn:
                self.end_token = self.end_token or text
                if self.keep_end_of_turn:
                    out.append(text)
                if self.end_at_end_of_turn:
                    break
                continue
            out.append(text)
        return "".join(out)

    def __repr__(self) -> str:
        state = f"ended by {self.end_token!r}" if self.end_token is not None else "streaming"
        return f"<DisplayCleanup {state}, holding {self._scanner.buf!r}>"
