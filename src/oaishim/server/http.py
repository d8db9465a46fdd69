"""The client-facing HTTP/1.1 connection: uvicorn's httptools protocol with the limits it lacks.

uvicorn bounds nothing while a request arrives: a connection that sends half a request line is held
forever, an unfinished header value is buffered without end, a declared ``Content-Length`` over the
body limit is only refused after the body was read, and its own refusals (400, 503) are plain text.
:class:`GuardedHttpTools` adds, per connection:

* a deadline for the request head (from the connection's start, or from the first byte of a later
  request on a kept-alive connection) and one for the body (from the end of the head): a client
  that drips bytes cannot hold a connection past them. A partial request gets a 408; a connection
  that sent nothing is closed quietly, as an idle keep-alive connection is.
* a bound on the head's bytes (request line and headers): past it, a 431, and nothing more is kept.
* a 413 as soon as the head declares a body over the limit, before any of the body is read.
* a bound on open connections: at the bound, a new connection replaces the one that has waited
  longest for a request head (an idle or a dripping one; never one with a request in progress), so
  a flood of half-open connections cannot keep ``/health`` from answering; if every connection is
  busy, the new one gets a 503.

Every refusal is an OpenAI-shaped JSON error with ``connection: close``. After it the connection
lingers briefly, reading and discarding, so that a client still sending sees the answer instead of
a reset (a close with unread bytes makes the kernel send RST, which drops the answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from oaishim.server.exchange import DIRECT_BODY, ON_GONE
from oaishim.server.writes import JoiningTransport
from oaishim.wire.errors import OpenAIError, bad_request, timeout, too_large, unavailable

LINGER_SECONDS = 2.0  # how long a refused connection is read and discarded before it is closed


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 20.0  # seconds for the whole request head
    body_timeout: float = 60.0  # seconds for the whole body, after the head
    max_header_bytes: int = 64 * 1024
    max_body_bytes: int | None = None  # a larger declared Content-Length is refused at once
    max_connections: int | None = 1024


def _answer(error: OpenAIError, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = error.to_bytes()
    head = [STATUS_LINE[error.status]]
    head += [b"%s: %s\r\n" % pair for pair in default_headers]
    head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join(head) + body


def _nothing() -> None:
    return None


def protocol_class(limits: HttpLimits) -> type[GuardedHttpTools]:
    """The protocol uvicorn instantiates per connection (``uvicorn.Config(http=...)``), with these limits."""
    return type("GuardedHttpTools", (GuardedHttpTools,), {"limits": limits})


class GuardedHttpTools(HttpToolsProtocol):
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_concurrency = None  # uvicorn's own check answers text/plain; max_connections replaces it
        self._in_head = True  # between requests or inside a head: bytes count toward max_header_bytes
        self._head_bytes = 0
        self._heads = 0  # request heads completed on this connection
        self._waiting_since = 0.0  # when this connection began waiting for a request (eviction order)
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._on_gone: Callable[[], None] | None = None  # the request's callback for a lost client

    # -- connection ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limit = self.limits.max_connections
        crowded = limit is not None and len(self.connections) >= limit and not self._evict_one()
        super().connection_made(transport)
        self.transport = JoiningTransport(transport, self.loop)  # type: ignore[assignment]  # a head with its body
        self._waiting_since = self.loop.time()
        if crowded:
            message = "The server is overloaded with connections; please try again later."
            self._refuse(unavailable(message, code="too_many_connections"))
            return
        self._arm(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)
        self._client_gone()

    # -- the client-gone callback (the ON_GONE extension) -----------------------------------------
    def _watch_gone(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback`` for the current request: called once if the connection is lost or
        refused before its response is complete. Reading resumes, as an ASGI receive() would, so a
        client's close is seen."""
        cycle = self.cycle
        if cycle is None or cycle.disconnected:
            callback()
            return _nothing
        self._on_gone = callback
        self.flow.resume_reading()

        def unregister() -> None:
            if self._on_gone is callback:
                self._on_gone = None

        return unregister

    def _client_gone(self) -> None:
        callback, self._on_gone = self._on_gone, None
        if callback is not None and self.cycle is not None and not self.cycle.response_complete:
            callback()

    # -- body pieces written without a message (the DIRECT_BODY extension, server.direct) ----------
    def _direct(self, scope: Any) -> tuple[Callable[[], bool], Callable[[bytes], None]] | None:
        """(ready, write) for the response of the request whose scope is ``scope``: ``ready()`` when a
        piece can go out now (its chunked body under way, the client reading, the connection open),
        ``write(piece)`` frames it as uvicorn does. None while a pipelined request's cycle is current."""
        cycle = self.cycle
        if cycle is None or cycle.scope is not scope:
            return None
        flow, transport = self.flow, self.transport

        def ready() -> bool:
            return (
                cycle.chunked_encoding is True
                and not cycle.response_complete
                and not cycle.disconnected
                and not flow.write_paused
                and not transport.is_closing()
            )

        def write(data: bytes) -> None:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))

        return ready, write

    def _evict_one(self) -> bool:
        """Make room: close a connection that has nothing in progress, one that never completed a
        request first (a flood of empty or dripping connects replaces itself, not the clients' pooled
        keep-alive connections), then one answered while its client still sends a body, the
        longest-waiting first; False when all are busy. A connection
        whose answer is complete counts as idle even while its client is still sending the body (a
        refused request with a large declared body would otherwise hold its slot until the body
        timeout, without any key)."""
        idle = [
            c
            for c in self.connections
            if isinstance(c, GuardedHttpTools)
            and not c._refused
            and not c.transport.is_closing()
            and (c.cycle.response_complete if c.cycle is not None else c._in_head)
        ]
        if not idle:
            return False
        # never sent a whole head; answered but still sending a body nobody reads; then idle keep-alive
        victim = min(idle, key=lambda c: (c._heads > 0, c._in_head, c._waiting_since))
        victim._cancel()
        victim.transport.close()
        return True

    # -- reading -------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: read and dropped
        rest = b""
        if self._in_head:
            room = self.limits.max_header_bytes - self._head_bytes
            if len(data) > room:  # feed the head's budget only; the rest after the head is complete
                data, rest = data[:room], data[room:]
            self._head_bytes += len(data)
            heads = self._heads
            super().data_received(data)
            if self._heads == heads:  # still inside the same head
                if self._refused:
                    return
                if self._head_bytes >= self.limits.max_header_bytes:
                    limit = self.limits.max_header_bytes
                    message = f"The request headers are too large: the limit is {limit} bytes."
                    self._refuse(OpenAIError(431, message, "invalid_request_error", code="headers_too_large"))
                elif self._timer is None:
                    # a head in pieces on a kept-alive connection: its time starts now (a head that
                    # arrives whole, the usual case, costs no timer; a pipelined one begun behind a
                    # complete request is bounded by uvicorn's keep-alive timeout)
                    self._arm(self.limits.header_timeout, self._head_timed_out)
                return
        else:
            super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        if not self._in_head and self._timer is None:  # a body is on its way
            self._arm(self.limits.body_timeout, self._body_timed_out)
        if rest:
            self.data_received(rest)

    def on_headers_complete(self) -> None:
        self._cancel()
        self._in_head = False
        self._heads += 1
        limit = self.limits.max_body_bytes
        if limit is not None:
            declared = next((value for name, value in self.headers if name == b"content-length"), b"0")
            if declared.isdigit() and int(declared) > limit:  # (the parser refuses a value that is not a number)
                self._refuse(too_large(limit))
                return
        super().on_headers_complete()
        if self.cycle is not None:
            extensions = self.cycle.scope.setdefault("extensions", {})
            extensions[ON_GONE] = self._watch_gone  # type: ignore[assignment]
            extensions[DIRECT_BODY] = self._direct  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel()
        self._in_head = True
        self._head_bytes = 0
        if not self._refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._waiting_since = self.loop.time()

    # -- deadlines -------------------------------------------------------------------------------
    def _arm(self, delay: float, callback: Any) -> None:
        self._cancel()
        self._timer = self.loop.call_later(delay, callback)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head behind a response still being sent: its time starts after that response
            self._arm(self.limits.header_timeout, self._head_timed_out)
        elif self._head_bytes == 0:
            self.transport.close()  # no request begun: nothing to answer
        else:
            seconds = self.limits.header_timeout
            self._refuse(timeout(f"The request headers did not arrive within {seconds:g} s.", 408))

    def _body_timed_out(self) -> None:
        self._timer = None
        seconds = self.limits.body_timeout
        self._refuse(timeout(f"The request body did not arrive within {seconds:g} s.", 408))

    # -- refusals --------------------------------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not HTTP/1.1, in OpenAI's shape."""
        self._refuse(bad_request(f"{msg.rstrip('.')}: the request is not valid HTTP/1.1."))

    def _refuse(self, error: OpenAIError) -> None:
        """Answer ``error`` and close; a request already in the app sees a disconnect."""
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._cancel()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive() returns http.disconnect; its sends are dropped
            cycle.message_event.set()
            self._client_gone()
            if cycle.response_started:  # an answer is under way: nothing can be added to it
                self.transport.close()
                return
        self.logger.debug("refused a request: %d %s", error.status, error.message)
        self.transport.write(_answer(error, self.server_state.default_headers))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()  # keep reading (and dropping) what the client still sends
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)
