"""Talking to backends: one connection pool, replicas in round robin, timeouts that end in errors.

The aiohttp implementation of the seam (``server.seam``): ``Upstreams`` is an ``Upstream``, and
``open`` returns an :class:`AiohttpResponse`, so no aiohttp type leaves this module.

A replica that refuses the connection is skipped and the next one tried — only before any byte
went to the client, which holds by construction: nothing is sent before ``open()`` returns.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from oaishim.server.config import ModelRoute, Settings
from oaishim.server.exchange import current
from oaishim.server.seam import RawHeaders, SentRequest
from oaishim.wire.errors import OpenAIError, bad_request, timeout
from oaishim.wire.paths import BadTarget, join_upstream

log = logging.getLogger("oaishim.upstream")


# Headers aiohttp would add on its own; a request sent with the client's headers gets only those.
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding")
KEEPALIVE_SECONDS = 4.0


def request_headers(route: ModelRoute, content_type: str | None) -> dict[str, str]:
    """The headers the gateway sends a backend (the client's are never forwarded)."""
    # identity: the gateway rewrites bodies, so it reads them uncompressed (passthrough keeps
    # whatever encoding the backend chose, with its header)
    headers = {"accept": "application/json, text/event-stream", "accept-encoding": "identity"}
    if content_type:
        headers["content-type"] = content_type
    if route.upstream_api_key:
        headers["authorization"] = f"Bearer {route.upstream_api_key}"
    ex = current()
    if ex is not None:
        headers["x-request-id"] = ex.request_id  # one id across the client's, the gateway's and the backend's logs
        if ex.trace is not None:
            ex.trace.inject(headers)  # traceparent: the backend's spans join the client's trace
    return headers


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


class Upstreams:
    """The gateway's client side. Create inside the event loop (``start``), close on shutdown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.session: aiohttp.ClientSession | None = None
        self.replicas = {route.name: Replicas(route) for route in settings.models}

    async def start(self) -> None:
        # An idle connection is dropped before the backend would drop it: llama.cpp (cpp-httplib),
        # uvicorn and Node close idle keep-alive connections after 5 s (aiohttp keeps them 15 s).
        connector = aiohttp.TCPConnector(
            limit=0, ttl_dns_cache=300, enable_cleanup_closed=True, keepalive_timeout=KEEPALIVE_SECONDS
        )
        # No sock_read here: aiohttp would apply it to the wait for the response head too, which
        # first_byte_timeout bounds; open() sets it on the connection once the head is in.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout, sock_read=None)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False, response_class=Response
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> AiohttpResponse:
        """Send one request, trying the replicas in turn while connecting fails; return once the
        response headers are in (the first-byte timeout covers that wait). ``path`` is an
        origin-form target (``/…``, with its query), sent byte for byte; a target that would leave
        the replica's host is refused (400). ``headers``, when given, are sent as they are instead
        of the gateway's own (the capture proxy forwards the client's)."""
        assert self.session is not None, "Upstreams.start() was not awaited"
        settings = self.settings
        total = settings.total_timeout
        deadline = None if total is None else asyncio.get_running_loop().time() + total
        last: Exception | None = None
        for base in self.replicas[route.name].order():
            try:
                # encoded: yarl would otherwise re-quote the target and resolve its dot segments
                url = URL(join_upstream(base, path), encoded=True)
            except BadTarget as exc:
                raise bad_request(f"Invalid URL ({method} {path[:200]}): {exc.reason}") from None
            for _try in (1, 2):
                # the wait for the head ends at first_byte_timeout, or at the total deadline if sooner
                left = None if deadline is None else deadline - asyncio.get_running_loop().time()
                head_wait, which, named = settings.first_byte_timeout, "first_byte_timeout", settings.first_byte_timeout
                if left is not None and total is not None and left <= head_wait:
                    head_wait, which, named = max(left, 0.0), "total_timeout", total
                try:
                    async with asyncio.timeout(head_wait):
                        response = await self.session.request(
                            method,
                            url,
                            data=body,
                            headers=request_headers(route, content_type) if headers is None else headers,
                            skip_auto_headers=None if headers is None else _AUTO_HEADERS,
                            allow_redirects=False,
                            # aiohttp's total bounds the body reads too (they raise a plain TimeoutError)
                            timeout=aiohttp.ClientTimeout(
                                total=None if left is None else max(left, 1e-3),
                                sock_connect=settings.connect_timeout,
                                sock_read=None,
                            ),
                        )
                    _bound_silences(response, settings.idle_timeout, total)
                    return AiohttpResponse(response)
                except aiohttp.ClientConnectorError as exc:
                    log.warning("replica %s unreachable (%s); trying the next", base, type(exc).__name__)
                    last = exc
                    break
                except aiohttp.ConnectionTimeoutError as exc:  # sock_connect: as unreachable
                    log.warning(
                        "replica %s: no connection within %g s; trying the next", base, settings.connect_timeout
                    )
                    last = exc
                    break
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    # A pooled keep-alive connection the backend closed just as it was reused (the
                    # request never reached it): once more on this replica, then the next one.
                    log.warning("replica %s closed the connection (%s)", base, type(exc).__name__)
                    last = exc
                except TimeoutError as exc:
                    raise OpenAIError(
                        504,
                        f"The upstream did not answer within {named:g} s ({which}).",
                        "server_error",
                        code="upstream_timeout",
                    ) from exc
                except aiohttp.ClientError as exc:  # not HTTP at all, a broken status line
                    raise OpenAIError(
                        502,
                        f"The upstream answered with no valid HTTP response ({type(exc).__name__}).",
                        "server_error",
                    ) from exc
        if isinstance(last, aiohttp.ConnectionTimeoutError):
            raise OpenAIError(
                504,
                f"No upstream replica accepted a connection within {settings.connect_timeout:g} s (connect_timeout).",
                "server_error",
                code="upstream_timeout",
            )
        raise OpenAIError(
            502,
            f"No upstream replica could be reached ({type(last).__name__}).",
            "server_error",
            code="upstream_unreachable",
        )


def _fault(exc: BaseException) -> str:
    """What went wrong, by type name: aiohttp wraps the informative error (``ContentLengthError``,
    ``TransferEncodingError``) in a ``ClientPayloadError`` whose text is a repr of it."""
    return type(exc.__cause__ or exc).__name__


class Response(aiohttp.ClientResponse):
    """aiohttp's response, with the deadlines that bound its body (for the errors that name them)."""

    idle_timeout: float | None = None
    total_timeout: float | None = None


