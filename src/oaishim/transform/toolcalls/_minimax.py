"""MiniMax-M2: ``<minimax:tool_call><invoke name="f">…</invoke>…</minimax:tool_call>``.

Each invoke holds ``<parameter name="k">v</parameter>`` elements; any number of invokes per block.
Values are sent one parameter at a time; see :func:`_param_json` for how a value gets its JSON type.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, Final

from oaishim.transform.toolcalls._frames import Frame, Out
from oaishim.transform.toolcalls._json import Bad

_PARAMETER_END: Final = "</parameter>"
_MINIMAX_END: Final = "</minimax:tool_call>"


class Minimax(Frame):
    """``<minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>…</invoke>…</minimax:tool_call>``.

    The arguments object is built here, one member per parameter as each one closes:
    ``{`` + ``"k": v`` + ``, "k2": v2`` … + ``}`` at ``</invoke>``.
    """

    def __init__(self, out: Out, marker: str, lead: str, names: Collection[str]) -> None:
        super().__init__(out, marker, lead)
        self.attr_start = 0
        self.key = ""
        self.params = 0
        self.state = self._in_block

    def finish(self) -> bool:
        return self.state == self._in_block or (
            self.state == self._in_block_tag and _MINIMAX_END.startswith(self._tag_so_far())
        )

    def _in_block(self, ch: str) -> None:
        if not ch.isspace():
            self.state = self._in_block_tag
            self._in_block_tag(ch)

    def _in_block_tag(self, ch: str) -> None:
        tag = self._tag(ch, "<invoke name=", _MINIMAX_END)
        if tag == _MINIMAX_END:
            self._account()
            self.done_at = len(self.raw)
        elif tag:
            self.attr_start = len(self.raw)
            self.state = self._in_invoke_name

    def _in_invoke_name(self, ch: str) -> None:
        if ch == ">":
            self._start(_attribute(self.raw[self.attr_start : self.pos]))
            self.params = 0
            self.state = self._in_invoke
        elif ch in "<\n":
            raise Bad()

    def _in_invoke(self, ch: str) -> None:
        if not ch.isspace():
            self.state = self._in_invoke_tag
            self._in_invoke_tag(ch)

    def _in_invoke_tag(self, ch: str) -> None:
        tag = self._tag(ch, "<parameter name=", "</invoke>")
        if tag == "</invoke>":
            self._args("}" if self.params else "{}")
            self.state = self._in_block
        elif tag:
            self.attr_start = len(self.raw)
            self.state = self._in_param_name

    def _in_param_name(self, ch: str) -> None:
        if ch == ">":
            self.key = _attribute(self.raw[self.attr_start : self.pos])
            self.attr_start = len(self.raw)
            self.state = self._in_param_value
        elif ch in "<\n":
            raise Bad()

    def _in_param_value(self, ch: str) -> None:
        end = len(self.raw) - len(_PARAMETER_END)
        if ch == ">" and end >= self.attr_start and "".join(self.raw[end:]) == _PARAMETER_END:
            value = _param_json("".join(self.raw[self.attr_start : end]))
            self._args(f"{', ' if self.params else '{'}{json.dumps(self.key, ensure_ascii=False)}: {value}")
            self.params += 1
            self.state = self._in_invoke


def _attribute(chars: list[str]) -> str:
    """``"get_weather"``, ``'x'`` or ``x``: the value of ``name=`` in MiniMax markup."""
    text = "".join(chars).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    if not text.strip():
        raise Bad()
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _param_json(text: str) -> str:
    """A MiniMax parameter value as JSON.

    Parameter values are plain text, and the tool's schema is not known here, so the rule is: the
    value with its surrounding whitespace removed (MiniMax may put it on its own lines); if that
    text is JSON and not a JSON string (a number, ``true``/``false``, ``null``, an object, an
    array) it keeps that type, written as the model wrote it; anything else, a quoted ``"x"``
    included, is a string holding the text. So ``3`` → ``3`` and ``Paris`` → ``"Paris"``, but
    also a zip code ``75001`` → ``75001``: a caller that needs strings there must coerce by schema.
    ``NaN`` and ``Infinity`` are not JSON and stay strings.
    """
    value = text.strip()
    try:
        parsed = json.loads(value, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        parsed = value
    return json.dumps(value, ensure_ascii=False) if isinstance(parsed, str) else value
