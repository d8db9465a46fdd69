"""Rule e (errors): the one error shape, and an HTTP status that fits it.

The official body is ``{"error": {"message": str, "type": str, "param": str|null, "code":
str|null}}``; all four keys are required (docs/wire-format.md §5). The SDK picks its exception
class from the status alone, so a server fault sent as 400 (TensorRT-LLM answers everything with
400) makes a client treat a retryable failure as its own mistake.
"""

from __future__ import annotations

from typing import Any, Final

from oaishim.check._findings import Sink
from oaishim.transform.upstream_errors import is_error_body as _any_error_body
from oaishim.transform.upstream_errors import looks_like_server_fault

__all__ = ["check_error_body", "is_error_body"]


def is_error_body(body: Any) -> bool:
    """An error body in any backend's shape; a Responses ``response`` object (whose ``error`` key is
    ``null`` or the failure it reports) is not one."""
    return _any_error_body(body) and not (isinstance(body, dict) and body.get("object") == "response")


# The error types the official API uses, and the statuses each may come with.
_TYPE_STATUS: Final[dict[str, range | tuple[int, ...]]] = {
    "invalid_request_error": (400, 404, 405, 409, 413, 415, 422, 431),  # 405: a wrong method on a known URL
    "authentication_error": (401,),
    "permission_error": (403,),
    "not_found_error": (404,),
    "conflict_error": (409,),
    "rate_limit_error": (429,),
    "insufficient_quota": (429,),
    "tokens": (429,),
    "requests": (429,),
    "server_error": range(500, 600),
    "api_error": range(500, 600),
    "timeout_error": (408, 504),
}


def check_error_body(body: Any, status: int | None, sink: Sink, *, chunk: int | None = None) -> None:
    """Check an error body; ``status`` is None for an error event inside a stream."""
    if not isinstance(body, dict):
        sink.add("error.shape", "$", 'error body is not {"error": {...}}', chunk=chunk)
        return
    error = body.get("error")
    if not isinstance(error, dict):
        # A flat body (vLLM old, SGLang, TRT-LLM): one finding for the shape; its status is still judged.
        sink.add("error.shape", "$", 'error body is not {"error": {...}}', chunk=chunk)
        error = body
    for key, kinds in (
        ("message", (str,)),
        ("type", (str,)),
        ("param", (str, type(None))),
        ("code", (str, type(None))),
    ):
        path = f"$.error.{key}"
        if key not in error:
            # reported on the object, where the schema's "required" error sits, so the two fold into one
            sink.add("error.shape", "$.error", f"error has no {key!r} key", chunk=chunk)
        elif not isinstance(error[key], kinds):
            sink.add("error.shape", path, f"error {key} is a {type(error[key]).__name__}", chunk=chunk)
    kind = error.get("type")
    if isinstance(kind, str) and kind not in _TYPE_STATUS:
        sink.add(
            "error.shape",
            "$.error.type",
            f"error type {kind!r} is not one the official API uses",
            chunk=chunk,
        )
    if status is None:
        return
    if status < 400:
        sink.add("error.status", "$", f"an error body with HTTP {status}", chunk=chunk)
        return
    message = error.get("message")
    if 400 <= status < 500 and isinstance(message, str) and looks_like_server_fault(message):
        sink.add("error.status", "$", f"HTTP {status} for what the message shows is a server fault", chunk=chunk)
        return
    fitting = _TYPE_STATUS.get(kind) if isinstance(kind, str) else None
    if fitting is not None and status not in fitting:
        sink.add("error.status", "$", f"HTTP {status} does not fit error type {kind!r}", chunk=chunk)
