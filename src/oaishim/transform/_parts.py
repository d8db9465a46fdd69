"""Pieces shared by the plain-body and the stream normalisers: one place for each rule.

* finish reasons: the official set only; ``tool_calls`` exactly when calls were made under
  ``auto`` (OpenAI answers ``stop`` for a named tool choice, docs/backend-quirks.md §0.1);
* tool-call ids: :func:`oaishim.transform.ids.call_id`;
* logprobs: the endpoint's own shape, ``-inf`` clamped to -9999.0 as the spec says, extra keys
  (llama.cpp's ``id``) dropped, alternatives trimmed to what was asked;
* usage: the three counts and the official detail keys; a top-level ``reasoning_tokens`` moved
  into ``completion_tokens_details``;
* odd JSON from the backend: a field that carries the answer (choices, a choice, its delta or
  message, text, content, refusal, tool calls, finish_reason) with the wrong JSON type is an
  :func:`unreadable` error, since reading it as absent would lose part of the answer silently;
  null is absent. Logprobs and usage are annotations: their malformed parts are read as absent.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

from oaishim.transform.context import ResponseContext
from oaishim.wire.errors import OpenAIError

OFFICIAL_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_PROMPT_DETAILS: Final = ("cached_tokens", "audio_tokens")
_COMPLETION_DETAILS: Final = (
    "reasoning_tokens",
    "audio_tokens",
    "accepted_prediction_tokens",
    "rejected_prediction_tokens",
)


def mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (backends send null, [] or junk)."""
    return value if isinstance(value, dict) else {}  # a new one: a caller may add to it


