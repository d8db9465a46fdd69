"""The one seam between the gateway and its backends, in the manner of httpx's transport.

The gateway's shell (``server.app``, ``server.relay``, ``capture_tools.proxy``) sees an upstream only as
these two protocols: :class:`Upstream` opens a request and returns once the response head is in;
an :class:`UpstreamResponse` has a status, the raw headers, an async iterator of body pieces (or
the body whole, ``read``) and a ``close``. Every failure of the exchange is an
:class:`~oaishim.wire.errors.OpenAIError` (no replica reachable, a deadline passed, the connection
broke mid-body), so nothing above the seam knows the HTTP client. Implementations: the HTTP/1.1
client (``server.upstream.Upstreams``), the wrappers around any of them (on :class:`UpstreamWrapper`
and :class:`ResponseWrapper`: the recording one, ``server.recorder``, compiled with this module,
and the tracing one and the forced choice's replay, in Python), and the tests' in-process fake.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from mypy_extensions import mypyc_attr

from oaishim.server.config import ModelRoute

RawHeaders = Sequence[tuple[bytes, bytes]]


@dataclass(slots=True, init=False)  # its own __init__, compiled (dataclasses' is interpreted: one a request)
class SentRequest:
    """The request as it went to the backend (for a record): the replica's URL, and the head as
    written (request line, header lines, blank line) when the client wrote one, else the headers
    sent. A record takes the head whole: one ``bytes`` crosses to the capture process where a list
    of pairs was a dozen objects (bench/README.md, "The wire round"). ``wire``: when the client
    notes the reads that carry the answer (under capture), the list it appends them to, each with
    its time, and an empty read once the answer is complete (``server.capture_wire`` reads them back)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    head: bytes | None
    wire: list[tuple[int, bytes]] | None

    def __init__(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]] | None = None,
        head: bytes | None = None,
        wire: list[tuple[int, bytes]] | None = None,
    ) -> None:
        self.method, self.url, self.head, self.wire = method, url, head, wire
        self.headers = [] if headers is None else headers


class UpstreamResponse(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> RawHeaders:
        """The response headers as received (names as the backend wrote them)."""
        ...

    @property
    def content_type(self) -> str:
        """The media type, lower-cased, without parameters ("" when none)."""
        ...

    @property
    def content_length(self) -> int | None: ...

    @property
    def request(self) -> SentRequest: ...

    def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives, piece by piece; a broken, silent or late upstream raises OpenAIError."""
        ...

    async def read(self, limit: int) -> bytes | None:
        """The rest of the body whole, or None once it passes ``limit`` bytes (the rest unread);
        failures as ``pieces``. What it returns is what ``pieces`` would have yielded, joined."""
        ...

    def close(self) -> None:
        """Done with the response (idempotent): read to its end, the connection may be reused;
        otherwise it is closed at once, which is what stops the backend generating."""
        ...


class Upstream(Protocol):
    async def start(self) -> None:
        """Inside the event loop, before the first request."""
        ...

    async def close(self) -> None: ...

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> UpstreamResponse:
        """Send one request to ``route``'s backend and return once the response head is in.
        ``path`` is an origin-form target sent as it is; ``headers``, when given, replace the
        gateway's own (the capture proxy forwards the client's)."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, and subclassed by Python classes too
class ResponseWrapper:
    """Base of the seam's response wrappers (recording, tracing, the forced choice's replay): the
    head is the inner response's; a wrapper overrides ``pieces`` or ``close`` for what it adds."""

    __slots__ = ("inner",)

    def __init__(self, inner: UpstreamResponse) -> None:
        self.inner = inner

    @property
    def status(self) -> int:
        return self.inner.status

    @property
    def headers(self) -> RawHeaders:
        return self.inner.headers

    @property
    def content_type(self) -> str:
        return self.inner.content_type

    @property
    def content_length(self) -> int | None:
        return self.inner.content_length

    @property
    def request(self) -> SentRequest:
        return self.inner.request

    def pieces(self) -> AsyncIterator[bytes]:
        return self.inner.pieces()

    async def read(self, limit: int) -> bytes | None:
        # through this wrapper's pieces, which a wrapper may override (what it records, replays)
        return await read_pieces(self.pieces(), limit)

    def close(self) -> None:
        self.inner.close()


@mypyc_attr(allow_interpreted_subclasses=True)
class UpstreamWrapper:
    """Base of the seam's upstream wrappers: ``start`` and ``close`` are the inner upstream's; a
    wrapper defines ``open``."""

    __slots__ = ("inner",)

    def __init__(self, inner: Upstream) -> None:
        self.inner = inner

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()


async def read_pieces(pieces: AsyncIterator[bytes], limit: int) -> bytes | None:
    """``pieces`` joined, or None once they pass ``limit`` bytes: ``UpstreamResponse.read`` for an
    implementation with no faster way."""
    parts: list[bytes] = []
    size = 0
    async for piece in pieces:
        size += len(piece)
        if size > limit:
            return None
        parts.append(piece)
    return b"".join(parts)


def header(response: UpstreamResponse, name: bytes) -> str | None:
    """One response header's value (``name`` lower-case), or None."""
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
