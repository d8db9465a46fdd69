"""What a recorder collects on the request path: timestamps and references, nothing else.

Everything here is appended to while bytes flow (``perf_counter_ns`` readings and the very
``bytes`` objects that went over the wire, never copies); turning it into a record — decoding
headers, redacting, decoding the stream, running the checker, serialising — happens later, in the
store's writer thread (``capture.build``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

HeaderPairs = Sequence[tuple[str | bytes, str | bytes]]
Mode = Literal["gateway", "proxy"]


@dataclass(slots=True)
class RawRequest:
    t_ns: int  # when it was received (client side) or sent (upstream side)
    method: str
    target: str  # path and query (client side) or the full URL (upstream side)
    headers: HeaderPairs
    body: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class RawResponse:
    t_ns: int  # when the status line and headers were sent (client) or received (upstream)
    status: int
    headers: HeaderPairs
    reads: list[tuple[int, bytes]] = field(default_factory=list)  # (time, bytes) of each piece
    complete: bool = False  # the body ended normally (the last piece was sent or read)


@dataclass(slots=True)
class RawExchange:
    """One exchange as it happened. Times are ``time.perf_counter_ns()``; ``started`` is wall time."""

    t0_ns: int
    started: float
    mode: Mode
    client_request: RawRequest | None = None
    client_response: RawResponse | None = None
    upstream_request: RawRequest | None = None
    upstream_response: RawResponse | None = None
    profile: str | None = None
    end_ns: int = 0
    error: str | None = None


# -- one exchange as plain tuples: what crosses to the capture process (server.capture_process) -----
# pickling tuples of builtins costs less than half what the slotted dataclasses cost (their state
# is gathered in Python), and it is paid by the serving process


def _request_tuple(r: RawRequest | None) -> tuple[object, ...] | None:
    return None if r is None else (r.t_ns, r.method, r.target, r.headers, r.body)


def _response_tuple(r: RawResponse | None) -> tuple[object, ...] | None:
    return None if r is None else (r.t_ns, r.status, r.headers, r.reads, r.complete)


def to_tuple(x: RawExchange) -> tuple[object, ...]:
    return (
        x.t0_ns, x.started, x.mode, _request_tuple(x.client_request), _response_tuple(x.client_response),
        _request_tuple(x.upstream_request), _response_tuple(x.upstream_response), x.profile, x.end_ns, x.error,
    )  # fmt: skip


def from_tuple(t: tuple[Any, ...]) -> RawExchange:
    t0, started, mode, client_req, client_resp, up_req, up_resp, profile, end_ns, error = t
    return RawExchange(
        t0, started, mode,
        RawRequest(*client_req) if client_req is not None else None,
        RawResponse(*client_resp) if client_resp is not None else None,
        RawRequest(*up_req) if up_req is not None else None,
        RawResponse(*up_resp) if up_resp is not None else None,
        profile, end_ns, error,
    )  # fmt: skip
