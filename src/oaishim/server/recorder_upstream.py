"""An upstream other than the gateway's own client, seen through a recorder (compiled with the
core, as ``server.recorder``): a test's fake, the capture proxy's upstream. The gateway's own client
notes its answers' reads itself and hands each request it sent to the recorder
(``Recorder.upstream_sent``); any other ``server.seam.Upstream`` is wrapped in
:class:`RecordingUpstream`, which hands the recorder each request and response head, and its
responses in :class:`RecordingResponse`, whose pieces are noted as they are read
(:class:`RecordedPieces`) or as the direct path's sink takes them (:class:`RecordingSink`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import cast

from oaishim.capture.raw import RawResponse
from oaishim.server.config import ModelRoute
from oaishim.server.direct import Attachable
from oaishim.server.recorder import Recorder, now
from oaishim.server.seam import ResponseWrapper, Upstream, UpstreamResponse, UpstreamWrapper


class RecordedPieces:
    """An upstream body's pieces, each noted as it is read, then its end (an async generator's
    work, as a class: mypyc compiles no async generator)."""

    __slots__ = ("_ended", "_inner", "_opened", "_recorder")

    def __init__(self, recorder: Recorder, inner: AsyncIterator[bytes], opened: RawResponse | None) -> None:
        self._recorder, self._inner, self._opened = recorder, inner.__aiter__(), opened
        self._ended = False

    def __aiter__(self) -> RecordedPieces:
        return self

    async def __anext__(self) -> bytes:
        try:
            piece = await self._inner.__anext__()
        except StopAsyncIteration:
            if not self._ended:
                self._ended = True
                self._recorder.upstream_read(b"", self._opened)
            raise
        self._recorder.upstream_read(piece, self._opened)
        return piece


class RecordingSink:
    """The direct path's sink, noting each upstream piece it takes (one it declines is noted by
    :class:`RecordedPieces`, which reads it)."""

    __slots__ = ("_opened", "_recorder", "_sink")

    def __init__(self, recorder: Recorder, sink: Callable[[bytes], bool], opened: RawResponse | None) -> None:
        self._recorder, self._sink, self._opened = recorder, sink, opened

    def __call__(self, piece: bytes) -> bool:
        t_ns = now()  # when it arrived, before the sink relays it to the client
        if not self._sink(piece):
            return False
        self._recorder.upstream_read(piece, self._opened, t_ns)
        return True


class RecordingUpstream(UpstreamWrapper):
    """An upstream (any ``server.seam.Upstream``) whose requests, response heads and body pieces one
    :class:`Recorder` notes as they pass."""

    __slots__ = ("recorder",)

    def __init__(self, inner: Upstream, recorder: Recorder) -> None:
        super().__init__(inner)
        self.recorder = recorder

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> UpstreamResponse:
        started = now()
        response = await self.inner.open(route, method, path, body, content_type, headers)
        opened = self.recorder.upstream_opened(started, response, body)
        if opened.wire:  # its connection notes every read (server.h1client): nothing to wrap
            return response
        if hasattr(response, "attach"):  # the raw connection's: its pieces can be relayed direct
            return AttachableRecordingResponse(response, self.recorder, opened)
        return RecordingResponse(response, self.recorder, opened)


class RecordingResponse(ResponseWrapper):
    """An upstream response whose body pieces are noted as they are read: the seam's
    ``UpstreamResponse``, the head the inner response's."""

    __slots__ = ("opened", "recorder")

    def __init__(self, inner: UpstreamResponse, recorder: Recorder, opened: RawResponse | None = None) -> None:
        super().__init__(inner)
        self.recorder, self.opened = recorder, opened

    def pieces(self) -> AsyncIterator[bytes]:
        """The body's pieces, each noted as it is read, and the end."""
        return RecordedPieces(self.recorder, self.inner.pieces(), self.opened)

    def note(self, piece: bytes) -> None:
        """One piece read (``b""``: the body ended)."""
        self.recorder.upstream_read(piece, self.opened)


class AttachableRecordingResponse(RecordingResponse):
    """A recorded response whose connection can hand its pieces to a sink (``server.direct``): a
    piece the sink takes is noted here, since ``pieces`` will not see it; one it declines is."""

    __slots__ = ()

    def attach(self, sink: Callable[[bytes], bool]) -> None:
        cast(Attachable, self.inner).attach(RecordingSink(self.recorder, sink, self.opened))

    def detach(self) -> None:
        cast(Attachable, self.inner).detach()

    async def read(self, limit: int) -> bytes | None:
        """The body whole, through the connection's own read (no iterator), each read noted as
        ``pieces`` notes them, then the end."""
        raw = await cast(Attachable, self.inner).read(limit, self.note)
        if raw is not None:
            self.note(b"")
        return raw
