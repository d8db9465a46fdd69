"""Responses API (``/v1/responses``): recognising an exchange, and checking its stream or body.

A stream is framed ``event: <type>`` + ``data: <json>`` per event with no ``[DONE]``; each event is
validated against its own schema (not the 58-way union), its keys walked like chat chunks', then the
grammar of :mod:`._resp_stream` runs. A plain body is the ``response`` object itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from oaishim.check import _schema, _shapes
from oaishim.check._findings import Sink
from oaishim.check._model import CheckOptions
from oaishim.check._resp_objects import TERMINAL, check_response
from oaishim.check._resp_stream import ResponsesStream
from oaishim.wire.sse import SSEEvent, is_done

# Request fields only a Responses request has (embeddings requests share ``input``).
_REQUEST_KEYS: Final = frozenset(
    {"instructions", "previous_response_id", "reasoning", "text", "tools", "tool_choice", "store", "stream",
     "max_output_tokens", "include", "conversation", "background", "truncation", "parallel_tool_calls"}
)  # fmt: skip


def is_responses_path(path: str | None) -> bool:
    if path is None:
        return False
    bare = path.split("?", 1)[0].rstrip("/")
    return bare.endswith("/responses") or "/responses/" in bare


def is_responses_request(request: Mapping[str, Any] | None) -> bool:
    return request is not None and "input" in request and bool(request.keys() & _REQUEST_KEYS)


def is_responses_stream(events: Sequence[SSEEvent]) -> bool:
    """A stream whose first events are named ``response.*`` or whose first JSON data has such a type."""
    for event in events[:3]:
        if event.event.startswith("response."):
            return True
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            continue
        kind = data.get("type") if isinstance(data, dict) else None
        return isinstance(kind, str) and kind.startswith("response.")
    return False


def check_body(body: Any, opts: CheckOptions, sink: Sink) -> None:
    _shapes.MEMO.validate_def(
        _schema.root_name("response"),
        body,
        sink,
        extensions_as_notes=opts.extensions_as_notes,
        intended=opts.intended_fields,
    )
    if isinstance(body, dict):
        check_response(body, "$", sink, event=None)


def _decode(n: int, event: SSEEvent, opts: CheckOptions, sink: Sink) -> dict[str, Any] | None:
    if event.id is not None:
        sink.add("responses.framing", "$", "an SSE id: field; the official API sends event: and data: only", chunk=n)
    try:
        data = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        sink.add("json", "$", f"event data is not JSON: {event.data[:60]!r}", chunk=n)
        return None
    if not isinstance(data, dict):
        sink.add("schema", "$", f"event data is a {type(data).__name__}, not an object", chunk=n)
        return None
    kind = data.get("type")
    if not event.event:
        sink.add("responses.framing", "$", f"no event: line before the data of {kind!r}", chunk=n)
    elif event.event != kind:
        sink.add("responses.framing", "$.type", f"event: {event.event!r} names a data type {kind!r}", chunk=n)
    name = _schema.event_root(kind) if isinstance(kind, str) else None
    if name is None:
        sink.add("schema", "$.type", f"{kind!r} is not an event type of the official API", chunk=n)
    else:
        _shapes.MEMO.validate_def(
            name, data, sink, chunk=n, extensions_as_notes=opts.extensions_as_notes, intended=opts.intended_fields
        )
    return data


def check_stream(events: Sequence[SSEEvent], opts: CheckOptions, sink: Sink) -> None:
    decoded: list[tuple[int, dict[str, Any] | None]] = []
    for n, event in enumerate(events):
        if is_done(event):
            sink.add("responses.done-sentinel", "$", "data: [DONE]; the Responses API never sends it", chunk=n)
            continue
        decoded.append((n, _decode(n, event, opts, sink)))
    segments = _segments(decoded)
    if len(segments) > 1:
        sink.add(
            "responses.concatenated",
            "$",
            f"{len(segments)} complete responses back to back in one body; each is checked on its own",
        )
    for segment in segments:
        rules = ResponsesStream(sink)
        for n, data in segment:
            if data is None:
                rules.lost()
            else:
                rules.feed(n, data)
        rules.finish()


Decoded = list[tuple[int, dict[str, Any] | None]]


def _segments(decoded: Decoded) -> list[Decoded]:
    """Split where a ``response.created`` follows a terminal event: a recording of a multi-step run."""
    segments: list[Decoded] = [[]]
    previous: Any = None
    for n, data in decoded:
        kind = data.get("type") if data is not None else None
        if kind == "response.created" and previous in TERMINAL:
            segments.append([])
        segments[-1].append((n, data))
        previous = kind
    return segments
