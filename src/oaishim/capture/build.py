"""From what a recorder collected to one redacted, serialised record (runs in the writer thread).

The order matters for redaction: headers, query and JSON paths are redacted while the record is
built, the checker runs on the redacted bodies, and the serialised line gets the last scrub of
every secret value seen — so nothing after this function ever holds a secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import orjson

from oaishim.capture.raw import Head, RawExchange, RawRequest, RawResponse, head_pairs
from oaishim.capture.record import (
    VERSION,
    Record,
    body_bytes,
    encode_body,
    header_value,
    path_of,
    request_json,
    side,
)
from oaishim.capture.redact import Redactor, scrub, scrub_bytes, secret_needles
from oaishim.capture.timeline import first_token_ms, is_stream, iter_timed_events, timed_events
from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.wire.sse import encode_event

CHECKED_PATHS: Final = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses")


def new_id(started: float) -> str:
    """16 hex digits: milliseconds since the epoch, then random bits, so ids sort by time."""
    return f"{int(started * 1000) & 0xFFFFFFFFFFF:011x}{int.from_bytes(os.urandom(3)) & 0xFFFFF:05x}"


def _ms(t_ns: int, t0_ns: int) -> float:
    """Milliseconds from ``t0_ns`` to ``t_ns``, to the microsecond (the nearest; a half rounds up).
    In integers: ``round(x, 3)`` on a float goes through a decimal string, ~3k instructions, and
    there are two of these a streamed chunk."""
    return (t_ns - t0_ns + 500) // 1000 / 1000


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _pairs(headers: Head) -> list[tuple[str, str]]:
    return [(_text(k), _text(v)) for k, v in head_pairs(headers)]


class _Builder:
    def __init__(self, raw: RawExchange, redactor: Redactor) -> None:
        self.raw = raw
        self.redactor = redactor
        self.found: set[str] = set(redactor.secrets)
        self.notes: set[str] = set()

    def request(self, request: RawRequest | None) -> dict[str, Any] | None:
        if request is None:
            return None
        body = b"".join(request.body)
        body = self.redactor.json_bytes(body, self.notes) or body
        return {
            "t": _ms(request.t_ns, self.raw.t0_ns),
            "method": request.method,
            "target": self.redactor.target(request.target, self.found, self.notes),
            "headers": self.redactor.headers(_pairs(request.headers), self.found, self.notes),
            **encode_body(body),
        }

    def response(self, response: RawResponse | None) -> dict[str, Any] | None:
        if response is None:
            return None
        t0 = self.raw.t0_ns
        out: dict[str, Any] = {
            "t": _ms(response.t_ns, t0),
            "status": response.status,
            "headers": self.redactor.headers(_pairs(response.headers), self.found, self.notes),
            **encode_body(b"".join(piece for _, piece in response.reads)),
            "reads": [[_ms(t, t0), len(piece)] for t, piece in response.reads if piece],
            "complete": response.complete,
        }
        if self.redactor.json_paths:
            self._redact_body(out)
        return out

    def _redact_body(self, response: dict[str, Any]) -> None:
        """JSON paths inside a plain body or each SSE event; a changed stream is re-encoded, one
        read per event at the time of its original read."""
        if not is_stream(response):
            redacted = self.redactor.json_bytes(body_bytes(response), self.notes)
            if redacted is not None:
                response.update(encode_body(redacted), reads=[[response["reads"][-1][0], len(redacted)]])
            return
        events = timed_events(response)
        pieces: list[tuple[float, bytes]] = []
        changed = False
        for timed in events:
            data = self.redactor.json_bytes(timed.event.data.encode(), self.notes)
            changed |= data is not None
            text = data.decode() if data is not None else timed.event.data
            pieces.append((timed.t_ms, encode_event(text, event=timed.event.event or None)))
        if changed:
            body = b"".join(piece for _, piece in pieces)
            response.update(encode_body(body), reads=[[t, len(piece)] for t, piece in pieces])


def _timings(record: Mapping[str, Any], raw: RawExchange) -> dict[str, float | None]:
    client = (record.get("client") or {}).get("response")
    upstream = (record.get("upstream") or {}).get("response") if record.get("upstream") else None

    def first_read(response: Mapping[str, Any] | None) -> float | None:
        reads = (response or {}).get("reads") or []
        return float(reads[0][0]) if reads else None

    return {
        "ttfb_ms": first_read(client),
        "ttft_ms": first_token_ms(iter_timed_events(client)),
        "upstream_ttfb_ms": first_read(upstream),
        "upstream_ttft_ms": first_token_ms(iter_timed_events(upstream)),
        "total_ms": _ms(raw.end_ns, raw.t0_ns) if raw.end_ns else None,
    }


def _checked(path: str) -> bool:
    """The checker's paths, and a stored response read back (``/v1/responses/{id}``, not its
    ``/input_items`` list, which is no response object)."""
    if path.endswith(CHECKED_PATHS):
        return True
    parts = path.rstrip("/").split("/")
    return len(parts) == 4 and parts[1:3] == ["v1", "responses"]


def findings_of(
    request: Mapping[str, Any] | None, response: Mapping[str, Any] | None, options: CheckOptions | None = None
) -> list[dict[str, Any]]:
    """The checker's findings for one side of a stored exchange ([] for paths it does not know)."""
    path = path_of(str(request.get("target", ""))) if request else ""
    if not request or not response or not _checked(path):
        return []
    content_type = header_value(response, "content-type")
    exchange = exchange_from_bytes(
        body_bytes(response),
        request=request_json(request),
        status=response.get("status"),
        headers={"content-type": content_type} if content_type else None,
        path=path,  # a Responses error body or stored-response GET says nothing of its endpoint itself
    )
    try:
        return [f.as_dict() for f in check(exchange, options)]
    except (TypeError, ValueError) as exc:  # the checker gave up on this body: say so in the record
        return [{"rule": "capture.unchecked", "severity": "note", "path": "$", "chunk": None, "message": str(exc)}]


