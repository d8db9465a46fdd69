"""Every backend's error bodies read into the one official shape (:class:`oaishim.wire.errors.OpenAIError`).

The SDK picks its exception class, and whether to retry, from the HTTP status alone, so the status
is decided here as carefully as the body.

What the backends send instead (docs/backend-quirks.md V-34, S-29, T-23, L-25, O-21):

* vLLM: ``{"error": {..., "type": "BadRequestError" | "Bad Request" | ..., "code": 400}}``
  (older: the same keys flat, with ``"object": "error"``); pydantic errors as Python reprs with
  ``param: "body.messages"``.
* SGLang, TensorRT-LLM: the flat form. TensorRT-LLM answers *every* handler exception with 400,
  including engine failures a client should retry.
* llama.cpp: ``{"error": {"code": int, "message", "type"}}`` with its own types
  (``exceed_context_size_error`` plus ``n_prompt_tokens``/``n_ctx``, ``not_supported_error`` 501,
  ``unavailable_error`` 503); no ``param``.
* Ollama: the official shape with ``not_found_error``/``api_error``; its native API ``{"error": str}``.
* FastAPI defaults ``{"detail": str | [{"loc", "msg", "type"}]}``, proxies' HTML pages, plain text,
  empty bodies.

:func:`normalize_upstream_error` first reads any of these into the same few raw facts (message, raw
type, param, integer code), then decides status and type: the HTTP status wins where it is an error
status, the body's type or integer code stand in where it is not (an error event inside a 200
stream), and a short table of recognisers catches the cases OpenAI reports specially (context
overflow, unknown model) and the server faults a backend disguised as 400.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from oaishim.wire.errors import OpenAIError

__all__ = ["OVERFLOW_MESSAGES", "is_error_body", "looks_like_server_fault", "normalize_upstream_error"]


# ---------------------------------------------------------------------------------------------------
# Reading any backend body into raw facts


@dataclass(frozen=True, slots=True)
class _Raw:
    message: str
    kind: str  # the backend's type, lower-cased with only letters and digits kept ("" when none)
    param: str | None
    code: str | None  # a string code worth keeping (an integer code is in ``number``)
    number: int | None  # an integer code in the body, usually the HTTP status the backend meant
    extra: Mapping[str, Any]


_MAX_MESSAGE: Final = 1000
# A run of characters a key or token is made of: a message is never cut inside one, where the cut
# would leave a prefix of a secret that no later scrub can recognise.
_WORD_CHAR: Final = re.compile(r"[\w.~+/=-]")
_WORD_TAIL: Final = re.compile(r"[\w.~+/=-]+\Z")
_TAG: Final = re.compile(r"<[^>]*>")
_TITLE: Final = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_SPACE: Final = re.compile(r"\s+")
# a field name in a backend's message: vLLM "(parameter=max_tokens, value=…)", "'messages' is
# required", pydantic reprs
# "'loc': 'body.temperature'" (new vLLM) and "'loc': ('body', 'store')" (old vLLM)
_PARAM_IN_MESSAGE: Final = (
    re.compile(r"\(parameter=([A-Za-z_][\w.\[\]]*)"),
    re.compile(r"^'(\w+)' is (?:a )?required"),  # llama.cpp; OpenAI's older jsonschema wording
    re.compile(r"'loc': '(body(?:\.\w+)+)'"),
    re.compile(r"'loc': \(((?:'body'|\"body\")(?:, (?:'\w+'|\d+))+)\)"),
)


def _clip(message: str) -> str:
    """A backend's message cut to ``_MAX_MESSAGE`` characters, never inside a word."""
    if len(message) <= _MAX_MESSAGE:
        return message
    cut = message[:_MAX_MESSAGE]
    if _WORD_CHAR.match(message, _MAX_MESSAGE - 1) and _WORD_CHAR.match(message, _MAX_MESSAGE):
        cut = _WORD_TAIL.sub("", cut)  # the cut falls inside a word: its start goes too
    return (cut.rstrip() + " [truncated]").lstrip()


