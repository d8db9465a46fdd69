"""The client-facing HTTP/1.1 connection: httptools parses, each request runs the ASGI app in a task.

Written for this proxy rather than taken from a general server (uvicorn's protocol and ASGI cycle
were 150k instructions a plain request before the gateway did anything: bench/README.md): the
request's framing is ``server.h1cycle``; this module is the connection around it, with keep-alive,
pipelining (requests answered in order, reading paused while one waits), backpressure both ways,
and the bounds a public server needs, per connection:

* a deadline for the request head (from the connection's start, or from the first byte of a later
  request on a kept-alive connection) and one for the body (from the end of the head): a client
  that drips bytes cannot hold a connection past them. A partial request gets a 408; a connection
  that sent nothing is closed quietly, as a kept-alive connection idle for ``keep_alive`` seconds is.
* a deadline for the answer's writes (``send_timeout``): a client that takes none of its answer
  that long (the writes backed up: it stopped reading) is dropped, which ends its request and the
  upstream's with it, as a client that leaves does; a slow reader that keeps reading is not.
* a bound on the head's bytes (request line and headers): past it, a 431, and nothing more is kept.
* a 413 as soon as the head declares a body over the limit, before any of the body is read.
* a bound on open connections: at the bound, a new connection replaces the one that has waited
  longest for a request head (an idle or a dripping one; never one with a request in progress), so
  a flood of half-open connections cannot keep ``/health`` from answering; if every connection is
  busy, the new one gets a 503.

Every refusal (malformed HTTP included) is an OpenAI-shaped JSON error with ``connection: close``.
After it the connection lingers briefly, reading and discarding, so that a client still sending
sees the answer instead of a reset (a close with unread bytes makes the kernel send RST).

The request's deadlines share one timer per connection, moved lazily: a busy kept-alive connection arms one
every few seconds, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import unquote

import httptools

from oaishim.server.exchange import DIRECT_BODY, ON_GONE, READ, REQUEST_TASK, RESPOND
from oaishim.server.h1cycle import HIGH_WATER, Cycle, status_line
from oaishim.server.idle_poll import POLL
from oaishim.server.outbox import HOLD_MAX, Outbox
from oaishim.wire.errors import OpenAIError, bad_request, internal_error, timeout, too_large, unavailable

log: Final = logging.getLogger("oaishim.http")
# Final: a static once compiled, where an imported name is a module-dict lookup a call
now: Final = time.perf_counter_ns
LINGER_SECONDS: Final = 2.0  # how long a refused connection is read and discarded before it is closed
PIPELINE_MAX: Final = 16  # requests a connection holds behind the one being answered; past it, the last closes it
_ASGI: Final = {"version": "3.0", "spec_version": "2.3"}
# what the shared timer is waiting for
_NONE: Final = 0
_HEAD: Final = 1
_BODY: Final = 2
_IDLE: Final = 3
_LINGER: Final = 4
TASK_NAME: Final = "oaishim-request"  # every request's task (asyncio names the others Task-N)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 20.0  # seconds for the whole request head
    body_timeout: float = 60.0  # seconds for the whole body, after the head
    max_header_bytes: int = 64 * 1024
    max_body_bytes: int | None = None  # a larger declared Content-Length is refused at once
    max_connections: int | None = 1024
    keep_alive: float = 5.0  # seconds an idle kept-alive connection is kept (as uvicorn and Node do)
    # seconds a client may take none of its answer (the writes backed up) before it is dropped
    send_timeout: float = 60.0
    # microseconds the loop polls after a read before it sleeps (server.idle_poll; 0: it sleeps at once)
    idle_poll_us: int = 0


@dataclass(slots=True)
class ServerState:
    """What a server's connections share: the app, the limits, the open connections and tasks."""

    app: Any
    limits: HttpLimits
    date: bytes = b""  # the ``date`` header line, kept current by the server (b"": none)
    stopping: bool = False  # the server is draining: a connection made now is shut down at once
    connections: set[HttpConnection] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    outbox: Outbox = field(default_factory=Outbox)  # the connections' writes, a turn of the loop at a time
    note_reads: bool = False  # under capture: a request that came whole in one read gets it in its scope (READ)


def _answer(error: OpenAIError, date: bytes) -> bytes:
    body = error.to_bytes()
    head = status_line(error.status) + date
    head += b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    return head + body


