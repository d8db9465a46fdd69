"""One exchange's recorder: what a capture notes on the request path, compiled with the core.

A :class:`Recorder` follows one exchange through its phases, as mitmproxy's hooks do: the client
request received (``wrap`` sees every ASGI message), the upstream request sent and its response
headers (``upstream_sent``), each upstream read (``upstream_read``), each piece sent to the client
(``wrap`` again), and the end (``end``). A stream's pieces relayed where the upstream's bytes
arrive (``server.direct``) are noted there too: the upstream's by :class:`RecordingSink`, which
stands between the connection and the direct path's sink, the client's by :class:`RecordingWrite`,
which wraps the direct write; so is an answer the server writes whole (``respond``), as the bytes
it wrote.

Where the parts can be had as they crossed the wire, they are kept as such, and read back later
by ``server.capture_wire``: a client request the HTTP server received whole in one read, as that
read (its scope's ``READ``: no wrapper around ``receive``, no list of header pairs); a whole
answer, as the bytes the server wrote; the gateway's own upstream client's request, as the head it
wrote, and its answer, as the list its connection appends each read to (``SentRequest``'s ``head``
and ``wire``). That client hands each request it sent to the recorder itself (the exchange's
``upstream_sent``), so nothing wraps it; another upstream (a test's fake, the capture proxy's)
reaches the recorder through :class:`RecordingUpstream`, the seam's wrapper for a capture, and is
noted read by read through the wrappers below unless it too notes its answer's reads. The recorder
only reads a clock and appends references to lists; the record is built, redacted, checked and
written later, by the store's thread (``capture.store``) or the capture process, and ``end``
never blocks.

These run for every message and every streamed chunk of a captured exchange, so they live here,
in a module ``hatch_build`` compiles, as is the seam whose base wrappers the recording ones extend
(``server.seam``: compiled bases that Python classes may extend too).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol, cast

from oaishim.capture.raw import Mode, RawExchange, RawRequest, RawResponse
from oaishim.server.asgi import Headers, Message, Receive, Scope, Send
from oaishim.server.config import ModelRoute
from oaishim.server.direct import Attachable
from oaishim.server.exchange import READ, DirectBody, Respond
from oaishim.server.seam import ResponseWrapper, Upstream, UpstreamResponse, UpstreamWrapper

now: Final = time.perf_counter_ns


class Submit(Protocol):
    """Where a finished exchange goes: the writer thread, or the capture process (server.capture_process)."""

    def submit(self, exchange: RawExchange) -> bool: ...


class Recorder:
    __slots__ = ("_writer", "raw")

    def __init__(self, writer: Submit, scope: Scope, mode: Mode, wall: float = 0.0) -> None:
        """``wall``: the exchange's wall-clock start, when the caller has read it already (else now)."""
        self._writer = writer
        wall = wall or time.time()
        read: tuple[int, bytes] | None = scope.get(READ)
        if read is not None:  # it came whole in one read (server.http): the exchange starts then
            t0 = read[0]
            request = RawRequest(t0, "", "", read[1], wire=True)
        else:
            t0 = now()
            query: bytes = scope.get("query_string", b"")
            target: bytes = scope.get("raw_path") or scope["path"].encode()
            target = (target + b"?" + query) if query else target
            request = RawRequest(t0, scope["method"], target.decode("latin-1"), scope["headers"])
        self.raw = RawExchange(t0, wall, mode)
        self.raw.client_request = request

    def wrap(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """The ASGI receive and send of this exchange, recording what passes through them (the
        receive as it is when the request is its read: its body is in it)."""
        request = self.raw.client_request
        if request is not None and request.wire:
            return receive, RecordingSend(self.raw, send)
        return RecordingReceive(self.raw, receive), RecordingSend(self.raw, send)

    def direct(self, direct_body: DirectBody | None) -> DirectBody | None:
        """The server's direct write of body pieces (``server.direct``), noting each piece as sent."""
        if direct_body is None:
            return None
        return RecordingDirect(self.raw, direct_body)

    def respond(self, respond: Respond | None) -> Respond | None:
        """The server's whole-answer write (``Exchange.answer``), noting the answer as sent."""
        if respond is None:
            return None
        return RecordingRespond(self.raw, respond)

    def sink(self, sink: Callable[[bytes], bool], opened: RawResponse | None) -> Callable[[bytes], bool]:
        """The direct path's sink, noting each upstream piece it takes (one it declines is noted
        by ``pieces``, which reads it)."""
        return RecordingSink(self, sink, opened)

    def pieces(self, inner: AsyncIterator[bytes], opened: RawResponse | None) -> AsyncIterator[bytes]:
        """The upstream body's pieces, each noted as it is read, and the end."""
        return RecordedPieces(self, inner, opened)

    def upstream_read(self, piece: bytes, opened: RawResponse | None = None, t_ns: int = 0) -> None:
        """Each piece read from the upstream (at ``t_ns``, or now); ``b""`` when its body ended.
        ``opened``: the response the piece belongs to; a record holds one upstream answer, so pieces
        of another (n fanned out: the copies' answers) are not mixed into it."""
        response = self.raw.upstream_response
        if response is not None and (opened is None or opened is response):
            if piece:
                response.reads.append((t_ns or now(), piece))
            else:
                response.complete = True

    def upstream_sent(self, t_ns: int, response: UpstreamResponse, body: bytes | None) -> RawResponse:
        """The upstream request (sent at ``t_ns``) and its response's head, received now."""
        sent = response.request
        head = sent.head  # the head as written, whole (one object to frame), when the client gives it
        request = RawRequest(t_ns, sent.method, sent.url, head if head is not None else sent.headers)
        request.body.append(body or b"")
        self.raw.upstream_request = request
        wire = sent.wire
        if wire is not None:  # the connection notes the reads of the answer itself: its head is in them
            # (its time is that of the read that completed the head, read back with it; this one
            # stands in only if none did)
            opened = RawResponse(t_ns, response.status, (), wire, wire=True)
        else:
            opened = RawResponse(now(), response.status, list(response.headers))
        self.raw.upstream_response = opened
        return opened

    def end(self, error: str | None = None, profile: str | None = None) -> None:
        """The exchange is over (``error``: why it broke off; ``profile``: the one its request was
        prepared for): the raw exchange goes to the writer."""
        self.raw.end_ns = now()
        self.raw.profile = profile
        response = self.raw.client_response
        if error is None and response is None:
            error = "no response was sent: the client went away first"
        elif error is None and response is not None and not response.complete:
            error = "the client went away before the response ended"
        self.raw.error = error
        self._writer.submit(self.raw)


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


class RecordingReceive:
    """The ASGI receive, noting the request body's pieces and when the last arrived."""

    __slots__ = ("_raw", "_receive")

    def __init__(self, raw: RawExchange, receive: Receive) -> None:
        self._raw, self._receive = raw, receive

    async def __call__(self) -> Message:
        message = await self._receive()
        request = self._raw.client_request
        if request is not None and message["type"] == "http.request":
            request.t_ns = now()
            request.body.append(message.get("body", b""))
        return message


class RecordingSend:
    """The ASGI send, noting the response head and each body piece as it goes."""

    __slots__ = ("_raw", "_send")

    def __init__(self, raw: RawExchange, send: Send) -> None:
        self._raw, self._send = raw, send

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            response = self._raw.client_response
            if response is not None:
                response.reads.append((now(), message.get("body", b"")))
                response.complete = not message.get("more_body", False)
        elif kind == "http.response.start":
            self._raw.client_response = RawResponse(now(), message["status"], message.get("headers", []))
        await self._send(message)


class RecordingRespond:
    """The server's ``respond``: a whole answer, noted as the bytes the server wrote (its head and
    body, read back by ``server.capture_wire``: no list of header pairs to frame), complete (a head
    the server refused to write is noted as the send chain notes a start, without a body)."""

    __slots__ = ("_raw", "_respond")

    def __init__(self, raw: RawExchange, respond: Respond) -> None:
        self._raw, self._respond = raw, respond

    def __call__(self, status: int, headers: Headers, body: bytes) -> bytes | None:
        t_ns = now()
        try:
            written = self._respond(status, headers, body)
        except BaseException:
            self._raw.client_response = RawResponse(t_ns, status, headers)
            raise
        if written is None:
            return None  # nothing written: the answer goes through the send chain, noted there
        self._raw.client_response = RawResponse(t_ns, status, (), [(t_ns, written)], True, True)
        return written


class RecordingDirect:
    """The server's ``direct_body``: the (ready, write) it gives, with the write noting each piece."""

    __slots__ = ("_direct", "_raw")

    def __init__(self, raw: RawExchange, direct: DirectBody) -> None:
        self._raw, self._direct = raw, direct

    def __call__(self, scope: object) -> tuple[Callable[[], bool], Callable[[bytes], None]] | None:
        found = self._direct(scope)
        if found is None:
            return None
        ready, write = found
        return ready, RecordingWrite(self._raw, write)


class RecordingWrite:
    __slots__ = ("_raw", "_write")

    def __init__(self, raw: RawExchange, write: Callable[[bytes], None]) -> None:
        self._raw, self._write = raw, write

    def __call__(self, data: bytes) -> None:
        response = self._raw.client_response
        if response is not None:
            response.reads.append((now(), data))
        self._write(data)


class RecordingSink:
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
        opened = self.recorder.upstream_sent(started, response, body)
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
        return self.recorder.pieces(self.inner.pieces(), self.opened)

    def note(self, piece: bytes) -> None:
        """One piece read (``b""``: the body ended)."""
        self.recorder.upstream_read(piece, self.opened)


class AttachableRecordingResponse(RecordingResponse):
    """A recorded response whose connection can hand its pieces to a sink (``server.direct``): a
    piece the sink takes is noted here, since ``pieces`` will not see it; one it declines is."""

    __slots__ = ()

    def attach(self, sink: Callable[[bytes], bool]) -> None:
        cast(Attachable, self.inner).attach(self.recorder.sink(sink, self.opened))

    def detach(self) -> None:
        cast(Attachable, self.inner).detach()

    async def read(self, limit: int) -> bytes | None:
        """The body whole, through the connection's own read (no iterator), each read noted as
        ``pieces`` notes them, then the end."""
        raw = await cast(Attachable, self.inner).read(limit, self.note)
        if raw is not None:
            self.note(b"")
        return raw
