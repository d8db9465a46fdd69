"""A stream's pieces relayed where the upstream's bytes arrive, without waking the request's task.

Relayed the ordinary way, each streamed chunk costs a future, a task step down the request's whole
coroutine chain and an ASGI message through the send wrappers (request id, secret masking, the server's
framing): more than the pipe's own work on the chunk (bench/README.md). Once a stream's head is
out, the same work can be done in the upstream connection's read callback: the connection
(``server.h1client``) hands each body piece to a :class:`Sink` while the relay waits for the next
piece; the sink feeds the pipe and writes what it gives to the client's connection at once
(``server.h1cycle``'s ``DIRECT_BODY`` extension), masked and counted as the send chain would.

Only while the relay waits, and only while the client reads: a piece that arrives while the relay
is busy, or while the client's connection is paused (a slow reader), takes the ordinary path, which
waits for the client. So the order of the bytes and the backpressure are the ordinary path's. The
end of the body, an upstream failure, a timeout or a client that leaves still end the relay's wait
as before; the pipe's flush and the end of the response go out the ordinary way.

A capture keeps this path: it wraps the direct write and the sink (``server.recording``). Not used
where another wrapper must see each piece: a traced or replayed response has no connection to attach to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from oaishim.server.asgi import Scrubbing
from oaishim.server.exchange import Exchange, perf
from oaishim.transform.pipe import StreamPipe


class Attachable(Protocol):
    """An upstream response whose connection can hand its body pieces to a sink (H1Response), and
    read its body whole while handing each read to ``each`` (what a capture notes)."""

    def attach(self, sink: Callable[[bytes], bool]) -> None: ...

    async def read(self, limit: int, each: Callable[[bytes], None] | None = None) -> bytes | None: ...

    def detach(self) -> None: ...


class Writer:
    """The client's side: whether a piece can be written now, and the write (masked, counted)."""

    __slots__ = ("_ex", "_scrub", "_write", "ready")

    def __init__(
        self, ex: Exchange, ready: Callable[[], bool], write: Callable[[bytes], None], scrub: Scrubbing | None
    ) -> None:
        self._ex, self._write, self._scrub = ex, write, scrub
        self.ready = ready

    def write(self, data: bytes) -> None:
        self._ex.bytes_out += len(data)  # as the request id's wrapper counts: before the masking
        if self._scrub is not None:
            data = self._scrub.body(data, True)
        if data:
            self._write(data)


def writer_for(ex: Exchange | None) -> Writer | None:
    """The direct writer of the exchange's response, where the server offers one (a capture wraps
    ``direct_body`` to record each piece: server.app)."""
    if ex is None or ex.direct_body is None:
        return None
    found = ex.direct_body(ex.scope)
    if found is None:
        return None
    ready, write = found
    return Writer(ex, ready, write, ex.scrubbing)


class Sink:
    """Feeds the pipe in the upstream's read callback while the relay waits (see the module)."""

    __slots__ = ("declined", "failure", "pipe", "response", "spent", "taken", "writer")

    def __init__(self, pipe: StreamPipe, writer: Writer, response: Attachable) -> None:
        self.pipe, self.writer, self.response = pipe, writer, response
        self.spent = 0.0  # the pipe's own time, as the relay counts it
        self.failure: Exception | None = None  # what failed here; the relay raises it once woken
        self.taken = self.declined = 0  # pieces taken here, and left to the ordinary path

    def __call__(self, piece: bytes) -> bool:
        """Take ``piece`` now (True), or leave it to the ordinary path (False: the client is slow)."""
        if not self.writer.ready():
            self.declined += 1
            return False
        self.taken += 1
        try:
            began = perf()
            out = self.pipe.feed(piece)
            self.spent += perf() - began
            if out:
                self.writer.write(out)
        except Exception as failure:  # the pipe never raises; a write might: the relay reports it
            self.failure = failure
            self.response.detach()
            return True
        if self.pipe.close_upstream:  # nothing more of the upstream is needed: the relay ends it
            self.response.detach()
        return True
