"""Display cleanup: named markup stripped from streamed text, never an end-of-turn token.

The failure this prevents (see :mod:`oaishim.transform.special`): a proxy's ``<\\|[^|]*\\|>`` cleanup also ate
``<|im_end|>``, the one token that told the front end the answer was complete. Two rules come out
of it here:

* **What is markup is a list, not a pattern.** The cleanup strips the tokenizer's special tokens
  that are not protected and the literal markup a profile names, each matched whole. A pattern
  such as ``<\\|[^|]*\\|>`` also matches text the model wrote (``{"city": "<||>"}`` in a tool
  call's arguments), and the model's text must reach the client byte for byte wherever it is not
  a token the gateway owns.
* **The end signal travels apart from the display text.** :class:`DisplayCleanup` sets
  ``saw_end_of_turn`` when an end-of-turn token passes, so the gateway can end the choice with
  ``finish_reason`` and ``[DONE]`` whether or not the token stays visible.

The text is cut by the left-to-right scanner of :mod:`oaishim.transform.markup`, so no token is
ever cut in two and the result never depends on how the text was split. In the gateway the stripping runs after the tool
call parser, on display text only (``transform.repair``): never inside a call's arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from oaishim.transform.markup import PartKind, Scanner
from oaishim.transform.special import SpecialTokens

__all__ = ["DisplayCleanup", "display_markup"]


def display_markup(tokens: SpecialTokens, named: Iterable[str] = ()) -> frozenset[str]:
    """What a display cleanup may strip: the special tokens that do not end the turn (``<|im_start|>``,
    ``<s>``), plus markup named in configuration; an end-of-turn token never."""
    return (tokens.special - tokens.end_of_turn | frozenset(t for t in named if t)) - tokens.end_of_turn


class DisplayCleanup:
    """Keeps protected tokens whole, strips named markup, notes the end of turn.

    ``protect`` says which tokens are kept whole and never stripped: every special token (default)
    or only the end-of-turn ones, in which case the other special tokens are stripped (a stray
    ``<|im_start|>`` in the display text). ``markup`` names more literal strings to strip (never a
    protected token). End-of-turn tokens stay in the text by default (``keep_end_of_turn``); with
    ``False`` they are removed from the display, and either way ``saw_end_of_turn`` records them.

    Holds back only a tail that could still grow into a token. States: ``streaming`` and ``ended``
    (an end-of-turn token has passed; text after it still flows, unless ``end_at_end_of_turn``,
    which the gateway sets: then nothing after the token comes out, however the text was split,
    and a backend that missed its own end of turn cannot run on).
    """

    def __init__(
        self,
        tokens: SpecialTokens,
        *,
        markup: Iterable[str] = (),
        protect: Literal["special", "end_of_turn"] = "special",
        keep_end_of_turn: bool = True,
        end_at_end_of_turn: bool = False,
    ) -> None:
        self.tokens = tokens
        self.keep_end_of_turn = keep_end_of_turn
        self.end_at_end_of_turn = end_at_end_of_turn
        self.protected = tokens.special if protect == "special" else tokens.end_of_turn
        self.end_token: str | None = None
        self.stripped: list[str] = []  # what was removed, in order, for logs and tests
        strip = (tokens.special - self.protected) | frozenset(markup)
        self._scanner = Scanner(self.protected, strip)

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

    def _render(self, parts: list[tuple[PartKind, str]]) -> str:
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
