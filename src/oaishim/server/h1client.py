"""A small HTTP/1.1 client on asyncio protocols and httptools: keep-alive connections, a streamed body.

aiohttp spent ~160 µs of CPU per round trip here (its request and response objects, multidicts,
yarl, its own timers and flow control); the gateway needs a fraction of that: write one request
head and body, parse one response with httptools, hand the body on piece by piece as it arrives.
This module knows HTTP and sockets only; ``server.upstream`` puts the gateway's replicas, deadlines
and errors on top.

* :class:`Pool` keeps idle connections per origin (scheme, host, port) for ``keepalive`` seconds
  (then closes them, before the backend would), and drops one the backend closed.
* :class:`Connection` is one socket: ``request()`` writes, ``head`` resolves when the status line
  and headers are in, ``piece()`` returns the next body bytes (``b""`` at the end). Reading pauses
  while more than :data:`HIGH_WATER` bytes wait for the reader, so a slow client holds a bounded
  amount, as the kernel's buffers then push back on the backend.
* A silence: with ``idle`` set, a reader that has waited that long since the last byte (or since it
  began waiting, whichever is later) gets :class:`Silent`; waits while the reader is busy elsewhere
  (writing to a slow client) do not count. One timer per response, re-armed lazily, not one per read.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, cast

import httptools

from oaishim.server.idle_poll import POLL
from oaishim.server.outbox import HOLD_MAX, Outbox

HIGH_WATER: Final = 256 * 1024
# Final: a static once compiled, where an imported name is a module-dict lookup a call
now: Final = time.perf_counter_ns
TIMER_SLACK: Final = 0.005  # seconds a timer that fires before its time may be early and still count as on time
Origin = tuple[str, str, int]  # scheme, host, port


class Broken(Exception):
    """The connection ended before the response did; ``fault`` names how (for the error message)."""

    def __init__(self, fault: str, before_head: bool) -> None:
        super().__init__(fault)
        self.fault, self.before_head = fault, before_head


class Silent(Exception):
    """No byte for ``idle`` seconds while the reader waited."""


class Expired(Exception):
    """The exchange's deadline passed before the body's end."""


@dataclass(slots=True, init=False)  # its own __init__, compiled (dataclasses' is interpreted)
class Head:
    status: int
    headers: list[tuple[bytes, bytes]]
    content_type: str  # media type, lower-case, without parameters
    content_length: int | None
    chunked: bool

    def __init__(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        content_type: str,
        content_length: int | None,
        chunked: bool,
    ) -> None:
        self.status, self.headers, self.content_type = status, headers, content_type
        self.content_length, self.chunked = content_length, chunked


def _media_type(value: bytes | None) -> str:
    if value is None:
        return "application/octet-stream"  # RFC 9110 8.3: what a body without a type may be taken as
    known = _MEDIA_TYPES.get(value)
    if known is None:
        known = value.split(b";", 1)[0].strip().decode("latin-1").lower()
        if len(_MEDIA_TYPES) < 64:  # a backend sends one or two: the same values recur
            _MEDIA_TYPES[value] = known
    return known


_MEDIA_TYPES: Final[dict[bytes, str]] = {}  # content-type values seen, and their media types


_GONE: Final = httptools.HttpResponseParser(object())  # what a closed connection holds instead of its parser


class Connection(asyncio.Protocol):
    __slots__ = (
        "_body",
        "_buffered",
        "_counted",
        "_deadline_timer",
        "_detached",
        "_head_due",
        "_head_timer",
        "_head_timer_at",
        "_headers",
        "_idle_timer",
        "_last",
        "_loop",
        "_out",
        "_paused",
        "_pool",
        "_waiter",
        "_waiting_since",
        "complete",
        "error",
        "head",
        "idle",
        "idle_since",
        "keep_alive",
        "lost",
        "no_body",
        "origin",
        "parser",
        "reused",
        "sink",
        "translate",
        "transport",
        "wire",
    )

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self._pool, self.origin = pool, origin
        self._loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.reused = False
        self.idle_since = 0.0
        self._out = b""  # a request held to the end of the loop's turn (server.outbox)
        self._counted = False  # its request is among the pool's in_flight
        # one parser for the connection's answers: llhttp starts the next message after one that
        # completes on a kept-alive connection (the only kind reused), as a new parser would
        self.parser = httptools.HttpResponseParser(self)
        # head_within()'s timer, one for the connection's life, moved lazily: it is left running
        # when a head comes in time, and on firing it looks at the head awaited then (_head_due)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_timer_at = 0.0  # when it fires
        self._reset()

    def _reset(self) -> None:
        self.translate: Callable[[BaseException], BaseException] = _same  # set by the response using it
        # under capture, each read of this answer with its time, and an empty one when it ended
        # (made by request() when asked; read back by server.capture_wire)
        self.wire: list[tuple[int, bytes]] | None = None
        self.head: asyncio.Future[Head] = self._loop.create_future()
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        # takes each body piece in the read callback while the reader waits (server.direct); True: taken
        self.sink: Callable[[bytes], bool] | None = None
        self._detached = False  # the sink ended the body for its reader (nothing more is needed)
        self.complete = self.keep_alive = False
        self.no_body = False  # the answer to a HEAD: its head is all of it, whatever it declares
        self.error: BaseException | None = None
        self.idle: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._head_due = 0.0  # loop time by which this answer's head must be in (0: no limit, or none awaited)
        self._last = self._waiting_since = 0.0

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._pool.forget(self)
        self._stop_head_timer()
        if not self.complete and self.error is None:
            head = self._head_in()
            if head is not None:
                if head.content_length is None and not head.chunked:
                    self.complete = True  # a body without framing ends with the connection (RFC 9112 6.3)
                    self._ended()
                else:
                    fault = "TransferEncodingError" if head.chunked else "ContentLengthError"
                    self._fail(Broken(fault, before_head=False))
            else:
                self._fail(Broken(type(exc).__name__ if exc else "ServerDisconnectedError", before_head=True))
        self._wake()
        self.parser = _GONE  # (it calls this connection's methods: a cycle; nothing more is parsed)

    def data_received(self, data: bytes) -> None:
        POLL.wake(self._loop)  # (serve --idle-poll-us)
        wire = self.wire
        if wire is not None:
            wire.append((now(), data))
        if self.idle is not None:
            self._last = self._loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(Broken("UpgradeNotSupported", before_head=not self.head.done()))
        except httptools.HttpParserError as exc:
            head = self._head_in()
            chunked = head is not None and head.chunked
            fault = "TransferEncodingError" if chunked else type(exc).__name__
            self._fail(Broken(fault, before_head=not self.head.done()))
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def pause_writing(self) -> None:  # a request body larger than the socket buffer: written anyway
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks ---------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._headers = []  # an interim answer (100 Continue): the real head follows
            return
        length = content_type = None
        chunked = False
        for name, value in self._headers:
            # a name is lowered only when its length is one of the three looked for and it is not
            # already in lower case (as most servers send them): most are looked at by their length
            size = len(name)
            if size == 14 and (name == b"content-length" or name.lower() == b"content-length"):
                length = int(value) if value.strip().isdigit() else None
            elif size == 12 and (name == b"content-type" or name.lower() == b"content-type"):
                content_type = value
            elif size == 17 and (name == b"transfer-encoding" or name.lower() == b"transfer-encoding"):
                chunked = value.lower().find(b"chunked") != -1
        if not self.head.done():
            self.head.set_result(Head(status, self._headers, _media_type(content_type), length, chunked))
            if self.no_body:
                # httptools cannot be told that a HEAD's answer has no body: it is complete now, and
                # the connection is not reused (the parser would read the next answer as this body)
                self.complete, self.keep_alive = True, False
                self._ended()

    def on_body(self, body: bytes) -> None:
        sink, waiter = self.sink, self._waiter
        # the sink only while the reader waits with nothing buffered: the bytes keep their order
        if sink is not None and waiter is not None and not self._body and not waiter.done() and sink(body):
            return
        self._body.append(body)
        self._buffered += len(body)
        waiter = self._waiter  # _wake(), inline: once per read
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        if not self.head.done():  # an interim answer's end
            return
        self.complete = True
        # asked now: the parser forgets it for the next message (a HEAD's connection is not reused)
        self.keep_alive = self.parser.should_keep_alive() and not self.no_body
        self._ended()
        self._wake()

    def _ended(self) -> None:
        """The answer is complete: an empty read says so to a capture of its reads."""
        wire = self.wire
        if wire is not None:
            wire.append((now(), b""))

    # -- the exchange ----------------------------------------------------------------------------
    def request(self, head: bytes, body: bytes | None, *, no_body: bool = False, record: bool = False) -> None:
        """Write one request; ``no_body``: it is a HEAD, whose answer ends with its head; ``record``:
        the answer's reads are noted in a new ``wire`` list (under capture)."""
        assert self.transport is not None
        self.no_body = no_body
        self.wire = [] if record else None
        pool = self._pool
        if not self._counted:
            self._counted = True
            pool.in_flight += 1
        data = head + body if body else head
        # a lone request is never held: only where others are under way can a turn have several writes
        if pool.in_flight < 2 or len(data) > HOLD_MAX or pool.outbox.first(self._loop):
            self.transport.write(data)
        else:  # the turn's others go out with it at its end
            self._out = data
            self._pool.outbox.hold(self)

    def flush(self) -> None:
        data, self._out = self._out, b""
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def head_within(self, seconds: float) -> asyncio.Future[Head]:
        """``head``, failed with ``TimeoutError`` if it is not in within ``seconds`` (a timer on the
        future: cheaper than ``asyncio.timeout``, which cancels and uncancels the waiting task).
        The opener then calls ``done()``, which closes the connection."""
        if not self.head.done():
            due = self._head_due = self._loop.time() + seconds
            if self._head_timer is None or self._head_timer_at > due:  # none, or one too late for this head
                self._arm_head(due)
        return self.head

    def _arm_head(self, at: float) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer, self._head_timer_at = self._loop.call_at(at, self._head_late), at

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        """The head timer fired: the head awaited now fails if its time is up, or the timer waits
        for its time; with none awaited (it came in time, the connection idles), the timer stops."""
        self._head_timer = None
        due = self._head_due
        if due == 0.0 or self.head.done() or self.lost:
            return
        if self._loop.time() < due - TIMER_SLACK:  # (a timer may fire a little early, as asyncio's do)
            self._arm_head(due)
            return
        self.head.set_exception(TimeoutError())
        self.head.exception()  # retrieved: the opener may have stopped waiting

    def detach(self) -> None:
        """The sink needs nothing more: the waiting reader's body ends (StopAsyncIteration)."""
        self.sink = None
        self._detached = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _head_in(self) -> Head | None:
        """The response's head, once it is in; None before, and when the wait for it ended
        otherwise (timed out, or cancelled with the task that waited)."""
        head = self.head
        if not head.done() or head.cancelled() or head.exception() is not None:
            return None
        return head.result()

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: the opener may have stopped waiting
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def watch(self, idle: float | None, deadline: float | None) -> None:
        """From now on (the head is in), a reader waiting ``idle`` seconds without a byte gets
        Silent, and any reader after ``deadline`` (loop time) gets Expired."""
        if self.complete:
            return
        self.idle = idle
        if idle is not None:
            self._last = self._loop.time()
            self._idle_timer = self._loop.call_at(self._last + idle, self._check_idle)
        if deadline is not None:
            self._deadline_timer = self._loop.call_at(deadline, self._expired)

    def _expired(self) -> None:
        self._deadline_timer = None
        if not self.complete:
            self._fail(Expired())

    def _check_idle(self) -> None:
        self._idle_timer = None
        if self.complete or self.error is not None or self.idle is None:
            return
        now = self._loop.time()
        if self._waiter is not None and not self._waiter.done():
            due = max(self._last, self._waiting_since) + self.idle
            if now >= due:
                self._fail(Silent())
                return
        else:  # the reader is busy elsewhere (a slow client): a wait that began now is due at the earliest
            due = now + self.idle
        self._idle_timer = self._loop.call_at(due, self._check_idle)

    def _taken(self) -> None:
        """What the body held was taken: the buffer is empty again, and reading resumes if it was paused."""
        self._body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None and not self.lost:
            self._paused = False
            self.transport.resume_reading()

    def _arm(self) -> asyncio.Future[None]:
        """The future the next wake (bytes, the end, an error) resolves; the reader awaits it."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiter = waiter
        if self.idle is not None:
            self._waiting_since = self._loop.time()
        return waiter

    async def next_piece(self) -> bytes:
        """The next body bytes as they came; StopAsyncIteration once the body is complete; what
        ended it otherwise, as ``translate`` makes it (the body's ``__anext__``)."""
        while True:
            if self._detached:
                raise StopAsyncIteration
            body = self._body
            if body:
                data = body[0] if len(body) == 1 else b"".join(body)
                self._taken()
                return data
            if self.error is not None:
                raise self.translate(self.error)
            if self.complete:
                raise StopAsyncIteration
            try:
                await self._arm()
            finally:
                self._waiter = None

    async def read_rest(self, limit: int, each: Callable[[bytes], None] | None = None) -> bytes | None:
        """The rest of the body in one call, or None once it passes ``limit`` bytes (the rest is
        not read); what ended it otherwise, as ``translate`` makes it. ``each`` is handed what
        each wake found, as ``next_piece`` would have returned it (a capture notes the reads).
        For a plain answer read whole: the end is a return, not the StopAsyncIteration of
        ``next_piece``, for which compiled code builds a traceback (4.4k instructions a request)."""
        parts: list[bytes] = []
        size = 0
        while True:
            if self._detached:
                break
            body = self._body
            if body:
                size += self._buffered
                if each is not None:
                    each(body[0] if len(body) == 1 else b"".join(body))
                if size > limit:
                    return None
                parts.extend(body)
                self._taken()
                continue
            if self.error is not None:
                raise self.translate(self.error)
            if self.complete:
                break
            try:
                await self._arm()
            finally:
                self._waiter = None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def done(self) -> None:
        """The response is no longer wanted: back to the pool if it was read to its end on a
        connection that stays open, otherwise closed at once (which stops the backend)."""
        self.sink = None
        self.wire = None  # (what comes after is no longer this answer's)
        if self._counted:
            self._counted = False
            self._pool.in_flight -= 1
        for timer in (self._idle_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._deadline_timer = None
        if self.complete and self.keep_alive and self.error is None and not self.lost:
            self._reset()  # (the head timer left as it is: it stops by itself, or serves the next head)
            self._pool.release(self)
        else:
            self.lost = True
            self._stop_head_timer()
            # The parser and the response (by ``translate``) point back at this connection: cycles
            # only the collector would free, where nothing is parsed or translated any more.
            self.parser, self.translate = _GONE, _same
            if self.transport is not None:
                self.transport.close()


def _same(error: BaseException) -> BaseException:
    return error


class Body:
    """A response body as an async iterator: each ``__anext__`` is the connection's own wait, with
    no async generator between (one coroutine a piece, not three)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __aiter__(self) -> Body:
        return self

    def __anext__(self) -> Coroutine[Any, Any, bytes]:
        return self._conn.next_piece()


class Pool:
    """Idle keep-alive connections per origin; ``connect`` reuses the most recently used one."""

    def __init__(self, keepalive: float) -> None:
        self.keepalive = keepalive
        # The loop, looked up once: asyncio's lookup calls getpid() (a system call) each time.
        self.loop = asyncio.get_running_loop()
        self.outbox = Outbox()  # its connections' requests, a turn of the loop at a time
        self.in_flight = 0  # requests written whose answer is still wanted
        self._idle: dict[Origin, list[Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    def take(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if not conn.lost and now - conn.idle_since < self.keepalive:
                conn.reused = True
                return conn
            conn.done()
        return None

    async def connect(self, origin: Origin) -> Connection:
        scheme, host, port = origin
        loop = self.loop
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        _, conn = await loop.create_connection(
            lambda: Connection(self, origin), host, port, ssl=context, server_hostname=host if context else None
        )
        return conn

    def release(self, conn: Connection) -> None:
        if self._closed:
            conn.done()
            return
        loop = self.loop
        conn.idle_since = loop.time()
        self._idle.setdefault(conn.origin, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.keepalive / 4, self._sweep)

    def forget(self, conn: Connection) -> None:
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _sweep(self) -> None:
        """Close connections idle for ``keepalive`` seconds (before the backend closes them under a request)."""
        self._sweeper = None
        now = self.loop.time()
        left = False
        for idle in self._idle.values():
            for conn in [c for c in idle if now - c.idle_since >= self.keepalive]:
                idle.remove(conn)
                conn.lost = True
                if conn.transport is not None:
                    conn.transport.close()
            left = left or bool(idle)
        if left:
            self._sweeper = self.loop.call_later(self.keepalive / 4, self._sweep)

    def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for conn in idle:
                conn.lost = True
                if conn.transport is not None:
                    conn.transport.close()
        self._idle.clear()
