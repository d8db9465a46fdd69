"""The capture record, format version 1: one JSON object per exchange, one line per record.

```
{"v": 1,                                  # format version (see MIGRATIONS)
 "id": "0190f3a2b4c5d6e7",                # 16 hex digits, sortable by time
 "time": 1714557600.123,                  # wall clock (unix seconds) when the client request arrived
 "mode": "gateway" | "proxy",             # oaishim serve --capture, or the pure logging proxy
 "profile": "llamacpp" | null,            # the backend profile the gateway used
 "model": "tiny" | null,                  # the model the client asked for
 "client":   {"request": REQUEST, "response": RESPONSE | null},
 "upstream": {"request": REQUEST, "response": RESPONSE | null} | null,
 "timings": {"ttfb_ms", "ttft_ms", "upstream_ttfb_ms", "upstream_ttft_ms", "total_ms"},  # null when n/a
 "error": null | "client went away" | "...",
 "findings": {"client": [FINDING], "upstream": [FINDING]} | null,   # the checker, in the writer thread
 "redacted": ["header:authorization", "json:$.user", "literal"]}   # what was removed (never a value)

REQUEST  = {"t": 0.0, "method": "POST", "target": "/v1/chat/completions" (client) | "http://…/v1/…" (upstream),
            "headers": [[name, value], …], "body": TEXT}
RESPONSE = {"t": 3.1, "status": 200, "headers": [[name, value], …], "body": TEXT,
            "reads": [[t, n], …], "complete": true}
FINDING  = {"rule", "severity", "path", "chunk", "message"}
```

Times (``t``) are milliseconds from the arrival of the client request. A body is stored as text
when it is valid UTF-8 (``body``) and as base64 otherwise (``body_b64``), so the record is
lossless: ``reads`` lists each network read (or write, on the client side) as it happened, its
time and its size in bytes. Each SSE event's offset is the time of the read that completed it
(``capture.timeline.timed_events``); storing the bytes and the reads, rather than decoded events,
keeps what a decoder would hide (comments, CRLF, ``error:`` lines, a torn last event).

Older versions are converted on load by ``MIGRATIONS``, one function per old version, each
taking a record of version N to version N + 1 (mitmproxy's ``io/compat.py`` is the model).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

VERSION: Final = 1

Record = dict[str, Any]
Migration = Callable[[Record], Record]

MIGRATIONS: Final[dict[int, Migration]] = {
    # version N: the function that turns a version-N record into a version-(N + 1) record.
    # Version 1 is the first; the next format change adds `1: _v1_to_v2` here.
}


class RecordError(ValueError):
    """A line that is not a capture record this version of oaishim can read."""


def migrate(record: Mapping[str, Any], migrations: Mapping[int, Migration] | None = None) -> Record:
    """Bring a record of any known version to ``VERSION``."""
    table = MIGRATIONS if migrations is None else migrations
    current = dict(record)
    version = current.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError("not a capture record: no format version ('v')")
    target = max([VERSION, *(v + 1 for v in table)])
    if version > target:
        raise RecordError(f"capture record version {version} is newer than this oaishim reads ({target})")
    while version < target:
        step = table.get(version)
        if step is None:
            raise RecordError(f"capture record version {version} has no migration")
        current = step(current)
        version += 1
        current["v"] = version
    return current


def parse_line(line: bytes) -> Record:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordError("not a JSON object")
    return migrate(value)


# -- bodies ---------------------------------------------------------------------------------------
def encode_body(data: bytes) -> dict[str, str]:
    try:
        return {"body": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(data).decode("ascii")}


def body_bytes(message: Mapping[str, Any] | None) -> bytes:
    """The body of a stored request or response, as it went over the wire."""
    if not message:
        return b""
    if isinstance(message.get("body_b64"), str):
        try:
            return base64.b64decode(message["body_b64"], validate=True)
        except binascii.Error:
            return b""
    body = message.get("body")
    return body.encode("utf-8") if isinstance(body, str) else b""


def body_head(message: Mapping[str, Any] | None, size: int) -> bytes:
    """``body_bytes(message)[:size]`` without decoding the rest of the body (whether a stored body
    is a stream is told by its first bytes). A base64 body whose later part is not base64 gives its
    first bytes here, and nothing from ``body_bytes``."""
    if not message:
        return b""
    if isinstance(message.get("body_b64"), str):
        try:  # (whole groups of 4 characters, 3 bytes each)
            return base64.b64decode(message["body_b64"][: (size + 2) // 3 * 4], validate=True)[:size]
        except binascii.Error:
            return b""
    body = message.get("body")
    return body[:size].encode("utf-8")[:size] if isinstance(body, str) else b""


def header_value(message: Mapping[str, Any] | None, name: str) -> str | None:
    """The value of the header ``name`` (lower case) in a stored request or response, or None."""
    size = len(name)
    for pair in (message or {}).get("headers") or []:
        if isinstance(pair, list) and len(pair) == 2:
            key = str(pair[0])
            if len(key) == size and key.lower() == name:  # (lowered only where the length fits)
                return str(pair[1])
    return None


def request_json(message: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A request body as JSON, when it is a JSON object."""
    try:
        value = orjson.loads(body_bytes(message))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def side(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = record.get(name)
    return value if isinstance(value, Mapping) else {}


def path_of(target: str) -> str:
    """The path of a stored target: ``/v1/x?y`` and ``http://host:1/v1/x?y`` give ``/v1/x``."""
    if "://" in target:
        rest = target.split("://", 1)[1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return target.split("?", 1)[0]


# -- the summary the index keeps --------------------------------------------------------------------
def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the index: what listing and search need."""
    request = side(record, "client").get("request") or {}
    response = side(record, "client").get("response") or {}
    findings = record.get("findings")
    counts = {k: len(findings.get(k) or []) for k in ("client", "upstream")} if isinstance(findings, Mapping) else {}
    body = request_json(request) or {}
    timings = record.get("timings") or {}
    return {
        "id": str(record.get("id", "")),
        "time": float(record.get("time") or 0.0),
        "mode": str(record.get("mode", "")),
        "model": record.get("model"),
        "method": str(request.get("method", "")),
        "path": path_of(str(request.get("target", ""))),
        "status": response.get("status"),
        "stream": bool(body.get("stream")),
        "duration_ms": timings.get("total_ms"),
        "findings": counts.get("client"),  # None: not checked while recording
        "upstream_findings": counts.get("upstream"),
    }