def findings_now(record: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A stored record's findings: those it holds, or, for one stored unchecked (its writer was over
    the checker's budget), both sides checked now."""
    held = record.get("findings")
    if isinstance(held, Mapping):
        return {name: list(held.get(name) or []) for name in ("client", "upstream")}
    parts = {name: side(record, name) for name in ("client", "upstream")}
    return {name: findings_of(side(part, "request"), side(part, "response")) for name, part in parts.items()}


def build_record(
    raw: RawExchange, redactor: Redactor, *, run_checker: bool = True, client_options: CheckOptions | None = None
) -> tuple[Record, bytes]:
    """The record and its line (redacted and scrubbed, ending in a newline). ``client_options``
    judges the client side (a gateway's own output, with the fields its settings emit on purpose)."""
    builder = _Builder(raw, redactor)
    client_request = builder.request(raw.client_request)
    client = {"request": client_request, "response": builder.response(raw.client_response)}
    upstream = None
    if raw.upstream_request is not None:
        upstream = {
            "request": builder.request(raw.upstream_request),
            "response": builder.response(raw.upstream_response),
        }
    model = (request_json(client_request) or {}).get("model")
    record: Record = {
        "v": VERSION,
        "id": new_id(raw.started),
        "time": round(raw.started, 6),
        "mode": raw.mode,
        "profile": raw.profile,
        "model": model if isinstance(model, str) else None,
        "client": client,
        "upstream": upstream,
        "timings": None,
        "error": raw.error,
        "findings": None,
        "redacted": [],
    }
    record["timings"] = _timings(record, raw)
    if run_checker:
        record["findings"] = {
            "client": findings_of(client["request"], client["response"], client_options),
            "upstream": findings_of(upstream["request"], upstream["response"]) if upstream else [],
        }
    _scrub_binary_bodies(record, builder.found, builder.notes)
    record["redacted"] = sorted(builder.notes)
    line = orjson.dumps(record)
    if any(orjson.dumps(s)[1:-1] in line for s in builder.found):  # a secret outside the redacted places
        builder.notes.add("literal")
        record["redacted"] = sorted(builder.notes)
        line = scrub(orjson.dumps(record), builder.found, builder.notes)
        record = orjson.loads(line)  # the dict must not keep what the line no longer holds
    return record, line + b"\n"


def _scrub_binary_bodies(record: Record, secrets: set[str], notes: set[str]) -> None:
    """A body that is not UTF-8 is stored as base64, where the last scrub of the line cannot see a
    secret: scrub its bytes before they are encoded."""
    for part in (record.get("client"), record.get("upstream")):
        for message in (part or {}).values():
            if isinstance(message, dict) and "body_b64" in message:
                data = body_bytes(message)
                cleaned = scrub_bytes(data, secret_needles(secrets))
                if cleaned is not data:
                    notes.add("literal")
                    del message["body_b64"]
                    message.update(encode_body(cleaned))


def warm_up() -> None:
    """Load what checking a chat stream and a plain body needs (the schema bundle, its validators)."""
    chunk = b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}'
    check(exchange_from_bytes(b"data: " + chunk + b"\n\ndata: [DONE]\n\n"))
    check(exchange_from_bytes(chunk.replace(b".chunk", b"")))