def _kind(value: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", value.lower()) if isinstance(value, str) else ""


def _param_from_loc(parts: list[Any]) -> str | None:
    """``["body", "messages", 0, "role"]`` -> ``messages[0].role``; None when nothing is left."""
    if parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit()):
            if not out:
                return None  # "body.1" is a JSON position, not a field
            out += f"[{part}]"
        elif isinstance(part, str) and part:
            out += f".{part}" if out else part
    return out or None


def _param(value: Any, message: str) -> str | None:
    if isinstance(value, str) and value:
        return _param_from_loc(value.split("."))
    for pattern in _PARAM_IN_MESSAGE:
        match = pattern.search(message)
        if match:
            parts = [p.strip(" '\"") for p in re.split(r"[.,]", match.group(1))]
            return _param_from_loc([p for p in parts if p])
    return None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode() if value is not None else ""


def _from_text(text: str) -> str:
    """A plain-text or HTML body (a proxy's error page) as a one-paragraph message."""
    title = _TITLE.search(text)
    if title and title.group(1).strip():
        text = title.group(1)
    elif "<" in text and ">" in text:
        text = _TAG.sub(" ", text)
    return _SPACE.sub(" ", text).strip()


def _from_detail(detail: Any) -> tuple[str, str | None]:
    """FastAPI's ``detail``: a string, or pydantic's list of ``{"loc", "msg", "type"}``."""
    if not isinstance(detail, list):
        return _text(detail), None
    params: list[str | None] = []
    parts: list[str] = []
    for item in detail:
        if not isinstance(item, Mapping):
            parts.append(_text(item))
            continue
        loc = item.get("loc")
        param = _param_from_loc(list(loc)) if isinstance(loc, (list, tuple)) else None
        params.append(param)
        msg = _text(item.get("msg", ""))
        parts.append(f"Invalid '{param}': {msg}" if param else msg)
    return "; ".join(p for p in parts if p), next((p for p in params if p), None)


def _read(body: Any) -> _Raw:
    if isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", errors="replace")
    if isinstance(body, str) and body.lstrip().startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(body)
    if not isinstance(body, Mapping):
        text = body if isinstance(body, str) else _text(body)
        return _Raw(_from_text(text), "", None, None, None, {})
    inner: Mapping[str, Any] = body
    if isinstance(body.get("error"), Mapping):
        inner = body["error"]
    elif isinstance(body.get("error"), str):  # Ollama native, vLLM's API-key middleware
        inner = {"message": body["error"], **{k: v for k, v in body.items() if k != "error"}}
    elif "detail" in body and "message" not in body:
        message, param = _from_detail(body["detail"])
        return _Raw(message, "", param, None, None, {})
    message = _text(inner["message"]) if "message" in inner else _text(dict(inner))
    code = inner.get("code")
    number = code if isinstance(code, int) and not isinstance(code, bool) else None
    if isinstance(code, str) and code.isdigit():
        number, code = int(code), None
    return _Raw(
        message=message,
        kind=_kind(inner.get("type")),
        param=_param(inner.get("param"), message),
        code=code if isinstance(code, str) and code else None,
        number=number,
        extra=inner,
    )


# ---------------------------------------------------------------------------------------------------
# Deciding status and type

# What an upstream status becomes: (status for the client, official type).
_BY_STATUS: Final[dict[int, tuple[int, str]]] = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    403: (403, "permission_error"),
    404: (404, "invalid_request_error"),  # OpenAI's unknown model / URL
    408: (408, "timeout_error"),
    409: (409, "invalid_request_error"),
    413: (413, "invalid_request_error"),
    415: (415, "invalid_request_error"),
    422: (400, "invalid_request_error"),  # FastAPI's validation status; OpenAI says 400
    429: (429, "rate_limit_error"),
    501: (400, "invalid_request_error"),  # "not supported": the request's fault, and not worth a retry
}

