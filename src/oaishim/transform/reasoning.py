"""Split ``<think>…</think>`` out of a backend's content text: one small state machine per choice.

A backend started without a reasoning parser (TRT-LLM without ``--reasoning_parser``, vLLM without
``--reasoning-parser``, llama.cpp with ``--reasoning-format none``) sends the model's thinking as
``content``, tags and all. This stage turns that text back into ``reasoning`` and ``content``
pieces, token by token, the way the backends' own parsers would, with these rules:

* **The tag decides the state.** ``<think>`` starts reasoning and ``</think>`` starts content,
  wherever they appear, any number of times (MiniMax-M2 interleaves blocks with content and tool
  calls; llama.cpp also reads consecutive blocks). A tag that does not change the state (a
  ``<think>`` the model writes although the template opened one: which template revision a server
  loaded is not always known; a second ``</think>``) is markup too and is removed: the backends
  strip such a ``<think>`` (vLLM ``qwen3``/``deepseek_r1`` ``partition`` it away), and a ``</think>`` left in
  content is exactly the leak this stage exists to repair. vLLM keeps extra ``</think>`` in content
  (recording ``s5x_logit_bias_endthink``); we do not.
* **starts_in_reasoning**: the chat template already wrote ``<think>`` (Qwen3.5, DeepSeek-R1-0528,
  MiniMax-M2), so the text starts as reasoning and only ``</think>`` comes. If it never comes,
  everything stays reasoning, held text included, like vLLM's ``qwen3`` and ``deepseek_r1``
  parsers (recordings ``s3_force_regex_think``, ``s3x_think_regex_thinkstop``: all ``reasoning``,
  ``content: null``; ``s5x_think_regex_thinkstop`` even ends its reasoning with the partial
  ``</thi`` we also give back). Relabelling it as content at the end is not possible: in a stream
  it has already gone out as reasoning, and the plain-body path must agree with the stream.
* **Newlines right after a tag are framing, not text**, and are dropped (``\\n`` and ``\\r``
  only; spaces and other whitespace are kept). The model is trained on ``<think>\\n…\\n</think>\\n\\n``:
  Qwen3's own chat template rebuilds history with ``content.split('</think>')[-1].lstrip('\\n')``
  and ``reasoning.lstrip('\\n')``; llama.cpp skips all whitespace after ``</think>`` and strips the
  reasoning (``ls.chat_grammar``: ``reasoning_content "abc"``, ``content "Hello"``), and an
  official answer never opens with a blank line. vLLM 0.32 keeps them (``s5_think_regex_lb``:
  ``reasoning "\\nI am thinking.\\n"``, ``content "\\n\\nHello world"``); we give
  ``"I am thinking.\\n"`` and ``"Hello world"``. The newline *before* ``</think>`` stays in the
  reasoning: removing it would mean holding back every run of newlines until we know what follows,
  and this stage may delay the stream only by a partial tag.
* **Hold back only a possible tag.** A feed ending in ``<``, ``</th`` … keeps just that suffix
  (at most ``len(tag) - 1`` characters) until the next feed settles it; everything else goes out
  at once. ``flush()`` gives the held suffix back as text of the current kind: nothing is lost.
  Without tags the text is content, delayed by at most a trailing partial tag.

Concatenating the pieces' text plus the removed tags and the dropped newlines, in order, gives back
the input exactly (the tests check this at every split point).
"""

from __future__ import annotations

from typing import Final

from oaishim.transform.pieces import Piece, Text, TextKind, join_text

_NEWLINES: Final = "\r\n"
OPEN_TAG: Final = "<think>"
CLOSE_TAG: Final = "</think>"


def passes_fresh(text: str) -> bool:
    """Whether a new splitter with the default tags, not starting in reasoning, gives ``text`` (fed
    whole, then flushed) back as one content piece, unchanged, having split nothing: no tag can
    begin anywhere in it (``repair.repair_text`` then builds no splitter)."""
    return OPEN_TAG[0] not in text and CLOSE_TAG[0] not in text


