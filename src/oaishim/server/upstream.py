"""Talking to backends: one connection pool, replicas in round robin, timeouts that end in errors.

The gateway's implementation of the seam (``server.seam``): ``Upstreams`` is an ``Upstream`` on the
small HTTP/1.1 client of ``server.h1client`` (httptools on asyncio protocols; aiohttp's client
cost ~5x the CPU per round trip, bench/README.md), and ``open`` returns an :class:`H1Response`.

A replica that refuses the connection is skipped and the next one tried — only before any byte
went to the client, which holds by construction: nothing is sent before ``open()`` returns.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from oaishim.server.config import ModelRoute, Settings
from oaishim.server.exchange import current
from oaishim.server.h1client import Body, Broken, Connection, Expired, Head, Origin, Pool, Silent
from oaishim.server.seam import RawHeaders, SentRequest
from oaishim.wire.errors import OpenAIError, bad_request, timeout
from oaishim.wire.paths import BadTarget, join_upstream

log: Final = logging.getLogger("oaishim.upstream")
# Final: a static once compiled, where an imported name is a module-dict lookup a call
now: Final = time.perf_counter_ns

KEEPALIVE_SECONDS: Final = 4.0
_JOINED_MAX: Final = 512  # (replica, target) pairs whose checked URL is kept (the targets are a few paths)


def fixed_headers(route: ModelRoute, content_type: str | None) -> list[tuple[str, str]]:
    """The headers the gateway sends a route's backend on every request (the client's are never
    forwarded)."""
    # identity: the gateway rewrites bodies, so it reads them uncompressed (passthrough keeps
    # whatever encoding the backend chose, with its header)
    headers = [("accept", "application/json, text/event-stream"), ("accept-encoding", "identity")]
    if content_type:
        headers.append(("content-type", content_type))
    if route.upstream_api_key:
        headers.append(("authorization", f"Bearer {route.upstream_api_key}"))
    return headers


def request_scoped_headers() -> list[tuple[str, str]]:
    """The headers of the request being served: its id, and its trace's context when it has one."""
    ex = current()
    if ex is None:
        return []
    scoped = [("x-request-id", ex.request_id)]  # one id across the client's, the gateway's and the backend's logs
    if ex.trace is not None:
        carrier: dict[str, str] = {}
        ex.trace.inject(carrier)  # traceparent: the backend's spans join the client's trace
        scoped += carrier.items()
    return scoped


def request_headers(route: ModelRoute, content_type: str | None) -> dict[str, str]:
    """The headers the gateway sends a backend for the request being served."""
    return dict([*fixed_headers(route, content_type), *request_scoped_headers()])


@dataclass(slots=True)
class Replicas:
    route: ModelRoute
    _turn: itertools.cycle[int] = field(init=False)

    def __post_init__(self) -> None:
        self._turn = itertools.cycle(range(len(self.route.upstreams)))

    def order(self) -> list[str]:
        """All replicas, starting with the next one in turn."""
        start = next(self._turn)
        ups = self.route.upstreams
        return [*ups[start:], *ups[:start]]


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: the connection's origin, the Host header, the request target, the URL."""

    origin: Origin
    host: str
    target: str
    url: str


def _target(base: str, path: str) -> Target:
    url = join_upstream(base, path)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    netloc = parts.netloc.rpartition("@")[2]
    rest = url[len(parts.scheme) + 3 + len(parts.netloc) :] or "/"
    return Target((scheme, parts.hostname or "", port), netloc, rest, url)