def _bound_silences(response: aiohttp.ClientResponse, idle: float, total: float | None) -> None:
    """From the head on, a silence longer than ``idle`` ends the body: aiohttp's sock_read, set on
    the connection now (as aiohttp does for websockets); its own timer, dropped at the body's end
    and while reading is paused, so a slow client is not taken for an idle upstream."""
    if isinstance(response, Response):
        response.idle_timeout, response.total_timeout = idle, total
    connection = response.connection
    if connection is not None and connection.protocol is not None and not response.content.is_eof():
        connection.protocol.read_timeout = idle
        connection.protocol.start_timeout()


class AiohttpResponse:
    """An aiohttp response behind the seam's ``UpstreamResponse``: its body's failures as OpenAIError."""

    __slots__ = ("_response", "content_length", "content_type", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: RawHeaders = response.raw_headers
        self.content_type = (response.content_type or "").lower()
        self.content_length = response.content_length

    @property
    def request(self) -> SentRequest:
        info = self._response.request_info
        return SentRequest(info.method, str(info.url), list(info.headers.items()))

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives; an idle upstream (no byte within the idle timeout) raises OpenAIError."""
        response = self._response
        try:
            async for chunk in response.content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise timeout(_expired(response, exc), code="upstream_timeout") from exc
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise OpenAIError(
                502,
                f"The upstream connection broke in the middle of the response ({_fault(exc)}).",
                "server_error",
                code="upstream_disconnected",
            ) from exc

    def close(self) -> None:
        response = self._response
        if response.content.is_eof():
            response.release()  # read to its end: back to the pool
        else:
            response.close()  # the backend stops now


def _expired(response: aiohttp.ClientResponse, exc: TimeoutError) -> str:
    """Which deadline ended the body: sock_read (a silence) raises aiohttp's SocketTimeoutError,
    aiohttp's total a plain TimeoutError."""
    idle = response.idle_timeout if isinstance(response, Response) else None
    total = response.total_timeout if isinstance(response, Response) else None
    if isinstance(exc, aiohttp.SocketTimeoutError) or total is None:
        within = f" for {idle:g} s (idle_timeout)" if idle is not None else ""
        return f"The upstream went silent{within} in the middle of the response."
    return f"The upstream exchange passed its total deadline of {total:g} s (total_timeout)."
