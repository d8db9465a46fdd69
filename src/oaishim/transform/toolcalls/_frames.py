"""Frames: the markup of one format, from its opening marker on, and what they share.

:class:`Frame` is the base every format's reader derives from (one module per format: ``_hermes``,
``_llama``, ``_mistral``, ``_minimax``); :class:`Out` collects the pieces they emit;
:class:`ObjectCall` reads one call written as a JSON object, for the formats that write one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any, Final

from oaishim.transform.ids import call_id
from oaishim.transform.pieces import CallArgs, CallStart, Piece, Text, merge
from oaishim.transform.toolcalls._json import DONE, KEY, MEMBER, START, Bad, Json

_ARGS_KEYS: Final = frozenset({"arguments", "parameters"})
_ARGS_KINDS: Final = {"{": "object", '"': "string", "n": "null"}


class ObjectCall:
    """One call written as a JSON object: ``{"name": …, "arguments"|"parameters": …}``, any key order.

    ``eager``: the name alone makes it a call (tagged formats); otherwise the arguments must have
    begun, or the object closed (Llama JSON). ``strict``: no other keys (Llama JSON, where any other
    key means an ordinary JSON answer); the tagged formats skip them (Mistral v3 writes an ``id``).
    """

    def __init__(self, *, eager: bool, strict: bool = False, names: Collection[str] = ()) -> None:
        self.json = Json()
        self.eager, self.strict, self.names = eager, strict, names
        self.name: str | None = None
        self.seen: set[str] = set()
        self.args_kind = ""  # "object" | "string" | "null" once the arguments value began
        self.args_start = -1
        self.args_end = -1  # set when an arguments object closed
        self.args_whole: str | None = None  # arguments given whole (string, null, none), not yet taken
        self.sent = 0  # characters of an arguments object already taken
        self.started = False  # its CallStart went out
        self.done = False

    def __repr__(self) -> str:
        return f"<ObjectCall name={self.name!r} args={self.args_kind or '-'} done={self.done} {self.json!r}>"

    def step(self, ch: str) -> None:
        doc = self.json
        events = doc.step(ch)
        if events & KEY:
            slot = "arguments" if doc.key in _ARGS_KEYS else doc.key
            known = slot in ("name", "arguments")
            if (known and slot in self.seen) or (self.strict and not known):
                raise Bad()
            self.seen.add(slot)
        if events & START and doc.key in _ARGS_KEYS:
            self.args_kind = _ARGS_KINDS.get(ch, "")
            if not self.args_kind:
                raise Bad()  # arguments must be an object (or JSON text in a string)
            self.args_start = doc.start
        if events & MEMBER:
            if doc.key == "name":
                self._name(json.loads(doc.text(doc.start, doc.end)))
            elif doc.key in _ARGS_KEYS:
                self._args_closed(doc.text(doc.start, doc.end))
        if events & DONE:
            if self.name is None:
                raise Bad()
            if not self.args_kind:
                self.args_whole = "{}"
            self.done = True

    def _name(self, value: Any) -> None:
        if not isinstance(value, str) or not value.strip() or (self.names and value not in self.names):
            raise Bad()
        self.name = value

    def _args_closed(self, value: str) -> None:
        if self.args_kind == "object":
            self.args_end = self.args_start + len(value)
        elif self.args_kind == "string":
            text = json.loads(value)
            self.args_whole = text if text.strip() else "{}"
        else:
            self.args_whole = "{}"

    def ready_name(self) -> str | None:
        """The name, once the call may start."""
        if self.name is not None and (self.eager or self.args_kind or self.done):
            return self.name
        return None

    def take_args(self) -> str:
        """The arguments text that arrived since the last take."""
        if self.args_kind == "object":
            stop = self.args_end if self.args_end >= 0 else len(self.json.chars)
            text = self.json.text(self.args_start + self.sent, stop)
            self.sent += len(text)
            return text
        text, self.args_whole = self.args_whole or "", None
        return text


class Out:
    """The pieces produced so far, and how many calls were started."""

    __slots__ = ("calls", "pieces")

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.calls = 0

    def text(self, text: str) -> None:
        if text:
            self.pieces.append(Text("content", text))

    def start(self, name: str) -> int:
        self.pieces.append(CallStart(self.calls, call_id(None), name))
        self.calls += 1
        return self.calls - 1

    def args(self, index: int, text: str) -> None:
        if text:
            self.pieces.append(CallArgs(index, text))

    def take(self) -> list[Piece]:
        pieces, self.pieces = merge(self.pieces), []
        return pieces


class Frame:
    """One run of call markup in one format, from its opening marker on, read one character at a time.

    ``raw`` holds every character the frame took (its marker first); ``raw[:mark]`` is accounted for
    by pieces already emitted or is markup of those calls. When the frame breaks, ``raw[mark:]`` is
    given back (before the first call: with ``lead``, the whitespace held before the marker). The
    frame sets ``done_at`` when it is complete; ``raw[done_at:]`` is read again as text.
    """

    state: Callable[[str], None]

    def __init__(self, out: Out, marker: str, lead: str) -> None:
        self.out = out
        self.raw = list(marker)
        self.lead = lead
        self.mark = 0
        self.committed = False  # a CallStart went out
        self.index = -1  # of the current call
        self.done_at = -1
        self.tag_start = -1  # where the markup tag being matched began

    def __repr__(self) -> str:
        state = getattr(self.state, "__name__", "?").removeprefix("_in_")
        return f"<{type(self).__name__} {state} call={self.index} raw={len(self.raw)} mark={self.mark}>"

    @property
    def pos(self) -> int:
        return len(self.raw) - 1

    def text(self) -> str:
        return "".join(self.raw)

    def step(self, ch: str) -> None:
        self.raw.append(ch)
        self.state(ch)

    def finish(self) -> bool:
        """At the end of the stream: is the unaccounted tail only the closing markup of complete calls?"""
        return False

    def _account(self) -> None:
        self.mark = len(self.raw)

    def _start(self, name: str) -> None:
        self.index = self.out.start(name)
        self.committed = True
        self._account()

    def _args(self, text: str) -> None:
        self.out.args(self.index, text)
        self._account()

    def _feed(self, call: ObjectCall, ch: str) -> None:
        call.step(ch)
        if not call.started:
            name = call.ready_name()
            if name is None:
                return
            call.started = True
            self._start(name)
        self._args(call.take_args())

    def _tag(self, ch: str, *tags: str) -> str | None:
        """Match markup one character at a time: the tag completed by ``ch``, or None while partial."""
        if self.tag_start < 0:
            self.tag_start = self.pos
        seen = "".join(self.raw[self.tag_start :])
        if seen in tags:
            self.tag_start = -1
            return seen
        if not any(tag.startswith(seen) for tag in tags):
            raise Bad(self.tag_start)  # read again from the tag's start: it may open the next call
        return None

    def _tag_so_far(self) -> str:
        return "".join(self.raw[self.tag_start :]) if self.tag_start >= 0 else ""