class Upstreams:
    """The gateway's client side. Create inside the event loop (``start``), close on shutdown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool: Pool | None = None
        self.replicas = {route.name: Replicas(route) for route in settings.models}
        self._joined: dict[tuple[str, str], Target] = {}
        # each route's fixed headers (per content type) as a request head has their lines
        self._fixed: dict[tuple[str, str | None], str] = {}
        # under capture: each connection notes the reads of the answer it carries (SentRequest.wire)
        self.record_wire = False

    async def start(self) -> None:
        # An idle connection is dropped before the backend would drop it: llama.cpp (cpp-httplib),
        # uvicorn and Node close idle keep-alive connections after 5 s.
        self.pool = Pool(KEEPALIVE_SECONDS)

    async def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _where(self, base: str, path: str, method: str) -> Target:
        key = (base, path)
        found = self._joined.get(key)
        if found is None:
            try:
                found = _target(base, path)
            except BadTarget as exc:
                raise bad_request(f"Invalid URL ({method} {path[:200]}): {exc.reason}") from None
            if len(self._joined) >= _JOINED_MAX:
                self._joined.clear()
            self._joined[key] = found
        return found

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> H1Response:
        """Send one request, trying the replicas in turn while connecting fails; return once the
        response headers are in (the first-byte timeout covers that wait). ``path`` is an
        origin-form target (``/…``, with its query), sent byte for byte; a target that would leave
        the replica's host is refused (400). ``headers``, when given, are sent as they are instead
        of the gateway's own (the capture proxy forwards the client's)."""
        pool = self.pool
        assert pool is not None, "Upstreams.start() was not awaited"
        started = now() if self.record_wire else 0  # when it was sent, for a record
        settings = self.settings
        loop = pool.loop
        total = settings.total_timeout
        deadline = None if total is None else loop.time() + total
        if headers is None:
            fixed_lines = self._fixed_for(route, content_type)
            scoped = request_scoped_headers()
        last: str | None = None
        connect_timed_out = False
        for base in self.replicas[route.name].order():
            where = self._where(base, path, method)
            if headers is None:  # the gateway's own: the fixed lines as rendered once, then this request's
                head = _own_head(method, where, fixed_lines, scoped, body)
            else:
                head = _request_head(method, where, headers, body)
            for _try in (1, 2):
                # the wait for the head ends at first_byte_timeout, or at the total deadline if sooner
                left = None if deadline is None else deadline - loop.time()
                head_wait, which, named = settings.first_byte_timeout, "first_byte_timeout", settings.first_byte_timeout
                if left is not None and total is not None and left <= head_wait:
                    head_wait, which, named = max(left, 0.0), "total_timeout", total
                conn = pool.take(where.origin)
                try:
                    if conn is not None:  # a pooled connection: the head's wait is a timer on its future
                        conn.request(head, body, no_body=method == "HEAD", record=self.record_wire)
                        got = await conn.head_within(head_wait)
                    else:
                        async with asyncio.timeout(head_wait):
                            conn, failed = await self._connect(pool, where.origin, base)
                            if conn is not None:
                                conn.request(head, body, no_body=method == "HEAD", record=self.record_wire)
                                got = await conn.head
                        if conn is None:  # this replica is out: the next one
                            last, connect_timed_out = failed
                            break
                except Broken as exc:
                    assert conn is not None
                    conn.done()
                    if not exc.fault.startswith("HttpParser"):
                        # A pooled keep-alive connection the backend closed just as it was reused (the
                        # request never reached it): once more on this replica, then the next one.
                        log.warning("replica %s closed the connection (%s)", base, exc.fault)
                        last, connect_timed_out = exc.fault, False
                        continue
                    raise OpenAIError(
                        502,
                        f"The upstream answered with no valid HTTP response ({exc.fault}).",
                        "server_error",
                    ) from None
                except TimeoutError as late:  # (not ``exc``: compiled, one name has one type in a function)
                    if conn is not None:
                        conn.done()
                    raise OpenAIError(
                        504,
                        f"The upstream did not answer within {named:g} s ({which}).",
                        "server_error",
                        code="upstream_timeout",
                    ) from late
                except BaseException:
                    if conn is not None:
                        conn.done()  # cancelled (the client left): the backend stops now
                    raise
                response = H1Response(
                    conn, got, SentRequest(method, where.url, head=head, wire=conn.wire), settings, deadline
                )
                if started:  # the exchange's recorder takes the request and the list of its answer's reads
                    ex = current()
                    if ex is not None and ex.upstream_sent is not None:
                        ex.upstream_sent(started, response, body)
                return response
        if connect_timed_out:
            raise OpenAIError(
                504,
                f"No upstream replica accepted a connection within {settings.connect_timeout:g} s (connect_timeout).",
                "server_error",
                code="upstream_timeout",
            )
        raise OpenAIError(
            502,
            f"No upstream replica could be reached ({last}).",
            "server_error",
            code="upstream_unreachable",
        )

    def _fixed_for(self, route: ModelRoute, content_type: str | None) -> str:
        key = (route.name, content_type)
        found = self._fixed.get(key)
        if found is None:
            found = self._fixed[key] = "".join(
                f"{name}: {value}\r\n" for name, value in fixed_headers(route, content_type)
            )
        return found

    async def _connect(self, pool: Pool, origin: Origin, base: str) -> tuple[Connection | None, tuple[str, bool]]:
        """A new connection to ``origin``, or None with (why, whether it was the connect timeout)."""
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                return await pool.connect(origin), ("", False)
        except TimeoutError:
            log.warning("replica %s: no connection within %g s; trying the next", base, self.settings.connect_timeout)
            return None, ("ConnectionTimeoutError", True)
        except OSError as exc:
            log.warning("replica %s unreachable (%s); trying the next", base, type(exc).__name__)
            return None, (type(exc).__name__, False)


def _own_head(method: str, where: Target, fixed_lines: str, scoped: list[tuple[str, str]], body: bytes | None) -> bytes:
    """The head :func:`_request_head` makes of the gateway's own headers (the fixed ones already as
    lines: none is a Host or a framing header)."""
    lines = [f"{method} {where.target} HTTP/1.1\r\nhost: {where.host}\r\n", fixed_lines]
    lines += [f"{name}: {value}\r\n" for name, value in scoped]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _request_head(method: str, where: Target, headers: list[tuple[str, str]], body: bytes | None) -> bytes:
    lines = [f"{method} {where.target} HTTP/1.1\r\n"]
    names = set()
    for name, value in headers:
        lower = name.lower()
        names.add(lower)
        if lower in ("content-length", "transfer-encoding"):
            continue  # the body's framing is this request's own
        lines.append(f"{name}: {value}\r\n")
    if "host" not in names:
        lines.insert(1, f"host: {where.host}\r\n")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class H1Response:
    """A response behind the seam's ``UpstreamResponse``: its body's failures as OpenAIError."""

    __slots__ = ("_conn", "_done", "_settings", "content_length", "content_type", "headers", "request", "status")

    def __init__(
        self, conn: Connection, head: Head, request: SentRequest, settings: Settings, deadline: float | None
    ) -> None:
        self._conn, self._settings = conn, settings
        self._done = False
        self.status = head.status
        self.headers: RawHeaders = head.headers
        self.content_type = head.content_type
        self.content_length = head.content_length
        self.request = request
        # From the head on, a silence longer than idle_timeout ends the body, as does the total deadline
        conn.translate = self._translate
        conn.watch(settings.idle_timeout, deadline)

    def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives; an idle, broken or late upstream raises OpenAIError."""
        return Body(self._conn)

    async def read(self, limit: int, each: Callable[[bytes], None] | None = None) -> bytes | None:
        """The whole body in one wait (no iterator), or None past ``limit`` bytes; ``each`` is
        handed each read as ``pieces`` would have yielded it."""
        return await self._conn.read_rest(limit, each)

    def attach(self, sink: Callable[[bytes], bool]) -> None:
        """From now on, each body piece that arrives while the reader waits goes to ``sink`` in the
        read callback (server.direct); one it declines (False) is read through pieces() as before."""
        self._conn.sink = sink

    def detach(self) -> None:
        """The sink needs nothing more: the waiting reader's pieces() ends."""
        self._conn.detach()

    def _translate(self, exc: BaseException) -> BaseException:
        """What ended the body, as the client's error."""
        settings = self._settings
        if isinstance(exc, Silent):
            within = f" for {settings.idle_timeout:g} s (idle_timeout)"
            return timeout(f"The upstream went silent{within} in the middle of the response.", code="upstream_timeout")
        if isinstance(exc, Expired):
            total = settings.total_timeout
            return timeout(
                f"The upstream exchange passed its total deadline of {total:g} s (total_timeout).",
                code="upstream_timeout",
            )
        if isinstance(exc, Broken):
            return OpenAIError(
                502,
                f"The upstream connection broke in the middle of the response ({exc.fault}).",
                "server_error",
                code="upstream_disconnected",
            )
        return exc

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._conn.done()
