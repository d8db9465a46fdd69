"""Tool calls that a backend started without a tool parser leaves as raw text in ``content``.

vLLM without ``--tool-call-parser`` refuses ``tool_choice: "auto"``, and SGLang or TRT-LLM without
one simply send the model's call markup as text (docs/backend-quirks.md V-5, cross-server table). This
stage reads that text back into tool calls, token by token, for four formats, one module each:

* ``hermes`` (Hermes, Qwen 2.5/3, ``_hermes``): ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``,
  one call per tag, any number of tags;
* ``minimax`` (MiniMax-M2, ``_minimax``): ``<minimax:tool_call><invoke name="f"><parameter
  name="k">v</parameter>…</invoke>…</minimax:tool_call>``, any number of invokes per block;
* ``llama3`` (Llama 3.x JSON, ``_llama``): the whole message is ``{"name": …, "parameters": {…}}``
  (or ``"arguments"``), maybe after ``<|python_tag|>``, several joined by ``;``;
* ``mistral`` (``_mistral``): ``[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`` (tokenizer v3/v7),
  ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`` (v11) and ``[TOOL_CALLS]name[ARGS]{…}`` (v13+), one
  marker per call in the last two.

Each format is a ``Frame`` (``_frames``), fed one character at a time from its opening marker on;
the JSON formats follow their text with ``_json.Json``. This module holds the parser that finds the
markers, runs the frames and settles the text around them.

The rules, and why:

* **The name goes out first, then the arguments as they arrive.** A call's ``CallStart`` is
  emitted as soon as its name is known (its ``call_…`` id is new: the model wrote none we could
  keep). JSON arguments objects are streamed character by character as the model writes them: a
  small JSON syntax checker (``_json.Json``) follows the text, so we know exactly where the
  arguments value ends and nothing needs holding back; the raw text of a well-formed object is
  valid JSON. ``"arguments": "<json text>"`` (a string) is decoded and sent whole when the string
  closes; ``null``, ``""`` or no arguments key give ``{}``. MiniMax values are sent one parameter at
  a time (see ``_minimax._param_json`` for how a value gets its JSON type).
* **A call commits when its CallStart goes out.** Before that, anything that stops being a call
  (bad JSON, no name, an unknown markup, the stream ending) is given back as content, markup and
  all, and the text after the breaking point is read again (it may hold the next call). After it,
  the call stays, since a stream cannot take back a delta: a stream that ends inside the arguments
  (``max_tokens``) leaves them cut short, as OpenAI does under ``finish_reason: "length"``, and
  text that breaks the call later is given back as content from the point where it broke.
* **Llama-3 JSON is only a call when it is unmistakably one**, because a ``json_object`` answer
  looks the same (the exact conditions are in ``_llama``). ``tool_names`` gates only this format:
  the tagged ones say outright that they are calls.
* **Whitespace around calls is framing.** At the start of the message and after a call, a run of
  pure whitespace is held: it is dropped when a call or the end of the message follows (so a
  message of only calls has no content, like OpenAI's ``content: null``), and given back with the
  text otherwise. Text before a call goes out at once, holding back only a possible partial
  opening marker. Closing markup cut off by the end of the stream after complete calls (a
  ``</tool_call>`` removed by a stop string, a missing ``]``) is markup and is dropped.

So the content pieces, the calls' names and arguments and the removed markup together account for
every character of the input, and the result does not depend on how the text was split into
feeds (the tests check both at every split point).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, Literal

from oaishim.transform.pieces import CallStart, Piece, Text
from oaishim.transform.toolcalls._frames import Frame, Out
from oaishim.transform.toolcalls._hermes import Hermes
from oaishim.transform.toolcalls._json import Bad
from oaishim.transform.toolcalls._llama import Llama
from oaishim.transform.toolcalls._minimax import Minimax
from oaishim.transform.toolcalls._mistral import Mistral

ToolFormat = Literal["hermes", "minimax", "llama3", "mistral"]
ALL_FORMATS: Final[tuple[ToolFormat, ...]] = ("hermes", "minimax", "llama3", "mistral")

_PYTHON_TAG: Final = "<|python_tag|>"

# The opening markers of the tagged formats; Llama JSON has none and is found at the start only.
_MARKERS: Final[dict[str, str]] = {"hermes": "<tool_call>", "minimax": "<minimax:tool_call>", "mistral": "[TOOL_CALLS]"}
_FRAMES: Final[dict[str, Callable[[Out, str, str, Collection[str]], Frame]]] = {
    "<tool_call>": Hermes,
    "<minimax:tool_call>": Minimax,
    "[TOOL_CALLS]": Mistral,
    _PYTHON_TAG: Llama,
    "": Llama,
}


# ---------------------------------------------------------------------------------------------------
# The parser


class ToolCallParser:
    """Incremental tool-call reader for one choice: ``feed(text)`` / ``flush()`` → pieces.

    Three states: *boundary* (message start or right after calls: whitespace is held), *text*
    (content goes out, holding back only a possible partial marker) and *in a frame* (reading the
    markup of one format; see the module docstring for the rules).
    """

    __slots__ = ("_at_start", "_boundary", "_buf", "_first_chars", "_frame", "_markers", "_names", "_out", "_ws")

    def __init__(self, formats: Sequence[ToolFormat] = ALL_FORMATS, *, tool_names: Collection[str] = ()) -> None:
        unknown = [f for f in formats if f not in ALL_FORMATS]
        if unknown:
            raise ValueError(f"unknown tool-call formats {unknown}; known: {list(ALL_FORMATS)}")
        self._markers = tuple(marker for fmt, marker in _MARKERS.items() if fmt in formats)
        self._first_chars = frozenset(marker[0] for marker in self._markers)
        self._names = frozenset(tool_names)
        self._out = Out()
        self._buf = ""  # text not yet settled
        self._ws = ""  # whitespace held at a boundary
        self._frame: Frame | None = None
        self._boundary = True
        self._at_start = "llama3" in formats  # nothing but whitespace so far: Llama JSON may begin

    def __repr__(self) -> str:
        where = repr(self._frame) if self._frame else "boundary" if self._boundary else "text"
        return f"<ToolCallParser {where} calls={self._out.calls} held={self._ws + self._buf!r}>"

    @property
    def calls_made(self) -> int:
        return self._out.calls

    def feed(self, text: str) -> list[Piece]:
        """The pieces ``text`` settles, in order."""
        if not (self._buf or self._boundary or self._frame) and self._first_chars.isdisjoint(text):
            return [Text("content", text)] if text else []  # the common token: plain content
        self._buf += text
        while self._buf and self._advance():
            pass
        return self._out.take()

    def flush(self) -> list[Piece]:
        """The end of the text: what is held is settled, and given back as content unless it is framing."""
        while self._buf and self._advance():
            pass
        frame, self._frame = self._frame, None
        if frame is not None:
            raw = frame.text()
            if not frame.committed:
                self._out.text(frame.lead + raw)
            elif not frame.finish() and raw[frame.mark :].strip():
                self._out.text(raw[frame.mark :])
        else:
            tail = self._ws + self._buf
            if not self._boundary or not self._out.calls or tail.strip():
                self._out.text(tail)
        self._buf = self._ws = ""
        return self._out.take()

    # -- states
    def _advance(self) -> bool:
        """Settle what the buffer allows; False when more text is needed."""
        if self._frame is not None:
            return self._step_frame(self._frame)
        if self._boundary:
            return self._scan_boundary()
        return self._scan_text()

    def _scan_text(self) -> bool:
        buf = self._buf
        found = [(buf.find(marker), marker) for marker in self._markers if marker in buf]
        if found:
            at, marker = min(found)
            self._out.text(buf[:at])
            self._open(marker, buf[at + len(marker) :], "")
            return True
        keep = _partial_marker(buf, self._markers)
        self._out.text(buf[: len(buf) - keep])
        self._buf = buf[len(buf) - keep :]
        return False

    def _scan_boundary(self) -> bool:
        rest = self._buf.lstrip()
        self._ws += self._buf[: len(self._buf) - len(rest)]
        self._buf = rest
        if not rest:
            return False
        openers = (*self._markers, _PYTHON_TAG) if self._at_start else self._markers
        for marker in openers:
            if rest.startswith(marker):
                self._open(marker, rest[len(marker) :], self._ws)
                return True
        if any(marker.startswith(rest) for marker in openers):
            return False  # maybe a marker: wait
        if self._at_start and rest[0] == "{":
            self._open("", rest, self._ws)
            return True
        self._out.text(self._ws)
        self._ws, self._boundary, self._at_start = "", False, False
        return True

    def _open(self, marker: str, rest: str, lead: str) -> None:
        self._frame = _FRAMES[marker](self._out, marker, lead, self._names)
        self._buf, self._ws, self._boundary, self._at_start = rest, "", False, False

    def _step_frame(self, frame: Frame) -> bool:
        for n, ch in enumerate(self._buf):
            try:
                frame.step(ch)
            except Bad as bad:
                self._buf = self._buf[n + 1 :]
                self._give_back(frame, frame.pos if bad.at is None else bad.at)
                return True
            if frame.done_at >= 0:
                self._buf = self._buf[n + 1 :]
                self._close(frame)
                return True
        self._buf = ""
        return False

    def _give_back(self, frame: Frame, at: int) -> None:
        """The frame broke at ``raw[at]``: what it had not accounted for is content; read on from ``at``."""
        self._frame = None
        raw = frame.text()
        at = max(at, frame.mark)
        self._buf = raw[at:] + self._buf
        if not frame.committed:
            self._out.text(frame.lead + raw[:at])
            return
        gap = raw[frame.mark : at]
        if gap.strip():
            self._out.text(gap)
        else:
            self._ws, self._boundary = gap, True  # only whitespace since the last call: still framing

    def _close(self, frame: Frame) -> None:
        self._frame = None
        raw = frame.text()
        self._buf = raw[frame.done_at :] + self._buf
        if frame.committed:
            self._boundary = True
        else:
            self._out.text(frame.lead + raw[: frame.done_at])  # markup with no call in it


def _partial_marker(text: str, markers: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that may be the start of a marker."""
    for size in range(min(len(text), max(map(len, markers), default=1) - 1), 0, -1):
        tail = text[-size:]
        if any(marker.startswith(tail) for marker in markers):
            return size
    return 0


def parse_tool_calls(
    text: str, formats: Sequence[ToolFormat] = ALL_FORMATS, tool_names: Collection[str] = ()
) -> tuple[str | None, list[dict[str, Any]]]:
    """A whole message at once (plain bodies): its content (None when it is only calls) and its calls.

    The same parser as the stream, fed once, so both paths agree.
    """
    parser = ToolCallParser(formats, tool_names=tool_names)
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    for piece in parser.feed(text) + parser.flush():
        if isinstance(piece, Text):
            content.append(piece.text)
        elif isinstance(piece, CallStart):
            calls.append({"id": piece.id, "type": "function", "function": {"name": piece.name, "arguments": ""}})
        else:
            calls[piece.index]["function"]["arguments"] += piece.text
    joined = "".join(content)
    return (joined or None) if calls else joined, calls


__all__ = ["ALL_FORMATS", "ToolCallParser", "ToolFormat", "parse_tool_calls"]
