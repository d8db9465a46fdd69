"""Encoders: normalised official chunks in, the client's wire bytes out.

The stream pipe (``transform.pipe``) produces one sequence of normalised official
``chat.completion.chunk`` dicts (``text_completion`` for the legacy endpoint), the same whatever
backend answered, and then one of two endings: the upstream stream ended normally, or it failed with
an :class:`~oaishim.wire.errors.OpenAIError`. An :class:`Encoder` turns that sequence into bytes, so a
second output format (the Responses API's events) is a second encoder over the same chunks, not a
second pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import orjson

from oaishim.wire.errors import OpenAIError, error_event

DONE: Final = b"data: [DONE]\n\n"


class Encoder(Protocol):
    """One client stream's output format. Each method returns the bytes to send, in order (maybe none).

    An encoder may also have ``text_token(index, text) -> list[bytes]``: its bytes for the common chunk,
    one content token of the choice the client knows as ``index`` (``transform.fastchunk``), the
    same as ``feed`` gives for that chunk; the stream pipe then skips building the chunk."""

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        """One normalised official chunk (the final usage chunk included, when the client asked)."""
        ...

    def fail(self, error: OpenAIError) -> list[bytes]:
        """The stream failed: called once, and nothing is fed after it."""
        ...

    def end(self) -> list[bytes]:
        """The upstream stream ended normally: called once, after the last chunk."""
        ...


class ChatSSEEncoder:
    """The official chat (and legacy completion) stream: each chunk one ``data:`` event, then
    ``data: [DONE]``; a failure is one ``data: {"error": …}`` event, which the official SDKs raise."""

    __slots__ = ()

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        return [b"data: " + orjson.dumps(chunk) + b"\n\n"]  # StreamPipe.feed inlines this

    def fail(self, error: OpenAIError) -> list[bytes]:
        return [error_event(error)]

    def end(self) -> list[bytes]:
        return [DONE]