def count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sequence(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one (logprobs parts: annotations, not the answer)."""
    return value if isinstance(value, list) else []


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def unreadable(where: str, value: Any, expected: str) -> OpenAIError:
    """The error for a field of the backend's answer that has the wrong JSON type (502: the backend's fault)."""
    return OpenAIError(
        502, f"the upstream sent {where} as {_json_type(value)}, expected {expected}; it cannot be read", "server_error"
    )


def text_or_none(value: Any, where: str, choice: int | None = None) -> str | None:
    """A text field of the answer: a string, or None when absent or null. With ``choice``, ``where``
    names a field of that choice, and the full name (``choices[0].text``) is built only for the error."""
    if value is None or isinstance(value, str):
        return value
    raise unreadable(where if choice is None else f"choices[{choice}].{where}", value, "a string or null")


def finish_reason(upstream: Any, made_calls: bool, ctx: ResponseContext) -> str:
    """The official finish reason for what the backend said and what was produced."""
    if upstream == "length":
        return "length"
    if upstream == "content_filter":
        return "content_filter"
    if made_calls:
        return "tool_calls" if ctx.tool_mode in ("auto", "required") else "stop"
    return "stop"


ARGS_INVALID = "tool_arguments_invalid"  # the violation: a tool call's final arguments are not JSON


def is_json(text: str) -> bool:
    """``text`` is one whole JSON value (a tool call's final arguments must be)."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        try:  # orjson refuses integers beyond 64 bits, which are JSON
            json.loads(text)
        except ValueError:
            return False
    return True


def arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return orjson.dumps(arguments).decode()


def _logprob(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return -9999.0
    return max(float(value), -9999.0)


def _token_bytes(entry: dict[str, Any]) -> list[int] | None:
    raw = entry.get("bytes")
    if isinstance(raw, list) and all(isinstance(b, int) and not isinstance(b, bool) for b in raw):
        return raw
    token = entry.get("token")
    return list(token.encode()) if isinstance(token, str) else None


def _alternative(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": str(entry.get("token", "")),
        "logprob": _logprob(entry.get("logprob")),
        "bytes": _token_bytes(entry),
    }


def chat_logprob_entries(logprobs: Any, ctx: ResponseContext) -> list[dict[str, Any]]:
    """Upstream logprobs (chat or legacy shape) as official chat entries, trimmed to top_logprobs."""
    if not isinstance(logprobs, dict):
        return []
    out: list[dict[str, Any]] = []
    content = logprobs.get("content")
    if content is not None:  # the chat shape (anything but an array there is read as no entries)
        for entry in sequence(content):
            if not isinstance(entry, dict):
                continue
            alts = [_alternative(a) for a in sequence(entry.get("top_logprobs")) if isinstance(a, dict)]
            out.append({**_alternative(entry), "top_logprobs": alts[: ctx.top_logprobs]})
        return out
    tokens = sequence(logprobs.get("tokens"))
    values = sequence(logprobs.get("token_logprobs"))
    tops = sequence(logprobs.get("top_logprobs"))
    for i, token in enumerate(tokens):
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        alts = [_alternative({"token": t, "logprob": lp}) for t, lp in top.items()]
        value = values[i] if i < len(values) else None
        out.append({**_alternative({"token": token, "logprob": value}), "top_logprobs": alts[: ctx.top_logprobs]})
    return out


def legacy_logprobs(logprobs: Any, want: int, offset: int = 0) -> dict[str, Any] | None:
    """Upstream logprobs (legacy or chat shape) in the legacy completions shape."""
    if not isinstance(logprobs, dict):
        return None
    if "content" not in logprobs:
        tokens = [str(t) for t in sequence(logprobs.get("tokens"))]
        tops = [
            {str(k): _logprob(v) for k, v in list(t.items())[: want + 1]} if isinstance(t, dict) else None
            for t in sequence(logprobs.get("top_logprobs"))
        ]
        offsets = [o for o in sequence(logprobs.get("text_offset")) if count(o) is not None]
        return {
            "tokens": tokens,
            "token_logprobs": [None if v is None else _logprob(v) for v in sequence(logprobs.get("token_logprobs"))],
            "top_logprobs": tops,
            "text_offset": offsets or [offset + i for i in range(len(tokens))],
        }
    entries = [e for e in sequence(logprobs.get("content")) if isinstance(e, dict)]
    result: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    position = offset
    for entry in entries:
        token = str(entry.get("token", ""))
        result["tokens"].append(token)
        result["token_logprobs"].append(_logprob(entry.get("logprob")))
        alts = [a for a in sequence(entry.get("top_logprobs")) if isinstance(a, dict)][: want + 1]
        result["top_logprobs"].append({str(a.get("token", "")): _logprob(a.get("logprob")) for a in alts})
        result["text_offset"].append(position)
        position += len(token)
    return result


def usage(upstream: Any) -> dict[str, Any] | None:
    if not isinstance(upstream, dict):
        return None
    prompt = count(upstream.get("prompt_tokens")) or 0
    completion = count(upstream.get("completion_tokens")) or 0
    total = count(upstream.get("total_tokens"))
    total = prompt + completion if total is None else total
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    details = upstream.get("prompt_tokens_details")
    if isinstance(details, dict):
        kept = {k: details[k] for k in _PROMPT_DETAILS if count(details.get(k)) is not None}
        if kept:
            out["prompt_tokens_details"] = kept
    cdetails = (
        dict(upstream.get("completion_tokens_details") or {})
        if isinstance(upstream.get("completion_tokens_details"), dict)
        else {}
    )
    if count(upstream.get("reasoning_tokens")) is not None and "reasoning_tokens" not in cdetails:
        cdetails["reasoning_tokens"] = upstream["reasoning_tokens"]
    if cdetails:  # (most backends send none: no lookups then)
        kept = {k: cdetails[k] for k in _COMPLETION_DETAILS if count(cdetails.get(k)) is not None}
        if kept:
            out["completion_tokens_details"] = kept
    return out


def reasoning_text(source: dict[str, Any]) -> str:
    """Reasoning text under any of the names backends use."""
    for key in ("reasoning_content", "reasoning"):
        value = source.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def reasoning_fields(text: str, ctx: ResponseContext) -> dict[str, str]:
    """The reasoning as the client asked to see it; never an empty string. None at all when the
    client turned thinking off (``reasoning_effort`` none/minimal): what the backend thought anyway
    is dropped, and counted as the repair ``reasoning_dropped``."""
    if not text or ctx.reasoning_field == "drop":
        return {}
    if ctx.thinking_off:
        ctx.repairs.add("reasoning_dropped")
        return {}
    if ctx.reasoning_field == "both":
        return {"reasoning_content": text, "reasoning": text}
    return {ctx.reasoning_field: text}


def extensions(upstream: dict[str, Any], official: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    """With ``--keep-extensions``, the upstream keys the official object does not have."""
    if not ctx.keep_extensions:
        return {}
    # with thinking off, the backend's reasoning keys are not extensions to keep but what was dropped
    skip = _REASONING_KEYS if ctx.thinking_off else ()
    return {k: v for k, v in upstream.items() if k not in official and k not in skip}


_REASONING_KEYS: Final = ("reasoning_content", "reasoning")