# A backend's type (normalised by _kind) -> the status it means, for bodies without an error status.
_BY_KIND: Final[dict[str, int]] = {
    "badrequest": 400,
    "badrequesterror": 400,
    "invalidrequesterror": 400,
    "validationerror": 400,
    "unprocessableentityerror": 400,
    "exceedcontextsizeerror": 400,
    "notsupportederror": 501,
    "notimplementederror": 501,
    "authenticationerror": 401,
    "unauthorized": 401,
    "permissionerror": 403,
    "permissiondeniederror": 403,
    "forbidden": 403,
    "notfound": 404,
    "notfounderror": 404,
    "ratelimiterror": 429,
    "toomanyrequests": 429,
    "timeouterror": 408,
    "internalservererror": 500,
    "servererror": 500,
    "apierror": 500,
    "internalerror": 500,
    "runtimeerror": 500,
    "serviceunavailable": 503,
    "serviceunavailableerror": 503,
    "unavailableerror": 503,
}

_SERVER_FAULT: Final = re.compile(
    r"\binternal\b|\bcuda\b|out of memory|\boom\b|traceback|segmentation fault|\bnccl\b|"
    r"runtimeerror|executor ?error|\bengine\b.{0,40}\b(?:died|dead|crash|fail|error|abort)|"
    r"\b(?:died|dead|crash|fail|error)\w*\b.{0,40}\bengine\b",
    re.IGNORECASE | re.DOTALL,
)
# How each server words a context overflow, with where the wording comes from. One table for every
# profile, not per profile: a gateway in front of a proxy, or with the generic profile, meets them all,
# and none of these phrases means anything else. Matched case-insensitively against the message,
# whatever the status (a 500 or a 200's error event that means overflow is still one).
OVERFLOW_MESSAGES: tuple[tuple[str, str], ...] = (
    (r"maximum context length", "OpenAI's own wording; vLLM and SGLang copy it (V-9, S-7)"),
    (r"context length (?:is )?exceeded", "OpenAI's code as prose (proxies)"),
    (r"input length \(\d+\) exceeds", "vLLM 2026 serving layer: 'Input length (X) exceeds model's …' (V-9)"),
    (r"longer than the maximum model length", "vLLM engine input processor: 'The decoder prompt (length N) is …'"),
    (r"longer than the model's context length", "SGLang tokenizer manager: 'The input (N tokens) is …' (S-7)"),
    (r"exceeds? (?:the )?model'?s? (?:maximum )?context", "SGLang: 'Requested token count exceeds the model's …'"),
    (
        r"exceeds? the (?:available|maximum) context",
        "llama.cpp: 'the request exceeds the available context size' (L-25)",
    ),
    (r"context (?:size|window) (?:has been |was |is )?(?:exceeded|too small)", "llama.cpp mid-stream, 500 (L-26)"),
    (
        r"\bexceeds?\b[^\n]{0,60}\bmax_(?:seq|input|num)_(?:len|tokens)\b",
        "TensorRT-LLM: '… should not exceed max_seq_len (N)'",
    ),
    (r"exceeds? (?:the )?maximum input length", "TensorRT-LLM: 'Prompt length exceeds maximum input length'"),
    (r"prompt is too long|too many tokens in (?:the )?prompt", "other OpenAI-compatible servers and proxies"),
)
_CONTEXT_OVERFLOW: Final = re.compile("|".join(f"(?:{pattern})" for pattern, _ in OVERFLOW_MESSAGES), re.IGNORECASE)
_UNKNOWN_MODEL: Final = re.compile(
    # "The model `x` does not exist", 'model "x" not found', "model not found": the name, if any,
    # sits between "model" and the verdict, so "the model does not support …; template not found" is not one
    r"\bmodel\s+(?:[`'\"][^`'\"\n]{0,200}[`'\"]\s+|[\w./:@-]+\s+)?"
    r"(?:does not exist|(?:was |is )?not found|is not available|not loaded)|"
    r"\b(?:unknown|no such|invalid) model\b",
    re.IGNORECASE,
)


