"""Llama 3.x JSON: the whole message is ``{"name": …, "parameters": {…}}`` (or ``"arguments"``).

Maybe after ``<|python_tag|>``; several calls joined by ``;``.

**Llama-3 JSON is only a call when it is unmistakably one**, because a ``json_object`` answer looks
the same: the message must start (after whitespace) with ``{`` or ``<|python_tag|>``; the object may
only have ``name`` and ``arguments``/``parameters`` keys; its name must be one of ``tool_names``
when those are given; and it commits only once its arguments begin (or it closes). ``tool_names``
gates only this format: the tagged ones say outright that they are calls.
"""

from __future__ import annotations

from collections.abc import Collection

from oaishim.transform.toolcalls._frames import Frame, ObjectCall, Out
from oaishim.transform.toolcalls._json import Bad


class Llama(Frame):
    """``{"name": …, "parameters": {…}}`` at the start of the message, several joined by ``;``."""

    def __init__(self, out: Out, marker: str, lead: str, names: Collection[str]) -> None:
        super().__init__(out, marker, lead)
        self.names = names
        self.call = ObjectCall(eager=False, strict=True, names=names)
        self.state = self._in_open

    def finish(self) -> bool:
        return self.state == self._in_after or (self.state == self._in_open and self.committed)

    def _in_open(self, ch: str) -> None:
        if ch.isspace():
            return
        if ch != "{":
            raise Bad()
        self.call = ObjectCall(eager=False, strict=True, names=self.names)
        self.state = self._in_object
        self._in_object(ch)

    def _in_object(self, ch: str) -> None:
        self._feed(self.call, ch)
        if self.call.done:
            self.state = self._in_after

    def _in_after(self, ch: str) -> None:
        if ch == ";":
            self.state = self._in_open
        elif not ch.isspace():
            self.done_at = self.mark  # text after the calls: read it (and the space before it) as text
