"""The one error shape a client sees: :class:`OpenAIError` and its named constructors.

The official body is ``{"error": {"message": str, "type": str, "param": str|null, "code":
str|null}}`` (docs/wire-format.md §5). The SDK picks its exception class, and whether to retry,
from the HTTP status alone (400 BadRequest, 401 Authentication, 403 PermissionDenied, 404 NotFound,
429 RateLimit, >=500 InternalServer; it retries 408, 409, 429 and >=500), so a status that does not
fit the fault is as wrong as a malformed body: each constructor below pairs a status with its
official type. Reading the backends' own error bodies into this shape is
:mod:`oaishim.transform.upstream_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from oaishim.wire.sse import encode_data

__all__ = [
    "OpenAIError",
    "bad_request",
    "error_event",
    "internal_error",
    "not_found",
    "timeout",
    "too_large",
    "unauthorized",
    "unavailable",
    "upstream_error",
]


@dataclass(frozen=True)
class OpenAIError(Exception):
    """An error as the official API reports it: an HTTP status plus the four-key body."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        Exception.__init__(self, self.message)  # so str(err) and err.args read like any exception

    def add_note(self, note: str) -> None:
        # BaseException.add_note sets __notes__ through setattr, which a frozen dataclass refuses;
        # pytest and hypothesis add notes to exceptions that pass through them.
        self.__dict__.setdefault("__notes__", []).append(note)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.message, self.type, self.param, self.code))

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.body())


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def not_found(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """404 with ``invalid_request_error``, which is what OpenAI sends for an unknown model or URL."""
    return OpenAIError(404, message, "invalid_request_error", param, code)


def unauthorized(message: str = "Incorrect API key provided.") -> OpenAIError:
    return OpenAIError(401, message, "authentication_error", None, "invalid_api_key")


def too_large(limit: int) -> OpenAIError:
    return OpenAIError(
        413,
        f"The request body is too large: the limit is {limit} bytes.",
        "invalid_request_error",
        None,
        "request_too_large",
    )


def upstream_error(message: str, status: int = 502, code: str | None = None) -> OpenAIError:
    """502 (or another 5xx): the upstream could not be reached, or what it answered cannot be used."""
    return OpenAIError(status, message, "server_error", None, code)


def internal_error(message: str, code: str | None = None) -> OpenAIError:
    """500: the gateway's own fault, or the backend's reported as such (an aborted generation)."""
    return OpenAIError(500, message, "server_error", None, code)


def unavailable(message: str, code: str | None = None) -> OpenAIError:
    """503: try again later (no free connection slot, a store that cannot be reached)."""
    return OpenAIError(503, message, "server_error", None, code)


def timeout(
    message: str = "The upstream server did not answer in time.", status: int = 504, code: str = "timeout"
) -> OpenAIError:
    """504 when the upstream is slow (a server fault, retried by the SDK); 408 when the client was."""
    return OpenAIError(status, message, "timeout_error" if status == 408 else "server_error", None, code)


def error_event(err: OpenAIError) -> bytes:
    """The SSE event for an error after the stream has started (status 200 already sent)."""
    return encode_data(err.to_bytes())
