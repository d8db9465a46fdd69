"""Refuse, before any backend sees it, a request the official API would refuse.

Backends are lenient in different ways: llama.cpp reads a mistyped field as its default (L-2), vLLM,
SGLang and Ollama ignore unknown or odd values, TensorRT-LLM answers with pydantic's wording. A
client developed against any of them would break on the real API, and one developed against the real
API gets errors in the backend's words. So the gateway checks what the official API checks, answers
400 with ``param`` naming the field (``messages[3].role``), and uses the official wording and codes
where we know them ("Invalid type for 'n': expected an integer, but got a string instead.",
``invalid_type``, ``integer_above_max_value``, ``missing_required_parameter``, ``empty_array``).

``null`` is accepted for every optional field: the spec marks them nullable, meaning "the default".
Fields the official API does not define are left alone here; they are the backends' extensions.
Checks run in a fixed order and the first failure is reported, as the official API reports one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from oaishim.wire.errors import OpenAIError, bad_request

Endpoint = Literal["chat", "completions", "embeddings"]
Kind = Literal["integer", "number", "boolean", "string", "object"]

ROLES = ("system", "assistant", "user", "function", "tool", "developer")
TOOL_CHOICES = ("none", "auto", "required")
MAX_STOP = 4

_CHAT: frozenset[Endpoint] = frozenset({"chat"})
_COMPLETIONS: frozenset[Endpoint] = frozenset({"completions"})
_GENERATE: frozenset[Endpoint] = frozenset({"chat", "completions"})
_EMBEDDINGS: frozenset[Endpoint] = frozenset({"embeddings"})


@dataclass(frozen=True, slots=True)
class _Field:
    """A scalar field: its JSON type and range, and the endpoints that define it (SPEC §1, §2)."""

    name: str
    kind: Kind
    endpoints: frozenset[Endpoint]
    minimum: float | None = None
    maximum: float | None = None


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

_EXPECTED: dict[Kind, str] = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "string": "a string",
    "object": "an object",
}


def json_type(value: Any) -> str:
    """How the official messages name a JSON value's type ("but got a string instead")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _is(kind: Kind, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):  # JSON true is not a number, though Python's bool is an int
        return False
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number":
        return isinstance(value, (int, float))
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, Mapping)


def invalid_type(param: str, expected: str, value: Any) -> OpenAIError:
    got = json_type(value)
    return bad_request(
        f"Invalid type for '{param}': expected {expected}, but got {got} instead.", param, "invalid_type"
    )


def missing(param: str) -> OpenAIError:
    return bad_request(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def empty_array(param: str) -> OpenAIError:
    return bad_request(
        f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        param,
        "empty_array",
    )


def invalid_value(param: str, value: Any, allowed: tuple[str, ...]) -> OpenAIError:
    listed = ", ".join(f"'{a}'" for a in allowed[:-1]) + f", and '{allowed[-1]}'"
    return bad_request(f"Invalid value: '{value}'. Supported values are: {listed}.", param, "invalid_value")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _out_of_range(spec: _Field, value: float, *, below: bool) -> OpenAIError:
    word = "integer" if spec.kind == "integer" else "decimal"
    bound = spec.minimum if below else spec.maximum
    where, sign, code = ("below minimum", ">=", "below_min") if below else ("above maximum", "<=", "above_max")
    return bad_request(
        f"Invalid '{spec.name}': {word} {where} value. Expected a value {sign} {_number(bound or 0)}, "
        f"but got {value} instead.",
        spec.name,
        f"{word}_{code}_value",
    )


def _check_field(spec: _Field, value: Any) -> None:
    if not _is(spec.kind, value):
        raise invalid_type(spec.name, _EXPECTED[spec.kind], value)
    if spec.minimum is not None and value < spec.minimum:
        raise _out_of_range(spec, value, below=True)
    if spec.maximum is not None and value > spec.maximum:
        raise _out_of_range(spec, value, below=False)


def _check_content(param: str, message: Mapping[str, Any], role: str) -> None:
    if "content" not in message:
        if role != "assistant":  # an assistant message may carry only tool calls
            raise missing(f"{param}.content")
        return
    content = message["content"]
    if content is None and role in ("assistant", "function"):
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid_type(f"{param}.content", "one of a string or array of objects", content)
    if not content:
        raise empty_array(f"{param}.content")
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise invalid_type(f"{param}.content[{j}]", "an object", part)
        if not isinstance(part.get("type"), str):
            raise missing(f"{param}.content[{j}].type")


def _check_messages(body: Mapping[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise invalid_type("messages", "an array", messages)
    if not messages:
        raise empty_array("messages")
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise invalid_type(param, "an object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"{param}.role")
        if not isinstance(role, str):
            raise invalid_type(f"{param}.role", "a string", role)
        if role not in ROLES:
            raise invalid_value(f"{param}.role", role, ROLES)
        _check_content(param, message, role)
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise missing(f"{param}.tool_call_id")


def _check_prompt(body: Mapping[str, Any], name: str) -> None:
    """``prompt`` / ``input``: a string, or an array of strings, token ids or token-id arrays."""
    value = body.get(name)
    if value is None:
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


def _check_stop(body: Mapping[str, Any]) -> None:
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


def _check_tools(body: Mapping[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array", tools)
    if not tools:
        raise empty_array("tools")
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise invalid_type(param, "an object", tool)
        if "type" not in tool:
            raise missing(f"{param}.type")
        if tool["type"] != "function":
            raise invalid_value(f"{param}.type", tool["type"], ("function",))
        function = tool.get("function")
        if function is None:
            raise missing(f"{param}.function")
        if not isinstance(function, Mapping):
            raise invalid_type(f"{param}.function", "an object", function)
        name = function.get("name")
        if name is None:
            raise missing(f"{param}.function.name")
        if not isinstance(name, str) or not name:
            raise invalid_type(f"{param}.function.name", "a non-empty string", name)


def _check_tool_choice(body: Mapping[str, Any]) -> None:
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
    if not isinstance(choice, Mapping):
        raise invalid_type("tool_choice", "one of a string or object", choice)
    kind = choice.get("type")
    if kind == "allowed_tools":
        return
    if kind != "function":
        raise invalid_value("tool_choice.type", kind, ("function", "allowed_tools"))
    function = choice.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise missing("tool_choice.function.name")


def _check_pairs(body: Mapping[str, Any]) -> None:
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


# What each endpoint checks, in the order the first failure is reported.
_STEPS: dict[Endpoint, tuple[Callable[[Mapping[str, Any]], None], ...]] = {
    "chat": (_check_messages, _check_stop, _check_tools, _check_tool_choice, _check_pairs),
    "completions": (lambda b: _check_prompt(b, "prompt"), _check_stop, _check_pairs),
    "embeddings": (lambda b: _check_prompt(b, "input"),),
}


def validate(endpoint: Endpoint, body: Any) -> Mapping[str, Any]:
    """Raise :class:`OpenAIError` (400) for what the official API refuses; return the body."""
    if not isinstance(body, Mapping):
        raise bad_request(f"Invalid type for request body: expected an object, but got {json_type(body)} instead.")
    model = body.get("model")
    if model is None or model == "":
        raise missing("model")
    if not isinstance(model, str):
        raise invalid_type("model", "a string", model)
    steps = _STEPS[endpoint]
    steps[0](body)  # the required field comes first, as in the official API's answers
    for spec in _FIELDS:
        if endpoint in spec.endpoints and body.get(spec.name) is not None:
            _check_field(spec, body[spec.name])
    for step in steps[1:]:
        step(body)
    return body
