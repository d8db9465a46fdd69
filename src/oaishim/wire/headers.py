"""Which of a backend's response headers a client is given.

Two cases. An error the gateway relays keeps only what tells the client when to try again
(``Retry-After``, ``retry-after-ms``, ``x-ratelimit-*``): the official SDKs read them to time their
retries, and without them retry a 429 at once. A pass-through answer keeps the backend's headers
except the connection-level ones HTTP forbids a proxy to forward, the length (the body may be
scrubbed, so the server frames it anew), ``Server`` and ``Date`` (the gateway's own server sets
those), and ``Set-Cookie`` (a backend's session is not the client's business).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

Headers = list[tuple[bytes, bytes]]

# The connection-level (hop-by-hop) headers, RFC 9110 §7.6.1 plus the older Keep-Alive,
# Proxy-Connection and Trailer: they describe one connection, so no proxy, mock or replay passes them on.
HOP_BY_HOP: Final = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
NOT_RETURNED: Final = HOP_BY_HOP | frozenset(
    {
        b"proxy-authenticate",
        b"content-length",
        b"server",
        b"date",
        b"set-cookie",
        b"location",  # a redirect names the backend's own address, which the client cannot reach
        b"content-location",
    }
)
_RETRY: Final = (b"retry-after", b"retry-after-ms")
_RATE_PREFIX: Final = b"x-ratelimit-"


def is_hop_by_hop(name: str | bytes) -> bool:
    """Whether a header (any case, ``str`` as a record holds it or ``bytes`` as ASGI does) is connection-level."""
    raw = name.encode("latin-1") if isinstance(name, str) else name
    return raw.lower() in HOP_BY_HOP


def _pairs(headers: Iterable[tuple[bytes, bytes]]) -> Iterable[tuple[bytes, bytes]]:
    for name, value in headers:
        yield name.lower(), value


def retry_headers(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The backend's ``Retry-After``, ``retry-after-ms`` and ``x-ratelimit-*`` headers, in order."""
    return [(name, value) for name, value in _pairs(headers) if name in _RETRY or name.startswith(_RATE_PREFIX)]


def passthrough_headers(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The backend's headers a pass-through answer keeps (names lower-cased)."""
    return [(name, value) for name, value in _pairs(headers) if name not in NOT_RETURNED]
