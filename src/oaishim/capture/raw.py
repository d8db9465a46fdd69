"""What a recorder collects on the request path: timestamps and references, nothing else.

Everything here is appended to while bytes flow (``perf_counter_ns`` readings and the very
``bytes`` objects that went over the wire, never copies); turning it into a record — decoding
headers, redacting, decoding the stream, running the checker, serialising — happens later, in the
store's writer thread (``capture.build``).

Plain slotted classes, not dataclasses: ``dataclass(slots=True)`` rebuilds the class, so the one
mypyc compiled is replaced by an interpreted one (2.5k instructions to make each part of an
exchange, against a few hundred).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

HeaderPairs = Sequence[tuple[str | bytes, str | bytes]]
# A part's headers: the pairs, or the head as it went over the wire (start line, header lines, the
# blank line), one ``bytes`` where the sender built it whole; ``head_pairs`` reads it
Head = HeaderPairs | bytes
Mode = Literal["gateway", "proxy"]


class RawRequest:
    """A request as it passed: its head and the pieces of its body.

    ``wire``: ``headers`` is the one network read that carried the whole request (its head and
    body) as the server received it, and ``method``, ``target`` and ``body`` are empty; they are read
    from it later (``server.capture_wire.read_request``), off the request path."""

    __slots__ = ("body", "headers", "method", "t_ns", "target", "wire")

    def __init__(
        self, t_ns: int, method: str, target: str, headers: Head, body: list[bytes] | None = None, wire: bool = False
    ) -> None:
        self.t_ns = t_ns  # when it was received (client side) or sent (upstream side)
        self.method = method
        self.target = target  # path and query (client side) or the full URL (upstream side)
        self.headers = headers
        self.body: list[bytes] = [] if body is None else body
        self.wire = wire

    def __repr__(self) -> str:
        return f"RawRequest{(self.t_ns, self.method, self.target, self.headers, self.body, self.wire)!r}"


class RawResponse:
    """A response as it passed: its head, each piece of its body with its time, and whether it ended.

    ``wire``: ``reads`` are the network reads that carried the whole response, its head included,
    as the upstream client noted them, an empty read once it was complete; ``headers`` and
    ``complete`` are read from them later (``server.capture_wire.read_wire``), off the request path."""

    __slots__ = ("complete", "headers", "reads", "status", "t_ns", "wire")

    def __init__(
        self,
        t_ns: int,
        status: int,
        headers: Head,
        reads: list[tuple[int, bytes]] | None = None,
        complete: bool = False,
        wire: bool = False,
    ) -> None:
        self.t_ns = t_ns  # when the status line and headers were sent (client) or received (upstream)
        self.status = status
        self.headers = headers
        self.reads: list[tuple[int, bytes]] = [] if reads is None else reads  # (time, bytes) of each piece
        self.complete = complete  # the body ended normally (the last piece was sent or read)
        self.wire = wire

    def __repr__(self) -> str:
        return f"RawResponse{(self.t_ns, self.status, self.headers, self.reads, self.complete, self.wire)!r}"


class RawExchange:
    """One exchange as it happened. Times are ``time.perf_counter_ns()``; ``started`` is wall time."""

    __slots__ = (
        "client_request", "client_response", "end_ns", "error", "mode", "profile", "started", "t0_ns",
        "upstream_request", "upstream_response",
    )  # fmt: skip

    def __init__(
        self,
        t0_ns: int,
        started: float,
        mode: Mode,
        client_request: RawRequest | None = None,
        client_response: RawResponse | None = None,
        upstream_request: RawRequest | None = None,
        upstream_response: RawResponse | None = None,
        profile: str | None = None,
        end_ns: int = 0,
        error: str | None = None,
    ) -> None:
        self.t0_ns = t0_ns
        self.started = started
        self.mode: Mode = mode
        self.client_request = client_request
        self.client_response = client_response
        self.upstream_request = upstream_request
        self.upstream_response = upstream_response
        self.profile = profile
        self.end_ns = end_ns
        self.error = error

    def __repr__(self) -> str:
        fields = (self.t0_ns, self.started, self.mode, self.client_request, self.client_response)
        more = (self.upstream_request, self.upstream_response, self.profile, self.end_ns, self.error)
        return f"RawExchange{fields + more!r}"


class PlainExchange:
    """The common exchange as plain fields, with no graph of parts: a request that came whole in
    one read (``read``, at ``t0_ns``), answered whole by the server (``written``, at
    ``answer_ns``; 0: not answered), through the gateway's own upstream client (``sent_ns``: when
    its request went, 0 for none; its ``method``, ``url``, ``head`` as written and ``body``; its
    answer's ``up_status`` and the connection's ``reads`` of it). The recorder notes such an
    exchange here as it passes (``server.recorder``: no part objects; capture's added CPU a plain
    request about a third less, bench/README.md, "The plain-frame round") and the capture process's link frames it from these fields
    (``server.capture_frame``); :meth:`exchange` gives the same exchange as parts, for whatever
    needs them (the thread writer, an exchange that turns out to be of another shape)."""

    __slots__ = (
        "answer_ns", "body", "end_ns", "error", "head", "method", "mode", "profile", "read", "reads", "sent_ns",
        "started", "status", "t0_ns", "up_status", "url", "written",
    )  # fmt: skip

    def __init__(self, t0_ns: int, started: float, mode: Mode, read: bytes) -> None:
        self.t0_ns = t0_ns
        self.started = started
        self.mode: Mode = mode
        self.read = read
        self.answer_ns = 0  # (0: no answer written whole)
        self.status = 0
        self.written = b""
        self.sent_ns = 0  # (0: no upstream request)
        self.method = ""
        self.url = ""
        self.head = b""
        self.body = b""
        self.up_status = 0
        self.reads: list[tuple[int, bytes]] | None = None
        self.end_ns = 0
        self.profile: str | None = None
        self.error: str | None = None

    def exchange(self) -> RawExchange:
        """The exchange as parts, as a recorder of parts would have noted it."""
        x = RawExchange(self.t0_ns, self.started, self.mode, profile=self.profile, end_ns=self.end_ns, error=self.error)
        x.client_request = RawRequest(self.t0_ns, "", "", self.read, wire=True)
        if self.answer_ns:
            x.client_response = RawResponse(
                self.answer_ns, self.status, (), [(self.answer_ns, self.written)], True, True
            )
        if self.sent_ns:
            x.upstream_request = RawRequest(self.sent_ns, self.method, self.url, self.head, [self.body])
            reads = self.reads if self.reads is not None else []
            x.upstream_response = RawResponse(self.sent_ns, self.up_status, (), reads, wire=True)
        return x


def head_pairs(headers: Head) -> list[tuple[str | bytes, str | bytes]]:
    """A part's headers as pairs: those of a wire head (its start line left out; a line without a
    colon, which no sender here writes, is kept as a name with an empty value), or the pairs."""
    if not isinstance(headers, bytes):
        return list(headers)
    pairs: list[tuple[str | bytes, str | bytes]] = []
    for line in headers.split(b"\r\n")[1:]:
        if line:
            name, _, value = line.partition(b":")
            pairs.append((name, value.strip(b" \t")))
    return pairs


# -- one exchange as plain tuples: what crosses to the capture process (server.capture_process) -----
# serialising tuples of builtins costs less than half what the objects would (their state is
# gathered in Python), and it is paid by the serving process; the mode goes as a bool, as a ``str``
# is the costliest item to frame. ``marshal`` costs by the item, not the byte (250-400 instructions
# each: a tuple, a nanosecond time, a ``bytes``), so the common plain exchange goes as one flat
# tuple of 16 (``_fast_tuple``), every other as the nested form (10 items, its parts' tuples in it)


def _request_tuple(r: RawRequest | None) -> tuple[object, ...] | None:
    """A request as a tuple: a read's two items, a head's four (its method is the head's first
    word), else five."""
    if r is None:
        return None
    if r.wire:
        return (r.t_ns, r.headers)
    if isinstance(r.headers, bytes):
        return (r.t_ns, r.target, r.headers, r.body)
    return (r.t_ns, r.method, r.target, r.headers, r.body)


def _request(t: tuple[Any, ...] | None) -> RawRequest | None:
    if t is None:
        return None
    if len(t) == 2:
        return RawRequest(t[0], "", "", t[1], wire=True)
    if len(t) == 4:
        t_ns, target, head, body = t
        return RawRequest(t_ns, _method_of(head), target, head, body)
    return RawRequest(*t)


def _response_tuple(r: RawResponse | None) -> tuple[object, ...] | None:
    return None if r is None else (r.t_ns, r.status, r.headers, r.reads, r.complete, r.wire)


def to_tuple(x: RawExchange) -> tuple[object, ...]:
    fast = _fast_tuple(x)
    if fast is not None:
        return fast
    return (
        x.t0_ns, x.started, x.mode == "proxy", _request_tuple(x.client_request), _response_tuple(x.client_response),
        _request_tuple(x.upstream_request), _response_tuple(x.upstream_response), x.profile, x.end_ns, x.error,
    )  # fmt: skip


def _fast_tuple(x: RawExchange) -> tuple[object, ...] | None:
    """The common exchange in one flat tuple of 16 items (about 40 as nested tuples; ``marshal``
    spends 250–400 instructions an item): a request that came in one read, answered whole by the
    server, through the gateway's own upstream client (its head as written, one body piece, its
    answer as its reads). None for any other shape. What it leaves out is implied: the request's
    time is the exchange's start, the answer's one read is at the answer's time and complete, the
    upstream answer's time is the upstream request's and its head is in its reads. (The gateway
    hands such an exchange over as a :class:`PlainExchange`, framed without parts; this form is for
    one that reached the writer as parts all the same.)"""
    cq, cr, uq, ur = x.client_request, x.client_response, x.upstream_request, x.upstream_response
    if cq is None or not cq.wire or cq.t_ns != x.t0_ns or not isinstance(cq.headers, bytes):
        return None
    if cr is None or not cr.wire or not cr.complete or len(cr.reads) != 1 or not _no_pairs(cr.headers):
        return None
    if uq is None or uq.wire or not isinstance(uq.headers, bytes) or len(uq.body) != 1:
        return None
    if ur is None or not ur.wire or ur.complete or ur.t_ns != uq.t_ns or not _no_pairs(ur.headers):
        return None
    t, written = cr.reads[0]
    if t != cr.t_ns:
        return None
    return (
        x.t0_ns, x.started, x.mode == "proxy", x.profile, x.end_ns, x.error, cq.headers, t, cr.status, written,
        uq.t_ns, uq.target, uq.headers, uq.body[0], ur.status, ur.reads,
    )  # fmt: skip


def _no_pairs(headers: Head) -> bool:
    return isinstance(headers, tuple) and not headers


def from_tuple(t: tuple[Any, ...]) -> RawExchange:
    if len(t) == 16:
        return _from_fast(t)
    t0, started, proxy, client_req, client_resp, up_req, up_resp, profile, end_ns, error = t
    return RawExchange(
        t0, started, "proxy" if proxy else "gateway",
        _request(client_req),
        RawResponse(*client_resp) if client_resp is not None else None,
        _request(up_req),
        RawResponse(*up_resp) if up_resp is not None else None,
        profile, end_ns, error,
    )  # fmt: skip


def _from_fast(t: tuple[Any, ...]) -> RawExchange:
    """The flat tuple back as parts: the plain exchange's fields, made into parts as the recorder's are."""
    t0, started, proxy, profile, end_ns, error, read, t_answer, status, written = t[:10]
    t_up, url, head, body, up_status, reads = t[10:]
    p = PlainExchange(t0, started, "proxy" if proxy else "gateway", read)
    p.answer_ns, p.status, p.written = t_answer, status, written
    p.sent_ns, p.method, p.url, p.head, p.body = t_up, _method_of(head), url, head, body
    p.up_status, p.reads = up_status, reads
    p.end_ns, p.profile, p.error = end_ns, profile, error
    return p.exchange()


def _method_of(head: bytes) -> str:
    """A request's method, read from its head as written (the start line's first word)."""
    return head[: head.find(b" ")].decode("latin-1")
