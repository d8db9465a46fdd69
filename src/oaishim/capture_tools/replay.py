"""``oaishim replay``: re-send recorded requests to a server and compare its answers with the old.

Each request goes out as recorded (method, path and query, headers, body), except for what the
record no longer holds: redacted headers are left out (``api_key`` supplies a key to send instead)
and so are connection-level ones. The new answer is read piece by piece with the same clock as a
capture, so it is compared (:mod:`oaishim.capture.diff`) in the stored shape, by the same code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from oaishim.capture.diff import Difference, Observed, compare, observe
from oaishim.capture.playbook import Side
from oaishim.capture.record import Record, body_bytes, encode_body, side
from oaishim.capture.redact import MASK
from oaishim.wire.headers import is_hop_by_hop

# Besides the hop-by-hop headers: Host and the length, which the client sets for the new connection.
NOT_SENT = frozenset({"host", "content-length"})


@dataclass
class Outcome:
    record_id: str
    method: str
    target: str
    differences: list[Difference] = field(default_factory=list)
    error: str | None = None
    old: Observed | None = None
    new: Observed | None = None
    response: dict[str, Any] | None = None  # the new answer, in the stored shape


def _target(request: Mapping[str, Any]) -> str:
    target = str(request.get("target", "/"))
    if "://" in target:  # an upstream request holds the full URL: keep its path and query
        rest = target.split("://", 1)[1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return target


def _headers(request: Mapping[str, Any], api_key: str | None) -> list[tuple[str, str]]:
    out = [
        (str(k), str(v))
        for k, v in request.get("headers") or []
        if str(k).lower() not in NOT_SENT and not is_hop_by_hop(str(k)) and str(v) != MASK
    ]
    if api_key:
        out.append(("Authorization", f"Bearer {api_key}"))
    return out


async def _send(
    session: aiohttp.ClientSession, base: str, request: Mapping[str, Any], api_key: str | None
) -> dict[str, Any]:
    t0 = time.perf_counter_ns()
    body = body_bytes(request)

    def ms() -> float:
        return round((time.perf_counter_ns() - t0) / 1e6, 3)

    async with session.request(
        str(request.get("method", "GET")),
        base.rstrip("/") + _target(request),
        data=body or None,
        headers=_headers(request, api_key),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        allow_redirects=False,
    ) as response:
        out: dict[str, Any] = {"t": ms(), "status": response.status}
        out["headers"] = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in response.raw_headers]
        pieces: list[bytes] = []
        reads: list[list[float]] = []
        async for piece in response.content.iter_any():
            pieces.append(piece)
            reads.append([ms(), len(piece)])
        out.update(encode_body(b"".join(pieces)), reads=reads, complete=True)
    return out


def _stored_findings(record: Record, which: Side) -> list[Mapping[str, Any]] | None:
    findings = record.get("findings")
    if isinstance(findings, Mapping) and isinstance(findings.get(which), list):
        return list(findings[which])
    return None


async def replay(
    records: Iterable[Record],
    to: str,
    *,
    concurrency: int = 4,
    which: Side = "client",
    api_key: str | None = None,
    ignore: Sequence[str] = (),
    timeout: float = 600.0,
) -> list[Outcome]:
    """Re-send each record's request (of side ``which``) to ``to``; one outcome per request, in order."""
    limit = asyncio.Semaphore(max(1, concurrency))
    client_timeout = aiohttp.ClientTimeout(total=timeout)

    async def one(session: aiohttp.ClientSession, record: Record) -> Outcome:
        request = side(side(record, which), "request")
        old_response = side(side(record, which), "response")
        outcome = Outcome(str(record.get("id", "")), str(request.get("method", "")), _target(request))
        if not request or not old_response:
            outcome.error = f"the record has no {which} request and response"
            return outcome
        async with limit:
            try:
                outcome.response = await _send(session, to, request, api_key)
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome.error = f"{type(exc).__name__}: {exc}"
                return outcome
        outcome.old = observe(request, old_response, _stored_findings(record, which))
        outcome.new = observe(request, outcome.response)
        outcome.differences = compare(outcome.old, outcome.new, ignore)
        return outcome

    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        return list(await asyncio.gather(*(one(session, r) for r in records)))
