"""Turning raw response bytes into an :class:`Exchange` (used by the CLI, capture and probe)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from oaishim.check._model import Exchange
from oaishim.wire.sse import SSEDecoder

_SSE_STARTS: Final = (b"data:", b"event:", b"id:", b"retry:", b":")


def looks_like_sse(raw: bytes, content_type: str | None = None) -> bool:
    """SSE when the content type says so, or when the bytes do (a server may mislabel a stream)."""
    if content_type is not None and content_type.startswith("text/event-stream"):
        return True
    head = raw.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")
    return head.startswith(_SSE_STARTS)


def exchange_from_bytes(
    raw: bytes,
    *,
    request: Mapping[str, Any] | None = None,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    path: str | None = None,
) -> Exchange:
    """Decode a raw body: SSE when the content type or the bytes say so, else JSON (or text)."""
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    if looks_like_sse(raw, hdrs.get("content-type")):
        decoder = SSEDecoder()
        events = decoder.feed(raw) + decoder.flush()
        return Exchange(
            request,
            status,
            hdrs,
            events=events,
            incomplete_tail=decoder.incomplete_tail,
            unknown_fields=decoder.unknown_fields,
            path=path,
        )
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw.decode("utf-8", "replace")
    return Exchange(request, status, hdrs, body=body, path=path)
