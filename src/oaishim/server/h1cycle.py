"""One request on a client connection, as the ASGI app sees it: its ``receive`` and ``send``.

:class:`Cycle` is the HTTP/1.1 framing of one request and its response, kept apart from the
connection (``server.http``: parsing, limits, keep-alive) so each reads in one piece:

* ``receive()`` hands over the body as it arrives (the connection pauses reading while more than
  :data:`HIGH_WATER` bytes wait), then waits; it returns ``http.disconnect`` once the client is gone
  or the response is complete (what tells the gateway a streaming client left). The first call
  answers a client's ``Expect: 100-continue``.
* ``send()`` writes the head, framed by ``Content-Length`` when the app gives one, else chunked
  (never for a HEAD, a 204 or a 304); an HTTP/1.0 client, which knows no chunks, gets such a body
  as it is, ended by the connection's close (RFC 9112, 6.1 and 6.3). The head of a sized answer waits for its body, so head and
  body leave in one write (one syscall, one TCP segment); a chunked head goes out at the end of the
  loop's turn, joined to a first piece sent in the same turn.
* A response that breaks its own framing (more or fewer bytes than its ``Content-Length``, a message
  out of order) raises ``RuntimeError`` in the app, as the ASGI spec asks.
* The connection's extensions for this request (``server.exchange``): ``watch_gone`` (a callback
  when the client is lost before the response is complete) and ``direct`` (``server.direct``: body
  pieces written from another callback, chunk-framed here), and ``respond`` (a whole sized
  response in one call, without its two messages: what a plain answer is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final, Protocol

HIGH_WATER: Final = 64 * 1024  # request body bytes held for the app before the connection stops reading
STATUS_LINES: Final = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_NO_BODY: Final = frozenset({204, 304})
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_END: Final = b"0\r\n\r\n"
_DISCONNECT: Final[dict[str, Any]] = {"type": "http.disconnect"}


class Connection(Protocol):
    """What a cycle needs of its connection (``server.http.HttpConnection``)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    write_paused: bool

    @property
    def date(self) -> bytes: ...  # the ``date`` header line (b"": none)

    @property
    def answering(self) -> Cycle | None: ...  # the request being answered

    async def drain(self) -> None: ...  # until the client's connection takes writes again

    def write(self, data: bytes) -> None: ...  # to the client, in order (held to the turn's end: server.outbox)

    def resume_reading(self) -> None: ...

    def answered(self, cycle: Cycle) -> None: ...  # ``cycle``'s response is complete


_NAMES_SEEN: Final[set[bytes]] = set()  # response header names found valid (a bounded cache: the same few recur)


def _check_name(name: bytes) -> None:
    """A response header name with no colon (a line end in one is caught with the values'), noted as seen."""
    if name.find(b":") != -1:
        raise RuntimeError(f"Invalid HTTP header name {name!r} in the response.")
    if len(_NAMES_SEEN) < 256 and type(name) is bytes:
        _NAMES_SEEN.add(name)


def status_line(status: int) -> bytes:
    line = STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


def _nothing() -> None:
    return None


# The size lines of chunks under 1 KiB (a streamed token's is a few hundred bytes): a list index
# and one join, where bytes formatting parsed its format each time (1.9k instructions a chunk)
_SIZE_LINES: Final = [b"%x\r\n" % n for n in range(1024)]