def looks_like_server_fault(message: str) -> bool:
    """Whether an error message shows a failure of the server rather than of the request."""
    return _SERVER_FAULT.search(message) is not None


def is_error_body(body: Any) -> bool:
    """An error in any backend's shape: the official ``{"error": …}`` or a flat ``object: "error"``."""
    if not isinstance(body, dict) or "choices" in body:
        return False
    return "error" in body or body.get("object") == "error"


@dataclass(frozen=True, slots=True)
class _Verdict:
    status: int
    type: str
    param: str | None
    code: str | None
    message: str


def _context_overflow(raw: _Raw, v: _Verdict, context_param: str) -> _Verdict | None:
    if raw.kind != "exceedcontextsizeerror" and not _CONTEXT_OVERFLOW.search(raw.message):
        return None
    message = v.message
    n_ctx, n_prompt = raw.extra.get("n_ctx"), raw.extra.get("n_prompt_tokens")
    if isinstance(n_ctx, int) and isinstance(n_prompt, int):  # llama.cpp: say it as OpenAI does
        message = (
            f"This model's maximum context length is {n_ctx} tokens. However, your {context_param} "
            f"resulted in {n_prompt} tokens. Please reduce the length of the {context_param}."
        )
    return _Verdict(400, "invalid_request_error", context_param, "context_length_exceeded", message)


def _unknown_model(raw: _Raw, v: _Verdict, context_param: str) -> _Verdict | None:
    if v.status not in (400, 404) or not _UNKNOWN_MODEL.search(raw.message):
        return None
    return _Verdict(404, "invalid_request_error", "model", "model_not_found", v.message)


def _disguised_server_fault(raw: _Raw, v: _Verdict, context_param: str) -> _Verdict | None:
    """TensorRT-LLM (and handlers elsewhere) answer engine failures with 400."""
    if v.status != 400:
        return None
    if _classify(_BY_KIND.get(raw.kind, 400))[1] != "server_error" and not _SERVER_FAULT.search(raw.message):
        return None
    return _Verdict(500, "server_error", None, raw.code, v.message)


# Tried in order; the first that answers decides. Context overflow comes first because its messages
# may name the engine ("exceeds the engine's maximum context") without being a server fault.
_RECOGNISERS: Final[tuple[Callable[[_Raw, _Verdict, str], _Verdict | None], ...]] = (
    _context_overflow,
    _unknown_model,
    _disguised_server_fault,
)


def _classify(status: int) -> tuple[int, str]:
    """An error status -> (the status the client gets, the official type)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return status, "server_error"
    return 400, "invalid_request_error"  # 405, 410, …: statuses the official API does not use


def _base_status(status: int, raw: _Raw) -> int:
    if status >= 400:
        return status
    if raw.number is not None and 400 <= raw.number <= 599:  # an error event inside a 200 stream
        return raw.number
    return _BY_KIND.get(raw.kind, 500)


def normalize_upstream_error(status: int, body: bytes | Any, *, context_param: str = "messages") -> OpenAIError:
    """Map any backend's error (HTTP status and body) to the official shape, status and type.

    ``status`` is the upstream HTTP status (200 for an error event inside a stream). ``body`` is the
    raw bytes, or JSON already decoded. ``context_param`` is what a context overflow blames:
    ``messages`` for chat, ``prompt`` for legacy completions, ``input`` for embeddings.
    """
    raw = _read(body)
    base = _base_status(status, raw)
    out_status, kind = _classify(base)
    message = _clip(raw.message) or f"The upstream server answered HTTP {base} without a message."
    verdict = _Verdict(out_status, kind, raw.param, raw.code, message)
    for recognise in _RECOGNISERS:
        found = recognise(raw, verdict, context_param)
        if found is not None:
            verdict = found
            break
    return OpenAIError(verdict.status, verdict.message, verdict.type, verdict.param, verdict.code)
