"""Hermes (Hermes, Qwen 2.5/3): ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``.

One call per tag, any number of tags.
"""

from __future__ import annotations

from collections.abc import Collection

from oaishim.transform.toolcalls._frames import Frame, ObjectCall, Out
from oaishim.transform.toolcalls._json import Bad


class Hermes(Frame):
    """``<tool_call>{"name": …, "arguments": {…}}</tool_call>``: one call per tag."""

    def __init__(self, out: Out, marker: str, lead: str, names: Collection[str]) -> None:
        super().__init__(out, marker, lead)
        self.call = ObjectCall(eager=True)
        self.state = self._in_open

    def finish(self) -> bool:
        return self.state == self._in_close

    def _in_open(self, ch: str) -> None:
        if ch.isspace():
            return
        if ch != "{":
            raise Bad()
        self.state = self._in_object
        self._in_object(ch)

    def _in_object(self, ch: str) -> None:
        self._feed(self.call, ch)
        if self.call.done:
            self.state = self._in_close

    def _in_close(self, ch: str) -> None:
        if (self.tag_start >= 0 or not ch.isspace()) and self._tag(ch, "</tool_call>"):
            self._account()
            self.done_at = len(self.raw)
