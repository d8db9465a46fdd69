"""Refuse a Responses request the official API would refuse, or the bridge cannot honour.

Top level only (the item and tool shapes are checked where they are read, in ``request``): the
required fields, the scalars' types and ranges, enums, and parameters no version of the API defines
(``Unknown parameter: 'foo'.``, code ``unknown_parameter``). Messages, codes and ``param`` paths are
the ones the chat validator uses (``transform.validate._errors``), so both endpoints speak alike.

Parameters the official API defines but a chat backend cannot carry out are refused with
``unsupported_parameter`` rather than ignored: a client that asked for a stored prompt template, a
conversation object or background mode would otherwise get an answer to a different request.
Hints that change nothing about the answer (cache keys, service tier) are accepted and echoed.
"""

from __future__ import annotations

from typing import Any, Final

from oaishim.transform.validate._errors import (
    invalid_type,
    invalid_value,
    missing,
    out_of_range,
    unknown_parameter,
)
from oaishim.wire.errors import OpenAIError, bad_request

__all__ = ["INCLUDABLE", "check_request", "unsupported"]

INCLUDABLE: Final = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES: Final = ("auto", "concise", "detailed")
VERBOSITY: Final = ("low", "medium", "high")

# Every top-level field of CreateResponse: read by the mapper, echoed, or accepted as a hint.
_KNOWN: Final = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "temperature",
        "top_p",
        "top_logprobs",
        "max_output_tokens",
        "max_tool_calls",
        "parallel_tool_calls",
        "previous_response_id",
        "store",
        "stream",
        "stream_options",
        "background",
        "truncation",
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "service_tier",
        "include",
        "conversation",
        "prompt",
        "context_management",
        "moderation",
        # Not in the published spec, but the API accepts it: a string map for the client's own request
        # attribution (Codex CLI sends its turn metadata here on every request). Read, never sent upstream.
        "client_metadata",
    }
)
# Defined by the official API, but they need state or services the gateway does not have.
_UNSUPPORTED: Final = {
    "conversation": "conversations are not stored by this server; send the history in 'input' or use "
    "'previous_response_id'",
    "prompt": "stored prompt templates are not available on this server; send the instructions and input",
    "context_management": "server-side context compaction is not available on this server",
    "moderation": "moderation is not available on this server",
}


def unsupported(param: str, why: str) -> OpenAIError:
    return bad_request(f"Unsupported parameter: '{param}': {why}.", param, "unsupported_parameter")


def _number(body: dict[str, Any], name: str, low: int | float, high: int | float | None, *, integer: bool) -> None:
    value = body.get(name)
    if value is None:
        return
    ok = not isinstance(value, bool) and (
        (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
        if integer
        else isinstance(value, (int, float))
    )
    if not ok:
        raise invalid_type(name, "an integer" if integer else "a number", value)
    if value < low:
        raise out_of_range(name, value, low, below=True, integer=integer)
    if high is not None and value > high:
        raise out_of_range(name, value, high, below=False, integer=integer)


def _kind(body: dict[str, Any], name: str, kind: type, expected: str) -> None:
    value = body.get(name)
    if value is None:
        return
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise invalid_type(name, expected, value)


def _enum(value: Any, param: str, allowed: tuple[str, ...]) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise invalid_type(param, "a string", value)
    if value not in allowed:
        raise invalid_value(param, value, allowed)


def _metadata(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise invalid_type("metadata", "an object", value)
    if len(value) > 16:
        raise bad_request(
            f"Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got "
            f"an object with {len(value)} properties instead.",
            "metadata",
            "object_above_max_properties",
        )
    for key, item in value.items():
        if len(key) > 64:
            raise bad_request(
                f"Invalid 'metadata': string too long. Expected a key with maximum length 64, but got '{key}'.",
                "metadata",
                "invalid_value",
            )
        if not isinstance(item, str):
            raise invalid_type(f"metadata.{key}", "a string", item)
        if len(item) > 512:
            raise bad_request(
                f"Invalid 'metadata.{key}': string too long. Expected a string with maximum length 512, but got a "
                f"string with length {len(item)} instead.",
                f"metadata.{key}",
                "string_above_max_length",
            )


def _client_metadata(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise invalid_type("client_metadata", "an object", value)
    for key, item in value.items():
        if not isinstance(item, str):
            raise invalid_type(f"client_metadata.{key}", "a string", item)


def _objects(body: dict[str, Any]) -> None:
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise invalid_type("reasoning", "an object", reasoning)
        _enum(reasoning.get("effort"), "reasoning.effort", EFFORTS)
        _enum(reasoning.get("summary"), "reasoning.summary", SUMMARIES)
        _enum(reasoning.get("generate_summary"), "reasoning.generate_summary", SUMMARIES)
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise invalid_type("text", "an object", text)
        _enum(text.get("verbosity"), "text.verbosity", VERBOSITY)
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise invalid_type("include", "an array", include)
        for i, entry in enumerate(include):
            _enum(entry, f"include[{i}]", INCLUDABLE)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid_type("stream_options", "an object", options)
        if not body.get("stream"):
            raise bad_request(
                "Invalid value for 'stream_options': 'stream_options' is only allowed when 'stream' is true.",
                "stream_options",
                "invalid_value",
            )


def check_request(body: Any) -> dict[str, Any]:
    """Raise :class:`OpenAIError` (400) for the first top-level fault, in the official order."""
    if not isinstance(body, dict):
        raise bad_request("Invalid type for request body: expected an object.", None, "invalid_type")
    for key in body:
        if key not in _KNOWN:
            raise unknown_parameter(key)
    if body.get("model") is None:
        raise missing("model")
    _kind(body, "model", str, "a string")
    if body.get("input") is None:
        raise missing("input")
    if not isinstance(body["input"], (str, list)):
        raise invalid_type("input", "one of a string or array of objects", body["input"])
    _kind(body, "instructions", str, "a string")
    _number(body, "temperature", 0, 2, integer=False)
    _number(body, "top_p", 0, 1, integer=False)
    _number(body, "top_logprobs", 0, 20, integer=True)
    _number(body, "max_output_tokens", 16, None, integer=True)
    _number(body, "max_tool_calls", 0, None, integer=True)
    for name in ("parallel_tool_calls", "store", "stream", "background"):
        _kind(body, name, bool, "a boolean")
    for name in ("previous_response_id", "user", "prompt_cache_key", "service_tier", "prompt_cache_retention"):
        _kind(body, name, str, "a string")
    _kind(body, "safety_identifier", str, "a string")
    if isinstance(body.get("safety_identifier"), str) and len(body["safety_identifier"]) > 64:
        raise bad_request(
            "Invalid 'safety_identifier': string too long. Expected a string with maximum length 64, but got a "
            f"string with length {len(body['safety_identifier'])} instead.",
            "safety_identifier",
            "string_above_max_length",
        )
    _enum(body.get("truncation"), "truncation", ("auto", "disabled"))
    _metadata(body.get("metadata"))
    _client_metadata(body.get("client_metadata"))
    _objects(body)
    for name, why in _UNSUPPORTED.items():
        if body.get(name) is not None:
            raise unsupported(name, why)
    if body.get("background"):
        raise unsupported("background", "background responses are not run by this server; use 'stream' instead")
    return body
