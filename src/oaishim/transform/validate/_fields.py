"""The hand-written checks: required fields, scalar types and ranges, messages, stops and tools.

They run before the schema (``_schema``) because they report what the official API reports first
(the required field, then the documented scalars) in its words, and they are cheap. The schema then
catches the rest: enums, nested shapes, fields this table does not list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from oaishim.transform.validate._errors import (
    empty_array,
    invalid_type,
    invalid_value,
    missing,
    out_of_range,
)
from oaishim.wire.errors import OpenAIError, bad_request

Endpoint = Literal["chat", "completions", "embeddings"]
Kind = Literal["integer", "number", "boolean", "string", "object"]

ROLES: Final = ("system", "assistant", "user", "function", "tool", "developer")
TOOL_CHOICES: Final = ("none", "auto", "required")
TOOL_TYPES: Final = ("function", "custom")
MAX_STOP: Final = 4

_CHAT: frozenset[Endpoint] = frozenset({"chat"})
_COMPLETIONS: frozenset[Endpoint] = frozenset({"completions"})
_GENERATE: frozenset[Endpoint] = frozenset({"chat", "completions"})
_EMBEDDINGS: frozenset[Endpoint] = frozenset({"embeddings"})


@dataclass(frozen=True, slots=True)
class _Field:
    """A scalar field: its JSON type and range, and the endpoints that define it (docs/wire-format.md §1, §2)."""

    name: str
    kind: Kind
    endpoints: frozenset[Endpoint]
    minimum: int | float | None = None
    maximum: int | float | None = None


_FIELDS: tuple[_Field, ...] = (
    _Field("n", "integer", _GENERATE, 1, 128),
    _Field("temperature", "number", _GENERATE, 0, 2),
    _Field("top_p", "number", _GENERATE, 0, 1),
    _Field("frequency_penalty", "number", _GENERATE, -2, 2),
    _Field("presence_penalty", "number", _GENERATE, -2, 2),
    _Field("max_completion_tokens", "integer", _CHAT, 1),
    _Field("max_tokens", "integer", _CHAT, 1),
    _Field("max_tokens", "integer", _COMPLETIONS, 0),  # 0 is legal here: echo with prompt logprobs
    _Field("stream", "boolean", _GENERATE),
    _Field("stream_options", "object", _GENERATE),
    _Field("logprobs", "boolean", _CHAT),
    _Field("logprobs", "integer", _COMPLETIONS, 0, 5),
    _Field("top_logprobs", "integer", _CHAT, 0, 20),
    _Field("seed", "integer", _GENERATE),
    _Field("echo", "boolean", _COMPLETIONS),
    _Field("best_of", "integer", _COMPLETIONS, 0, 20),
    _Field("suffix", "string", _COMPLETIONS),
    _Field("parallel_tool_calls", "boolean", _CHAT),
    _Field("logit_bias", "object", _GENERATE),
    _Field("response_format", "object", _CHAT),
    _Field("user", "string", frozenset({"chat", "completions", "embeddings"})),
    _Field("dimensions", "integer", _EMBEDDINGS, 1),
    _Field("encoding_format", "string", _EMBEDDINGS),
)

# Each endpoint's fields, in _FIELDS' order (the first failure is the one reported)
_FIELDS_OF: Final[dict[Endpoint, tuple[_Field, ...]]] = {
    endpoint: tuple(spec for spec in _FIELDS if endpoint in spec.endpoints) for endpoint in get_args(Endpoint)
}

# The same by name (a name is documented once per endpoint)
_NAMED: Final[dict[Endpoint, dict[str, _Field]]] = {
    endpoint: {spec.name: spec for spec in specs} for endpoint, specs in _FIELDS_OF.items()
}

_EXPECTED: Final[dict[Kind, str]] = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "string": "a string",
    "object": "an object",
}


def _is(kind: Kind, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):  # JSON true is not a number, though Python's bool is an int
        return False
    if kind == "integer":  # 2.0 is an integer to JSON Schema, and so to the official API's schema
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float))
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, dict)


def _out_of_range(spec: _Field, value: int | float, *, below: bool) -> OpenAIError:
    bound = (spec.minimum if below else spec.maximum) or 0
    return out_of_range(spec.name, value, bound, below=below, integer=spec.kind == "integer")


def _check_field(spec: _Field, value: Any) -> None:
    if not _is(spec.kind, value):
        raise invalid_type(spec.name, _EXPECTED[spec.kind], value)
    if spec.minimum is not None and value < spec.minimum:
        raise _out_of_range(spec, value, below=True)
    if spec.maximum is not None and value > spec.maximum:
        raise _out_of_range(spec, value, below=False)


def _check_content(i: int, message: dict[str, Any], role: str) -> None:
    if "content" not in message:
        if role != "assistant":  # an assistant message may carry only tool calls
            raise missing(f"messages[{i}].content")
        return
    content = message["content"]
    if content is None and role in ("assistant", "function"):
        return
    if isinstance(content, str):
        return
    param = f"messages[{i}]"
    if not isinstance(content, list):
        raise invalid_type(f"{param}.content", "one of a string or array of objects", content)
    if not content:
        raise empty_array(f"{param}.content")
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise invalid_type(f"{param}.content[{j}]", "an object", part)
        if part.get("type") is None:
            raise missing(f"{param}.content[{j}].type")
        if not isinstance(part["type"], str):
            raise invalid_type(f"{param}.content[{j}].type", "a string", part["type"])


def _check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise invalid_type("messages", "an array", messages)
    if not messages:
        raise empty_array("messages")
    for i, message in enumerate(messages):  # (a message's name is formatted only for its error)
        if not isinstance(message, dict):
            raise invalid_type(f"messages[{i}]", "an object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"messages[{i}].role")
        if not isinstance(role, str):
            raise invalid_type(f"messages[{i}].role", "a string", role)
        if role not in ROLES:
            raise invalid_value(f"messages[{i}].role", role, ROLES)
        _check_content(i, message, role)
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise missing(f"messages[{i}].tool_call_id")


def _check_prompt(body: dict[str, Any], name: str) -> None:
    """``prompt`` / ``input``: a string, or an array of strings, token ids or token-id arrays."""
    value = body.get(name)
    if value is None:
        if name == "prompt" and name in body:
            return  # the spec makes prompt nullable: null is the default prompt, <|endoftext|>
        raise missing(name)
    if isinstance(value, str):
        return
    expected = "one of a string, array of strings, array of integers, or array of arrays of integers"
    if not isinstance(value, list):
        raise invalid_type(name, expected, value)
    if not value:
        raise empty_array(name)
    ok = (
        all(isinstance(v, str) for v in value)
        or all(_is("integer", v) for v in value)
        or all(isinstance(v, list) and all(_is("integer", t) for t in v) for v in value)
    )
    if not ok:
        raise invalid_type(name, expected, value)


def _check_stop(body: dict[str, Any]) -> None:
    stop = body.get("stop")
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list):
        raise invalid_type("stop", "one of a string or array of strings", stop)
    if len(stop) > MAX_STOP:
        raise bad_request(
            f"Invalid 'stop': array too long. Expected an array with maximum length {MAX_STOP}, "
            f"but got an array with length {len(stop)} instead.",
            "stop",
            "array_above_max_length",
        )
    for i, item in enumerate(stop):
        if not isinstance(item, str):
            raise invalid_type(f"stop[{i}]", "a string", item)


def _check_tools(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array", tools)
    if not tools:
        raise empty_array("tools")
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid_type(param, "an object", tool)
        if "type" not in tool:
            raise missing(f"{param}.type")
        if tool["type"] not in TOOL_TYPES:
            raise invalid_value(f"{param}.type", tool["type"], TOOL_TYPES)
        if tool["type"] == "custom":
            continue  # its shape is the schema's to check
        function = tool.get("function")
        if function is None:
            raise missing(f"{param}.function")
        if not isinstance(function, dict):
            raise invalid_type(f"{param}.function", "an object", function)
        name = function.get("name")
        if name is None:
            raise missing(f"{param}.function.name")
        if not isinstance(name, str) or not name:
            raise invalid_type(f"{param}.function.name", "a non-empty string", name)


def _check_tool_choice(body: dict[str, Any]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if body.get("tools") is None:
        raise bad_request(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            "tool_choice",
        )
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise invalid_value("tool_choice", choice, TOOL_CHOICES)
        return
    if not isinstance(choice, dict):
        raise invalid_type("tool_choice", "one of a string or object", choice)
    kind = choice.get("type")
    if kind == "allowed_tools":
        return
    if kind not in TOOL_TYPES:
        raise invalid_value("tool_choice.type", kind, (*TOOL_TYPES, "allowed_tools"))
    named = choice.get(kind)
    if not isinstance(named, dict) or not isinstance(named.get("name"), str):
        raise missing(f"tool_choice.{kind}.name")


def _check_pairs(body: dict[str, Any]) -> None:
    """Fields that only make sense together with another."""
    if body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        raise bad_request(
            "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
            "top_logprobs",
        )
    options = body.get("stream_options")
    if options is not None:
        if body.get("stream") is not True:
            raise bad_request(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
            )
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise invalid_type("stream_options.include_usage", "a boolean", usage)


# What each endpoint checks, in the order the first failure is reported: its required field, the
# known fields one by one, then these. Chat's are called by name in check_fields (compiled, a direct
# call, where one through this table is a generic call).
_STEPS: Final[dict[Endpoint, tuple[Callable[[dict[str, Any]], None], ...]]] = {
    "completions": (lambda b: _check_prompt(b, "prompt"), _check_stop, _check_pairs),
    "embeddings": (lambda b: _check_prompt(b, "input"),),
}


def check_fields(endpoint: Endpoint, body: dict[str, Any]) -> None:
    """Raise :class:`OpenAIError` for the first mistake the hand-written checks find."""
    model = body.get("model")
    if model is None or model == "":
        raise missing("model")
    if not isinstance(model, str):
        raise invalid_type("model", "a string", model)
    if endpoint == "chat":
        _check_messages(body)  # the required field comes first, as in the official API's answers
        _check_known(endpoint, body)
        _check_stop(body)
        _check_tools(body)
        _check_tool_choice(body)
        _check_pairs(body)
        return
    steps = _STEPS[endpoint]
    steps[0](body)
    _check_known(endpoint, body)
    for step in steps[1:]:
        step(body)


def _check_known(endpoint: Endpoint, body: dict[str, Any]) -> None:
    # Looked at from the body's side: a request sets a few of the documented fields, and one
    # lookup per key it has costs less than one per field. The failure reported is the first in
    # _FIELDS' order, so a body with one goes through that order.
    specs = _NAMED[endpoint]
    for key, value in body.items():
        spec = specs.get(key)
        if spec is not None and value is not None:
            try:
                _check_field(spec, value)
            except OpenAIError:
                break
    else:
        return
    for spec in _FIELDS_OF[endpoint]:
        value = body.get(spec.name)
        if value is not None:
            _check_field(spec, value)