# Request targets the parse found to be all path, no query (a bounded cache: a gateway's few routes recur)
_WHOLE_PATHS: Final[set[bytes]] = set()


def split_target(url: bytes) -> tuple[bytes, bytes]:
    """A request target's path and query (empty when none), as ``httptools.parse_url`` splits it,
    which raises ``HttpParserInvalidURLError`` for one it refuses. A target the parse found to be a
    path alone before is not parsed again: the parse is a tenth of handling a request's head."""
    if url in _WHOLE_PATHS:
        return url, b""
    parsed: Any = httptools.parse_url(url)  # (its stub says bytes; a missing part is None)
    path: bytes = parsed.path or b"/"
    if path == url and len(_WHOLE_PATHS) < 256:
        _WHOLE_PATHS.add(url)
    return path, parsed.query or b""


_GONE: Final = httptools.HttpRequestParser(object())  # what a lost connection holds instead of its parser


class HttpConnection(asyncio.Protocol):
    __slots__ = (
        "_between",
        "_deadline",
        "_head_bytes",
        "_headers",
        "_heads",
        "_held",
        "_in_head",
        "_out",
        "_refused",
        "_stall",
        "_stopped",
        "_timer",
        "_timer_at",
        "_url",
        "_waiting_since",
        "_why",
        "_writable",
        "answering",
        "client",
        "loop",
        "parser",
        "parsing",
        "queue",
        "read_paused",
        "server",
        "state",
        "transport",
        "write_paused",
    )

    def __init__(self, state: ServerState, loop: asyncio.AbstractEventLoop) -> None:
        self.state, self.loop = state, loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.client: Any = None
        self.server: Any = None
        self.parsing: Cycle | None = None  # the request the parser is reading
        self.answering: Cycle | None = None  # the request being answered (the app's)
        self.queue: deque[Cycle] = deque()  # pipelined requests behind it
        self.read_paused = self.write_paused = False
        self._writable: asyncio.Future[None] | None = None
        self._out: list[bytes] = []  # written in this turn of the loop, after its first write (server.outbox)
        self._held = 0  # their bytes
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._in_head = True  # between requests or inside a head: bytes count toward max_header_bytes
        self._between = True  # no request begun and unfinished: the next byte read begins one
        self._head_bytes = 0
        self._heads = 0  # request heads completed on this connection
        self._waiting_since = 0.0  # when this connection began waiting for a request (eviction order)
        self._refused = False
        self._stopped = False  # the pipeline is full: nothing more is parsed, the last queued request closes
        self._why = _NONE
        self._deadline = self._timer_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None  # send_timeout, while the writes are backed up

    @property
    def date(self) -> bytes:
        return self.state.date

    # -- writing (server.outbox) -------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """``data`` to the client: now if it is the loop turn's first write or the only request
        under way, else at the turn's end with the others (in order; at once past ``HOLD_MAX``)."""
        out = self._out
        if out:
            out.append(data)
            self._held += len(data)
            if self._held > HOLD_MAX:
                self.flush()
        elif len(self.state.tasks) < 2 or self.state.outbox.first(self.loop):
            self.transport.write(data)  # (a lone request's is never held: no other write can join it)
        else:
            out.append(data)
            self._held = len(data)
            self.state.outbox.hold(self)

    def flush(self) -> None:
        """What this connection holds, written now (dropped if the connection is closing)."""
        out = self._out
        if out:
            self._out, self._held = [], 0
            if not self.transport.is_closing():
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _close(self) -> None:
        self.flush()
        self.transport.close()

    # -- connection ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        self.client, self.server = _address(transport, "peername"), _address(transport, "sockname")
        limit = self.state.limits.max_connections
        crowded = limit is not None and len(self.state.connections) >= limit and not self._evict_one()
        self.state.connections.add(self)
        self._waiting_since = self.loop.time()
        if crowded:
            message = "The server is overloaded with connections; please try again later."
            self._refuse(unavailable(message, code="too_many_connections"))
            return
        self._expect(_HEAD, self.state.limits.header_timeout)
        if self.state.stopping:  # accepted as the listening stopped, made after the drain's pass
            self.shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self._why = _NONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        for cycle in {self.answering, self.parsing, *self.queue}:
            if cycle is not None:
                cycle.lost()
        self._wake_writer()
        # The parser calls this connection's methods and the last request points back at it: a
        # cycle only the collector would free. Nothing is parsed once the connection is gone.
        self.parser = _GONE
        self.parsing = None
        self._out, self._held = [], 0  # (nothing more can be written)

    def shutdown(self) -> None:
        """The server is stopping: an idle connection closes now, a busy one after its answer."""
        if self.answering is None:
            self._close()
        else:
            self.answering.keep_alive = False

    # -- flow control ----------------------------------------------------------------------------
    def pause_writing(self) -> None:
        self.write_paused = True
        if self._stall is None:
            self._stall = self.loop.call_later(self.state.limits.send_timeout, self._stalled)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._wake_writer()

    def _stalled(self) -> None:
        """The client took none of its answer for send_timeout seconds: it is dropped, which ends
        the request (and with it the upstream's, freeing the backend), as a client that left does."""
        self._stall = None
        log.info(
            "client %s took nothing for %g s (send_timeout): connection closed",
            self.client,
            self.state.limits.send_timeout,
        )
        self.transport.abort()

    def _wake_writer(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        if self._writable is None:
            self._writable = self.loop.create_future()
        await asyncio.shield(self._writable)  # (one waiter cancelled leaves the others theirs)

    def resume_reading(self) -> None:
        if self.read_paused and not self._refused:
            self.read_paused = False
            self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    # -- reading -------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused or self._stopped:
            return  # lingering after a refusal (or past a full pipeline): read and dropped
        POLL.wake(self.loop)  # (serve --idle-poll-us: the loop polls a while before it sleeps again)
        if self._why == _IDLE:
            self._why = _NONE
        rest = b""
        heads = self._heads
        # under capture, a read that starts between requests may hold one whole: its time, before parsing
        t_read = now() if self._between and self.state.note_reads else 0
        if self._in_head:
            room = self.state.limits.max_header_bytes - self._head_bytes
            if len(data) > room:  # feed the head's budget only; the rest after the head is complete
                data, rest = data[:room], data[room:]
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # an Upgrade (h2c, websocket) is not taken: the request is answered as HTTP/1.1, then
            # closed; what follows its head is another protocol's, never read as its body
            if self._refused:
                return
            cycle = self.parsing
            if cycle is not None and cycle.more_body:
                cycle.end()
            self._why = _NONE
            self._pause_reading()
            return
        except httptools.HttpParserCallbackError as fault:  # this module's own fault, not the client's
            log.error("the request could not be read", exc_info=fault.__context__ or fault)
            self._refuse(internal_error("The server had an error while reading your request."))
            return
        except httptools.HttpParserError as exc:
            reason = str(exc).rstrip(".") or "Invalid HTTP request received"
            self._refuse(bad_request(f"{reason}: the request is not valid HTTP/1.1."))
            return
        if self._refused or self.transport.is_closing():
            return
        if self._in_head and self._heads == heads:  # still inside the same head
            if self._head_bytes >= self.state.limits.max_header_bytes:
                limit = self.state.limits.max_header_bytes
                message = f"The request headers are too large: the limit is {limit} bytes."
                self._refuse(OpenAIError(431, message, "invalid_request_error", code="headers_too_large"))
            elif self._why != _HEAD and self._head_bytes:
                # a head in pieces on a kept-alive connection: its time starts now (a head that
                # arrives whole, the usual case, costs no timer)
                self._expect(_HEAD, self.state.limits.header_timeout)
            return
        if rest:
            self.data_received(rest)
        elif t_read and self._heads == heads + 1:
            self._note_read(t_read, data)

    def _note_read(self, t_ns: int, data: bytes) -> None:
        """The read began a request and held one request's head: if it held the whole request and
        nothing after it (no other request begun), the request's scope gets the read (READ), which
        a recorder keeps as the request."""
        cycle = self.parsing
        if cycle is not None and self._between and not cycle.more_body:
            cycle.scope[READ] = (t_ns, data)

    # -- httptools callbacks ---------------------------------------------------------------------
    # After a refusal (or a full pipeline) made inside a callback, the parser still goes on with the
    # rest of the buffer: each callback then does nothing.
    def on_message_begin(self) -> None:
        self._between = False
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused:
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self._refused or self._stopped:
            return
        self._why = _NONE
        self._in_head = False
        self._heads += 1
        headers = self._headers
        limit = self.state.limits.max_body_bytes
        expect = False
        for name, value in headers:
            if name == b"content-length" and limit is not None:
                if value.isdigit() and int(value) > limit:  # (the parser refuses a value that is not a number)
                    self._refuse(too_large(limit))
                    return
            elif name == b"expect":
                expect = value.lower() == b"100-continue"
        try:
            raw_path, query = split_target(self._url)
            path = raw_path.decode("ascii")
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            self._refuse(bad_request(f"Invalid URL {self._url[:200].decode('latin-1')!r}."))
            return
        if "%" in path:
            path = unquote(path)
        parser = self.parser
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": parser.get_http_version(),
            "server": self.server,
            "client": self.client,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": headers,
        }
        cycle = Cycle(self, scope, parser.should_keep_alive(), expect)
        scope["extensions"] = {ON_GONE: cycle.watch_gone, DIRECT_BODY: cycle.direct, RESPOND: cycle.respond}
        self.parsing = cycle
        if self.answering is None:
            self._begin(cycle)
        else:
            self.queue.append(cycle)
            self._pause_reading()  # the answers go out in order: nothing more is read meanwhile
            if len(self.queue) >= PIPELINE_MAX:  # (a read can hold thousands of small requests)
                cycle.keep_alive = False
                self._stopped = True
        if parser.should_upgrade():
            cycle.keep_alive = False
        elif not self.transport.is_closing():
            self._expect(_BODY, self.state.limits.body_timeout)  # cleared at the message's end

    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        if cycle is None or self._refused or cycle.complete or cycle.disconnected:
            return  # the body of a request already answered: read and dropped
        if cycle.feed(body) > HIGH_WATER:
            self._pause_reading()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        if self._why == _BODY:
            self._why = _NONE
        self._between = True
        self._in_head = True
        self._head_bytes = 0
        cycle = self.parsing
        if cycle is not None:
            cycle.end()
            if self.answering is None and not self.queue and not self._stopped:
                self._expect(_IDLE, self.state.limits.keep_alive)  # answered before its body's end

    # -- answering -------------------------------------------------------------------------------
    def _begin(self, cycle: Cycle) -> None:
        self.answering = cycle
        coro = self._run(cycle)
        # the loop's task, made as its create_task makes it but named: an unnamed task's name is
        # formatted from a counter, a fifth of its making (a task factory, if one is set, makes it)
        loop = self.loop
        task = loop.create_task(coro) if loop.get_task_factory() else asyncio.Task(coro, loop=loop, name=TASK_NAME)
        cycle.scope["extensions"][REQUEST_TASK] = task  # (before the task's first step)
        self.state.tasks.add(task)  # taken out as _run ends, rather than by a done callback (a loop turn's callback)

    async def _run(self, cycle: Cycle) -> None:
        task = cycle.scope["extensions"][REQUEST_TASK]  # this one's (asyncio.current_task runs as Python)
        try:
            await self.state.app(cycle.scope, cycle.receive, cycle.send)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.error("the request %s %s failed", cycle.scope["method"], cycle.scope["path"], exc_info=exc)
            self._unfinished(cycle)
            if not isinstance(exc, Exception):
                raise
        else:
            if not cycle.complete:
                self._unfinished(cycle)
        finally:
            # The extensions are the request's bound methods, and a lost connection still points at
            # the request it was answering: cycles (the request, its scope, its headers and body)
            # only the collector would free. Taken away, reference counting frees them now.
            del cycle.scope["extensions"]
            self.state.tasks.discard(task)
            if cycle.disconnected and self.answering is cycle:
                self.answering = None

    def _unfinished(self, cycle: Cycle) -> None:
        """The app ended without a complete answer: a 500 if none began, else the connection is
        dropped without the body's end (the client sees a broken answer, never a short whole one)."""
        if cycle.complete or cycle.disconnected or self.transport.is_closing():
            return
        if not cycle.started:
            error = internal_error("The server had an error while processing your request.")
            self.write(_answer(error, self.state.date))
        self._close()

    def answered(self, cycle: Cycle) -> None:
        """``cycle``'s response is complete: close, or go on with the next request."""
        if self.answering is cycle:
            self.answering = None
        if not cycle.keep_alive:
            if self._stopped:
                self._linger()  # the requests past the full pipeline are unread: no reset before the answers
            else:
                self._close()
            return
        self._waiting_since = self.loop.time()
        if self.queue:
            self._begin(self.queue.popleft())
        if not self.queue:
            # read on: the pipelined requests, or a body the app did not read (an early refusal, dropped)
            self.resume_reading()
            if self.answering is None and self._in_head and not self._head_bytes:
                self._expect(_IDLE, self.state.limits.keep_alive)

    def _evict_one(self) -> bool:
        """Make room: close a connection that has nothing in progress, one that never completed a
        request first (a flood of empty or dripping connects replaces itself, not the clients' pooled
        keep-alive connections), then one answered while its client still sends a body, the
        longest-waiting first; False when all are busy. A connection whose answer is complete counts
        as idle even while its client is still sending the body (a refused request with a large
        declared body would otherwise hold its slot until the body timeout, without any key)."""
        idle = [
            c
            for c in self.state.connections
            if not c._refused and not c.transport.is_closing() and c.answering is None and not c.queue
        ]
        if not idle:
            return False
        # never sent a whole head; answered but still sending a body nobody reads; then idle keep-alive
        victim = min(idle, key=lambda c: (c._heads > 0, c._in_head, c._waiting_since))
        victim._why = _NONE
        victim.transport.abort()  # (close() would wait for a client that does not read)
        return True

    # -- deadlines: one timer, moved lazily ------------------------------------------------------
    def _expect(self, why: int, seconds: float) -> None:
        at = self.loop.time() + seconds
        self._why, self._deadline = why, at
        timer = self._timer
        if timer is None or self._timer_at > at:
            if timer is not None:
                timer.cancel()
            self._timer, self._timer_at = self.loop.call_at(at, self._expire), at
        # else the timer fires early and moves itself to the deadline

    def _expire(self) -> None:
        self._timer = None
        why = self._why
        if why == _NONE:
            return
        if self.loop.time() < self._deadline:
            self._timer, self._timer_at = self.loop.call_at(self._deadline, self._expire), self._deadline
            return
        self._why = _NONE
        if why == _LINGER:
            self.transport.abort()  # the answer had its time; a client that does not read holds nothing
        elif why == _IDLE:
            self._close()
        elif why == _BODY and self.parsing is not None and self.parsing.complete:
            self._close()  # its answer went out already (an early refusal): nothing more to say
        elif why == _BODY:
            seconds = self.state.limits.body_timeout
            self._refuse(timeout(f"The request body did not arrive within {seconds:g} s.", 408))
        elif self.answering is not None:
            # a pipelined head behind a response still being sent: its time starts after that response
            self._expect(_HEAD, self.state.limits.header_timeout)
        elif self._head_bytes == 0:
            self._close()  # no request begun: nothing to answer
        else:
            seconds = self.state.limits.header_timeout
            self._refuse(timeout(f"The request headers did not arrive within {seconds:g} s.", 408))

    # -- refusals --------------------------------------------------------------------------------
    def _refuse(self, error: OpenAIError) -> None:
        """Answer ``error`` and close; a request already in the app sees a disconnect."""
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._why = _NONE
        started = False
        for cycle in (self.answering, *self.queue, self.parsing):
            if cycle is not None and not cycle.complete and not cycle.disconnected:
                started = started or cycle.started
                cycle.lost()  # the app's receive() returns http.disconnect; its sends are dropped
        if started:  # an answer is under way: nothing can be added to it
            self._close()
            return
        log.debug("refused a request: %d %s", error.status, error.message)
        self.write(_answer(error, self.state.date))
        self._linger()

    def _linger(self) -> None:
        """End the connection's sending, read (and drop) what the client still sends for a while,
        then close: a close with unread bytes makes the kernel send RST, which drops the answer."""
        self.flush()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self._expect(_LINGER, LINGER_SECONDS)


def _address(transport: asyncio.BaseTransport, name: str) -> tuple[str, int] | None:
    found = transport.get_extra_info(name)
    return (str(found[0]), int(found[1])) if isinstance(found, tuple) and len(found) >= 2 else None


def protocol_factory(state: ServerState, loop: asyncio.AbstractEventLoop) -> Callable[[], HttpConnection]:
    return lambda: HttpConnection(state, loop)
