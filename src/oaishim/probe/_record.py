"""The compat record of one exchange: the comparison fields, filled in from the wire. Pure.

These are the fields a person writes down when comparing two OpenAI-compatible endpoints by hand
(the procedure the ``compat.*`` cases automate). The probe fills them for every step it sends::

    endpoint, served_model_name, stream,
    request:  logprobs, top_logprobs, stop, stop_token_ids, include_stop_str_in_output,
              max_tokens, stream_options (Responses: max_output_tokens, previous_response_id, store)
    response: logprobs_container (ChatCompletionLogProbs | CompletionLogProbs | null),
              token_fields (tokens+text_offset or token+bytes), stop_reason (the vendor field),
              first_chunk_has_content, usage_present (Responses: response_status, output_types)
    error:    unknown_field_rejected
    status:   whether the two sides are comparable (here: "comparable" when the step met the
              official API with no error or warning, else "differs"; with --against the
              comparison says "same" or "differs" per step)

and adds ``http_status``, ``finish_reason``, ``requested_model`` and ``fields`` (the set of key
paths in the answer, ``choices[].message.content``; a stream's chunks pooled), which is what
comparison step 2 (``compat.two-endpoints``) compares between endpoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oaishim.probe._view import StepView

__all__ = ["UNKNOWN_FIELD_PREFIX", "field_set", "record_of"]

UNKNOWN_FIELD_PREFIX = "x_oaishim_probe_"
_REQUEST_FIELDS = (
    "logprobs",
    "top_logprobs",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "max_tokens",
    "max_completion_tokens",
    "stream_options",
    "max_output_tokens",
    "previous_response_id",
    "store",
)
_LEGACY_KEYS = frozenset({"tokens", "token_logprobs", "top_logprobs", "text_offset"})


def _paths(value: Any, prefix: str, out: set[str]) -> None:
    if isinstance(value, Mapping) and prefix.endswith("logprobs.top_logprobs[]"):
        out.add(prefix + ".{token}")  # legacy alternatives: {token: logprob}, the keys are data
    elif isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            _paths(item, path, out)
    elif isinstance(value, list):
        for item in value:
            _paths(item, prefix + "[]", out)


def field_set(objects: Iterable[Any]) -> list[str]:
    """Sorted key paths found in any of ``objects`` (list items pooled under ``[]``)."""
    out: set[str] = set()
    for obj in objects:
        _paths(obj, "", out)
    return sorted(out)


def _logprobs(view: StepView) -> Mapping[str, Any] | None:
    """The first logprobs object with entries (a stream's role chunk may carry an empty one)."""
    found: list[Mapping[str, Any]] = []
    sources = view.chunks if view.stream else [view.result]
    for source in sources:
        choices = source.get("choices") if isinstance(source, Mapping) else None
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, Mapping) and isinstance(choice.get("logprobs"), Mapping):
                found.append(choice["logprobs"])
    full = [lp for lp in found if lp.get("content") or lp.get("tokens")]
    return next(iter(full or found), None)


def _logprobs_fields(view: StepView) -> tuple[str | None, list[str] | None]:
    logprobs = _logprobs(view)
    if logprobs is None:
        return None, None
    content = logprobs.get("content")
    if isinstance(content, list):
        first = next((e for e in content if isinstance(e, Mapping)), {})
        return "ChatCompletionLogProbs", sorted(first)
    if _LEGACY_KEYS & logprobs.keys():
        return "CompletionLogProbs", sorted(k for k in logprobs if k in _LEGACY_KEYS)
    return "unknown", sorted(logprobs)


def _stop_reason(view: StepView) -> Any:
    sources = view.chunks if view.stream else [view.result]
    for source in sources:
        choices = source.get("choices") if isinstance(source, Mapping) else None
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, Mapping):
                for key in ("stop_reason", "matched_stop"):
                    if choice.get(key) is not None:
                        return choice[key]
    return None


def _first_chunk_has_content(view: StepView) -> bool | None:
    if not view.stream:
        return None
    for chunk in view.chunks:
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            delta = choices[0].get("delta")
            return isinstance(delta, Mapping) and isinstance(delta.get("content"), str)
    return None


def _output_types(view: StepView) -> list[str] | None:
    """A Responses answer's output item types, in order (``["reasoning", "message"]``)."""
    output = view.result.get("output") if view.responses and isinstance(view.result, Mapping) else None
    if not isinstance(output, list):
        return None
    return [str(item.get("type")) for item in output if isinstance(item, Mapping)]


def record_of(path: str, request: Mapping[str, Any] | None, view: StepView) -> dict[str, Any]:
    """The record of one step (``request`` is None for raw bytes and GETs)."""
    req = request or {}
    result = view.result if isinstance(view.result, Mapping) else {}
    container, token_fields = _logprobs_fields(view)
    sent_unknown = any(str(k).startswith(UNKNOWN_FIELD_PREFIX) for k in req)
    objects = view.chunks if view.stream else [view.result]
    return {
        "endpoint": path,
        "served_model_name": result.get("model") if isinstance(result.get("model"), str) else None,
        "requested_model": req.get("model"),
        "stream": req.get("stream") is True,
        "request": {key: req.get(key) for key in _REQUEST_FIELDS},
        "response": {
            "logprobs_container": container,
            "token_fields": token_fields,
            "stop_reason": _stop_reason(view),
            "first_chunk_has_content": _first_chunk_has_content(view),
            "usage_present": view.usage is not None,
            "finish_reason": view.finish_reason() if view.choices() or view.responses else None,
            "response_status": view.response_status,
            "output_types": _output_types(view),
        },
        "error": {
            "unknown_field_rejected": (view.status == 400) if sent_unknown else None,
            "type": (view.error or {}).get("type"),
            "code": (view.error or {}).get("code"),
        },
        "http_status": view.status,
        "transport_error": view.transport_error,
        "fields": field_set(objects),
    }