def _chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``data`` not empty: an empty one ends the body)."""
    size = len(data)
    if size < 1024:
        return b"".join((_SIZE_LINES[size], data, b"\r\n"))
    return b"%x\r\n%b\r\n" % (size, data)


class Cycle:
    """One request's ASGI ``receive``/``send`` over the connection that parsed it."""

    __slots__ = (
        "_head",
        "_left",
        "_waiter",
        "body",
        "chunked",
        "complete",
        "conn",
        "disconnected",
        "expect_100",
        "head_only",
        "held",
        "keep_alive",
        "more_body",
        "on_gone",
        "ready",
        "scope",
        "started",
        "until_close",
    )

    def __init__(self, conn: Connection, scope: dict[str, Any], keep_alive: bool, expect_100: bool) -> None:
        self.conn, self.scope = conn, scope
        self.keep_alive, self.expect_100 = keep_alive, expect_100
        self.head_only = scope["method"] == "HEAD"
        self.body: list[bytes] = []
        self.held = 0  # the bytes of ``body``
        self.more_body = True  # until the parser reports the message's end
        self.ready = False  # something for receive(): body, its end, or a disconnect
        self.started = self.complete = self.disconnected = False
        self.chunked = False
        self.until_close = False  # a body of unknown length to an HTTP/1.0 client: ended by closing
        self._left = 0  # bytes still owed to a declared Content-Length
        self._head: bytes | None = None  # a head held for the body that follows it
        self._waiter: asyncio.Future[None] | None = None
        self.on_gone: Callable[[], None] | None = None

    # -- fed by the connection ---------------------------------------------------------------------
    def feed(self, body: bytes) -> int:
        """A piece of the request body; the bytes now held."""
        self.body.append(body)
        self.held += len(body)
        self._wake()
        return self.held

    def end(self) -> None:
        self.more_body = False
        self._wake()

    def lost(self) -> None:
        """The client is gone (or was refused): receive() says so, sends are dropped."""
        self.disconnected = True
        self._wake()
        callback, self.on_gone = self.on_gone, None
        if callback is not None and not self.complete:
            callback()

    def _wake(self) -> None:
        self.ready = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- ASGI ----------------------------------------------------------------------------------
    async def receive(self) -> dict[str, Any]:
        conn = self.conn
        if self.expect_100:
            self.expect_100 = False
            waiting = self.more_body and not self.body and not (self.started or self.disconnected)
            if waiting and not conn.transport.is_closing():
                conn.write(_CONTINUE)
        if not self.ready and not self.disconnected and not self.complete:
            conn.resume_reading()
            waiter = self._waiter = conn.loop.create_future()
            await waiter
        self.ready = False
        if self.disconnected or self.complete:
            return _DISCONNECT
        parts, self.body, self.held = self.body, [], 0  # (reading resumes at the next wait)
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        conn = self.conn
        if conn.write_paused and not self.disconnected:
            await conn.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message["status"], message.get("headers", ()))
        elif kind != "http.response.body" or self.complete:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after the response {self._state()}.")
        else:
            self._body(message.get("body", b""), message.get("more_body", False))

    def _state(self) -> str:
        return "was complete" if self.complete else "had started"

    def _start(self, status: int, headers: Any) -> None:
        length: int | None = None
        given: list[bytes] = []  # the app's header lines, each ended by the one CR LF put here
        for name, value in headers:
            # a name is lowered only when its length is one of the three this looks for (an app's
            # names are a handful of constants: most are looked at by their length alone)
            size = len(name)
            if size == 14 and (name == b"content-length" or name.lower() == b"content-length"):
                length = int(value)  # written below, once
            elif size == 10 and name.lower() == b"connection" and value.lower() == b"close":
                self.keep_alive = False  # written below, once
            elif size != 17 or name.lower() != b"transfer-encoding":  # the framing is this server's
                if type(name) is not bytes or name not in _NAMES_SEEN:
                    _check_name(name)
                given += (name, b": ", value, b"\r\n")
        block = b"".join(given)
        # a line end inside a name or a value would split the response: one check over all of them.
        # Each line ends with CR LF, so there are at least as many CRs and LFs as lines, and exactly
        # as many when there are twice as many of the two together as lines: one pass that drops
        # them (``translate``), where ``count`` for each took two (and ``in`` costs bytes an
        # exception per test: bench/README.md)
        lines = len(given) // 4
        if len(block) - len(block.translate(None, b"\r\n")) != 2 * lines:
            raise RuntimeError("Invalid HTTP header in the response: a line end in a name or a value.")
        head = [status_line(status), self.conn.date, block]
        if self.head_only or status in _NO_BODY:
            self._left = -1  # nothing may follow, whatever the head declares
            if length is not None:
                head.append(b"content-length: %d\r\n" % length)
        elif length is not None:
            self._left = length
            head.append(b"content-length: %d\r\n" % length)
        elif self.scope.get("http_version") == "1.0":
            self.until_close = True
            self.keep_alive = False
        else:
            self.chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self._head = b"".join(head)
        self.started = True  # (not before: a head refused above leaves the server its 500)
        if (
            self.chunked or self.until_close
        ):  # a stream's head leaves in this turn of the loop, with a first piece if one comes
            self.conn.loop.call_soon(self._flush_head)

    def _flush_head(self) -> None:
        if self._head is not None and not self.disconnected and not self.conn.transport.is_closing():
            self._write(b"")
        self._head = None

    def _write(self, data: bytes) -> bytes:
        """``data`` to the client, after the head when it is still held (one write for both); what
        was written."""
        head = self._head
        if head is not None:
            self._head = None
            data = head + data
        if data:
            self.conn.write(data)
        return data

    def _body(self, body: bytes, more: bool) -> bytes:
        """A body message's piece framed and written; what was written (the head too, if it was held)."""
        if self.chunked:
            data = _chunk(body) if body else b""
            if not more:
                data += _END
        elif self._left < 0:
            data = b""
        elif self.until_close:
            data = body
        else:
            self._left -= len(body)
            if self._left < 0:
                raise RuntimeError("Response content longer than Content-Length")
            if not more and self._left:
                raise RuntimeError("Response content shorter than Content-Length")
            data = body
        written = self._write(data)
        if not more:
            self.complete = True
            self.on_gone = None
            self._wake()
            self.conn.answered(self)
        return written

    # -- the connection's extensions for this request ------------------------------------------------
    def watch_gone(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once if the client is lost before the response is complete; the
        function that unregisters it. Reading resumes, so a client's close is seen."""
        if self.disconnected:
            callback()
            return _nothing
        self.on_gone = callback
        self.conn.resume_reading()

        def unregister() -> None:
            if self.on_gone is callback:
                self.on_gone = None

        return unregister

    def direct(self, scope: Any) -> tuple[Callable[[], bool], Callable[[bytes], None]] | None:
        """(ready, write) for this request's response body (``server.direct``), or None when this
        request is not the one the connection is answering."""
        if scope is not self.scope or self.conn.answering is not self:
            return None
        return self.writable, self.write_chunk

    def respond(self, status: int, headers: Any, body: bytes) -> bytes | None:
        """A whole sized response (``headers`` with its ``content-length``) written at once, as
        ``send`` would write its start and its one body message, and the bytes written (its head
        and body, as one write); None, with nothing done, when it cannot go this way (it has
        started, the client is gone, the client's writes are paused: ``send`` then waits its turn).
        What ``send`` raises for a response, this raises too."""
        if self.started or self.disconnected or self.conn.write_paused:
            return None
        self._start(status, headers)
        return self._body(body, False)

    def writable(self) -> bool:
        """A chunk can go out now: the chunked (or close-ended) body under way, the client reading,
        the connection open."""
        return (
            (self.chunked or self.until_close)
            and self.started
            and not self.complete
            and not self.disconnected
            and not self.conn.write_paused
            and not self.conn.transport.is_closing()
        )

    def write_chunk(self, data: bytes) -> None:
        if data:  # (an empty chunk would end the body)
            self._write(_chunk(data) if self.chunked else data)
