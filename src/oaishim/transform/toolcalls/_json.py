"""JSON, one character at a time: the syntax check that tells the frames where a value ends.

The JSON formats (Hermes, Llama 3, Mistral) stream a call's arguments object as the model writes
it, so at every character the parser must know whether it is inside that value, and notice bad JSON
at the very character that breaks it (:class:`Bad`), so the rest can be read again as content.
"""

from __future__ import annotations

import json
import re
from typing import Final

_JSON_WS: Final = " \t\n\r"


class Bad(Exception):
    """The text stopped being a call. ``at``: where reading resumes (None: at this character)."""

    def __init__(self, at: int | None = None) -> None:
        super().__init__(at)
        self.at = at


# What a step of Json reports about the members of the outer object (a bit set).
KEY, START, MEMBER, DONE = 1, 2, 4, 8
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS: Final = frozenset("0123456789+-.eE")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_LITERALS: Final = ("true", "false", "null")


class Json:
    """A JSON syntax check fed one character at a time, which also reports the outer object's members.

    Why not ``json.loads`` on the growing text: at every character we must know whether we are
    inside the arguments value (to stream it) and where it ends, and notice bad JSON at the very
    character that breaks it, so the rest can be read again as content. ``step`` returns a bit set:
    ``KEY`` a member key of the outer object just closed (``key``), ``START`` its value began at
    ``start``, ``MEMBER`` that value ended (before ``end``), ``DONE`` the whole value is complete.
    """

    __slots__ = ("chars", "end", "hex_left", "is_key", "key", "stack", "start", "state", "token")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.stack: list[str] = []  # open containers, "{" or "["
        self.state = "value"
        self.token = 0  # where the current string, number or literal began
        self.is_key = False
        self.hex_left = 0
        self.key = ""
        self.start = -1
        self.end = -1

    def __repr__(self) -> str:
        return f"<Json {self.state} depth={len(self.stack)} key={self.key!r}>"

    def text(self, start: int, end: int) -> str:
        return "".join(self.chars[start:end])

    def step(self, ch: str) -> int:
        pos = len(self.chars)
        self.chars.append(ch)
        state = self.state
        if state == "string":
            if ch == '"':
                return self._string_end(pos)
            if ch == "\\":
                self.state = "escape"
            elif ch < " ":
                raise Bad()
            return 0
        if state == "escape":
            if ch == "u":
                self.state, self.hex_left = "hex", 4
            elif ch in '"\\/bfnrt':
                self.state = "string"
            else:
                raise Bad()
            return 0
        if state == "hex":
            if ch not in _HEX:
                raise Bad()
            self.hex_left -= 1
            if not self.hex_left:
                self.state = "string"
            return 0
        if state == "literal":
            word = self.text(self.token, pos + 1)
            if word in _LITERALS:
                return self._value_end(pos + 1)
            if not any(literal.startswith(word) for literal in _LITERALS):
                raise Bad()
            return 0
        events = 0
        if state == "number":
            if ch in _NUMBER_CHARS:
                return 0
            if not _NUMBER.fullmatch(self.text(self.token, pos)):
                raise Bad()
            events = self._value_end(pos)  # the number ended before this character
        if ch in _JSON_WS:
            return events
        return events | self._structural(ch, pos)

    def _structural(self, ch: str, pos: int) -> int:
        state = self.state
        if state in ("value", "first_value"):
            if ch == "]" and state == "first_value":
                return self._close(pos)
            return self._value_begin(ch, pos)
        if state in ("key", "first_key"):
            if ch == '"':
                self.state, self.is_key, self.token = "string", True, pos
                return 0
            if ch == "}" and state == "first_key":
                return self._close(pos)
        elif state == "colon":
            if ch == ":":
                self.state = "value"
                return 0
        elif state == "next":
            if ch == ",":
                self.state = "key" if self.stack[-1] == "{" else "value"
                return 0
            if ch == ("}" if self.stack[-1] == "{" else "]"):
                return self._close(pos)
        raise Bad()

    def _in_outer_object(self) -> bool:
        return len(self.stack) == 1 and self.stack[0] == "{"

    def _value_begin(self, ch: str, pos: int) -> int:
        events = 0
        if self._in_outer_object():
            self.start, events = pos, START
        if ch in "{[":
            self.stack.append(ch)
            self.state = "first_key" if ch == "{" else "first_value"
        elif ch == '"':
            self.state, self.is_key, self.token = "string", False, pos
        elif ch == "-" or "0" <= ch <= "9":
            self.state, self.token = "number", pos
        elif ch in "tfn":
            self.state, self.token = "literal", pos
        else:
            raise Bad()
        return events

    def _string_end(self, pos: int) -> int:
        if not self.is_key:
            return self._value_end(pos + 1)
        self.state = "colon"
        if self._in_outer_object():
            self.key = json.loads(self.text(self.token, pos + 1))
            return KEY
        return 0

    def _close(self, pos: int) -> int:
        self.stack.pop()
        return self._value_end(pos + 1)

    def _value_end(self, end: int) -> int:
        if not self.stack:
            self.state = "done"
            return DONE
        self.state = "next"
        if self._in_outer_object():
            self.end = end
            return MEMBER
        return 0
