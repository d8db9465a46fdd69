"""Mistral: ``[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`` and the one-marker-per-call forms.

``[TOOL_CALLS][{…}, …]`` (tokenizer v3/v7), ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`` (v11) and
``[TOOL_CALLS]name[ARGS]{…}`` (v13+), one marker per call in the last two.
"""

from __future__ import annotations

from collections.abc import Collection

from oaishim.transform.toolcalls._frames import Frame, ObjectCall, Out
from oaishim.transform.toolcalls._json import DONE, Bad, Json


class Mistral(Frame):
    """``[TOOL_CALLS][{…}, …]`` (v3/v7), ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`` (v11), ``…name[ARGS]{…}`` (v13+)."""

    def __init__(self, out: Out, marker: str, lead: str, names: Collection[str]) -> None:
        super().__init__(out, marker, lead)
        self.call = ObjectCall(eager=True)
        self.args = Json()
        self.name_start = 0
        self.name = ""
        self.state = self._in_open

    def finish(self) -> bool:
        return self.state in (self._in_item_end, self._in_item_open)

    def _in_open(self, ch: str) -> None:
        if ch.isspace():
            return
        if ch == "[":
            self.state = self._in_list
            return
        self.name_start = self.pos
        self.state = self._in_name
        self._in_name(ch)

    # -- name[CALL_ID]id[ARGS]{…}
    def _in_name(self, ch: str) -> None:
        if ch == "[" and self.pos > self.name_start:
            self.name = "".join(self.raw[self.name_start : self.pos])
            self.state = self._in_name_tag
            self._in_name_tag(ch)
        elif not (ch.isalnum() or ch in "_-.:"):
            raise Bad()

    def _in_name_tag(self, ch: str) -> None:
        tag = self._tag(ch, "[ARGS]", "[CALL_ID]")
        if tag == "[CALL_ID]":
            self.state = self._in_call_id
        elif tag:
            self._start(self.name)
            self.state = self._in_args_open

    def _in_call_id(self, ch: str) -> None:
        if ch == "[":
            self.state = self._in_id_tag
            self._in_id_tag(ch)
        elif not (ch.isalnum() or ch in "_-"):
            raise Bad()

    def _in_id_tag(self, ch: str) -> None:
        if self._tag(ch, "[ARGS]"):
            self._start(self.name)
            self.state = self._in_args_open

    def _in_args_open(self, ch: str) -> None:
        if ch.isspace():
            self._account()
            return
        if ch != "{":
            raise Bad()
        self.state = self._in_args
        self._in_args(ch)

    def _in_args(self, ch: str) -> None:
        events = self.args.step(ch)
        self._args(ch)
        if events & DONE:
            self.done_at = len(self.raw)

    # -- [{…}, {…}]
    def _in_list(self, ch: str) -> None:
        if ch == "]":
            self.done_at = len(self.raw)  # an empty list: no call, so it is given back
        else:
            self.state = self._in_item_open
            self._in_item_open(ch)

    def _in_item_open(self, ch: str) -> None:
        if ch.isspace():
            return
        if ch != "{":
            raise Bad()
        self.call = ObjectCall(eager=True)
        self.state = self._in_item
        self._in_item(ch)

    def _in_item(self, ch: str) -> None:
        self._feed(self.call, ch)
        if self.call.done:
            self.state = self._in_item_end

    def _in_item_end(self, ch: str) -> None:
        if ch == ",":
            self.state = self._in_item_open
        elif ch == "]":
            self._account()
            self.done_at = len(self.raw)
        elif not ch.isspace():
            raise Bad()
