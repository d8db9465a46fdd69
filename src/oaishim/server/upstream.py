"""Talking to backends: one connection pool, replicas in round robin, timeouts that end in errors.

A replica that refuses the connection is skipped and the next one tried — only before any byte
went to the client, which holds by construction: nothing is sent before ``open()`` returns.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp.typedefs import LooseHeaders
from yarl import URL

from oaishim.server.config import ModelRoute, Settings
from oaishim.wire.errors import OpenAIError, bad_request
from oaishim.wire.paths import BadTarget, join_upstream

log = logging.getLogger("oaishim.upstream")
Tap = Callable[[bytes], None]  # sees each piece of a body as it is read, then b"" at its end


# Headers aiohttp would add on its own; a request sent with the client's headers gets only those.
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding")
KEEPALIVE_SECONDS = 4.0


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
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.connect_timeout, sock_read=self.settings.idle_timeout
        )
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    def _headers(self, route: ModelRoute, content_type: str | None) -> dict[str, str]:
        # identity: the gateway rewrites bodies, so it reads them uncompressed (passthrough keeps
        # whatever encoding the backend chose, with its header)
        headers = {"accept": "application/json, text/event-stream", "accept-encoding": "identity"}
        if content_type:
            headers["content-type"] = content_type
        if route.upstream_api_key:
            headers["authorization"] = f"Bearer {route.upstream_api_key}"
        return headers

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: LooseHeaders | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request, trying the replicas in turn while connecting fails; return once the
        response headers are in (the first-byte timeout covers that wait). ``path`` is an
        origin-form target (``/…``, with its query), sent byte for byte; a target that would leave
        the replica's host is refused (400). ``headers``, when given, are sent as they are instead
        of the gateway's own (the capture proxy forwards the client's)."""
        assert self.session is not None, "Upstreams.start() was not awaited"
        last: Exception | None = None
        for base in self.replicas[route.name].order():
            try:
                # encoded: yarl would otherwise re-quote the target and resolve its dot segments
                url = URL(join_upstream(base, path), encoded=True)
            except BadTarget as exc:
                raise bad_request(f"Invalid URL ({method} {path[:200]}): {exc.reason}") from None
            for _try in (1, 2):
                try:
                    async with asyncio.timeout(self.settings.first_byte_timeout):
                        return await self.session.request(
                            method,
                            url,
                            data=body,
                            headers=self._headers(route, content_type) if headers is None else headers,
                            skip_auto_headers=None if headers is None else _AUTO_HEADERS,
                            allow_redirects=False,
                        )
                except aiohttp.ClientConnectorError as exc:
                    log.warning("replica %s unreachable (%s); trying the next", base, type(exc).__name__)
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
                        f"The upstream did not answer within {self.settings.first_byte_timeout:g} s.",
                        "server_error",
                        code="upstream_timeout",
                    ) from exc
                except aiohttp.ClientError as exc:  # not HTTP at all, a broken status line
                    raise OpenAIError(
                        502,
                        f"The upstream answered with no valid HTTP response ({type(exc).__name__}).",
                        "server_error",
                    ) from exc
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


async def chunks(response: aiohttp.ClientResponse, tap: Tap | None = None) -> AsyncIterator[bytes]:
    """The body as it arrives; an idle upstream (no byte within the idle timeout) raises OpenAIError."""
    try:
        async for chunk in response.content.iter_any():
            if tap is not None:
                tap(chunk)
            yield chunk
        if tap is not None:
            tap(b"")
    except TimeoutError as exc:
        raise OpenAIError(
            504, "The upstream went idle in the middle of the response.", "server_error", code="upstream_timeout"
        ) from exc
    except aiohttp.ClientPayloadError as exc:
        raise OpenAIError(
            502,
            f"The upstream connection broke in the middle of the response ({_fault(exc)}).",
            "server_error",
            code="upstream_disconnected",
        ) from exc