class ReasoningSplitter:
    """Incremental ``<think>`` splitter for one choice: ``feed(text)`` / ``flush()`` → pieces."""

    __slots__ = ("_after_tag", "_close", "_first_chars", "_held", "_kind", "_max_held", "_open", "split")

    def __init__(
        self, *, starts_in_reasoning: bool = False, open_tag: str = OPEN_TAG, close_tag: str = CLOSE_TAG
    ) -> None:
        if not open_tag or not close_tag or open_tag in close_tag or close_tag in open_tag:
            raise ValueError(f"tags must be non-empty and not contain each other: {open_tag!r}, {close_tag!r}")
        if open_tag[0] in _NEWLINES or close_tag[0] in _NEWLINES:
            raise ValueError(f"tags must not start with a newline (newlines after a tag are dropped): {open_tag!r}")
        self._open, self._close = open_tag, close_tag
        self._first_chars = "".join(sorted({open_tag[0], close_tag[0]}))  # usually just "<"
        self._max_held = max(len(open_tag), len(close_tag)) - 1
        self._kind: TextKind = "reasoning" if starts_in_reasoning else "content"
        # Directly after a tag (or at the start, when the template opened <think>): newlines are framing.
        self._after_tag = starts_in_reasoning
        self._held = ""  # a suffix that may be the start of a tag
        self.split = False  # a tag was found: the text was split (for the operator's repair counts)

    def __repr__(self) -> str:
        trimming = " dropping-newlines" if self._after_tag else ""
        return f"<ReasoningSplitter in-{self._kind}{trimming} held={self._held!r}>"

    def feed(self, text: str) -> list[Piece]:
        """The pieces ``text`` settles, in order; a possible partial tag at its end is held."""
        if not self._held and not self._after_tag and len(self._first_chars) == 1 and self._first_chars not in text:
            # The common token: no "<" in it, so no tag can start here and it all goes out as is.
            return [Text(self._kind, text)] if text else []
        buf = self._held + text if self._held else text
        self._held = ""
        out: list[Piece] = []
        while buf:
            if self._after_tag:
                buf = buf.lstrip(_NEWLINES)
                if not buf:
                    break
                self._after_tag = False
            opens, closes = buf.find(self._open), buf.find(self._close)
            if opens == -1 and closes == -1:
                keep = self._partial_tag_len(buf)
                if keep:
                    self._held = buf[-keep:]
                    buf = buf[:-keep]
                if buf:
                    out.append(Text(self._kind, buf))
                break
            # The earlier tag wins; <think> always leads to reasoning and </think> to content.
            kind: TextKind
            if closes == -1 or (opens != -1 and opens < closes):
                at, end, kind = opens, opens + len(self._open), "reasoning"
            else:
                at, end, kind = closes, closes + len(self._close), "content"
            if at:
                out.append(Text(self._kind, buf[:at]))
            self._kind, self._after_tag, self.split = kind, True, True
            buf = buf[end:]
        return out

    def passes(self, text: str) -> TextKind | None:
        """The kind ``text`` would go out as, whole and with no change of state, or None when
        ``feed`` could do anything else with it (``transform.fastchunk`` asks before a feed)."""
        if not self._held and not self._after_tag and len(self._first_chars) == 1 and self._first_chars not in text:
            return self._kind
        return None

    def flush(self) -> list[Piece]:
        """End of the text: a held partial tag was text after all, of the current kind."""
        held, self._held = self._held, ""
        return [Text(self._kind, held)] if held else []

    def _partial_tag_len(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that a later feed could complete into a tag.

        Only the last ``max_held`` characters can matter, and only from a tag's first character on,
        so this is one ``str.find`` per distinct first character in the common case (no ``<``).
        """
        start = max(0, len(buf) - self._max_held)
        longest = 0
        for first in self._first_chars:
            at = buf.find(first, start)
            while at != -1:
                tail = buf[at:]
                if self._open.startswith(tail) or self._close.startswith(tail):
                    longest = max(longest, len(tail))
                    break
                at = buf.find(first, at + 1)
        return longest


def split_reasoning(
    text: str, *, starts_in_reasoning: bool = False, open_tag: str = "<think>", close_tag: str = "</think>"
) -> tuple[str, str]:
    """``(reasoning, content)`` of a whole text (plain bodies), by the same machine as streams."""
    splitter = ReasoningSplitter(starts_in_reasoning=starts_in_reasoning, open_tag=open_tag, close_tag=close_tag)
    pieces = splitter.feed(text) + splitter.flush()
    return join_text(pieces, "reasoning"), join_text(pieces, "content")


__all__ = ["ReasoningSplitter", "split_reasoning"]
