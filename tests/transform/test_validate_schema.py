"""Values the official API refuses that the hand-written checks let through, now caught by its schema.

Each refusal here passed before the schema was checked. It names the field as the official API does (``param`` paths like ``messages[0].content[0].text``)
with its wording and code; each acceptance is a request the official API takes (false rejects would
break clients that work against it; these pin the schema's fix-ups). Expected values are written from the official request schema
(openai-wire-format.md §1-2) and the official error wording, not read from the bundle.
"""

from __future__ import annotations

from typing import Any

import pytest

from oaishim.check import Exchange, check
from oaishim.transform.validate import validate
from oaishim.wire.errors import OpenAIError

USER = {"role": "user", "content": "Hi"}
F = {"type": "function", "function": {"name": "get_weather"}}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


def with_message(message: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [message]}


def refused(endpoint: str, body: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        validate(endpoint, body)  # type: ignore[arg-type]
    err = info.value
    assert (err.status, err.type) == (400, "invalid_request_error")
    findings = check(Exchange(None, err.status, body=err.body()))
    assert [f for f in findings if f.severity == "error"] == []
    return err


REFUSED: list[tuple[str, str, dict[str, Any], str, str]] = [
    # (label, endpoint, body, param, code)
    ("audio a boolean", "chat", chat(audio=True), "audio", "invalid_type"),
    ("metadata an array", "chat", chat(metadata=[]), "metadata", "invalid_type"),
    ("metadata value a number", "chat", chat(metadata={"a": 1}), "metadata.a", "invalid_type"),
    ("store a number", "chat", chat(store=0), "store", "invalid_type"),
    ("reasoning_effort an array", "chat", chat(reasoning_effort=[]), "reasoning_effort", "invalid_type"),
    ("reasoning_effort unknown", "chat", chat(reasoning_effort="huge"), "reasoning_effort", "invalid_value"),
    ("service_tier a number", "chat", chat(service_tier=5), "service_tier", "invalid_type"),
    ("verbosity unknown", "chat", chat(verbosity="loud"), "verbosity", "invalid_value"),
    ("modalities with video", "chat", chat(modalities=["text", "video"]), "modalities[1]", "invalid_value"),
    ("logit_bias value a string", "chat", chat(logit_bias={"50256": "x"}), "logit_bias.50256", "invalid_type"),
    ("text part without text", "chat", with_message({"role": "user", "content": [{"type": "text"}]}),
     "messages[0].content[0].text", "missing_required_parameter"),
    ("part type a number", "chat", with_message({"role": "user", "content": [{"type": 5}]}),
     "messages[0].content[0].type", "invalid_type"),
    ("unknown part type", "chat", with_message({"role": "user", "content": [{"type": "video"}]}),
     "messages[0].content[0].type", "invalid_value"),
    ("image part in a system message", "chat",
     with_message({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}),
     "messages[0].content[0].type", "invalid_value"),
    ("image_url without url", "chat",
     with_message({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}),
     "messages[0].content[0].image_url.url", "missing_required_parameter"),
    ("function message without name", "chat", with_message({"role": "function", "content": "x"}),
     "messages[0].name", "missing_required_parameter"),
    ("assistant audio id a number", "chat", {"model": "m", "messages": [USER, {"role": "assistant", "audio": {"id": 5}}]},
     "messages[1].audio.id", "invalid_type"),
    ("parameters a string", "chat", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
     "tools[0].function.parameters", "invalid_type"),
    ("function name with a space", "chat", chat(tools=[{"type": "function", "function": {"name": "get weather"}}]),
     "tools[0].function.name", "invalid_value"),
    ("function name with a dot", "chat", chat(tools=[{"type": "function", "function": {"name": "a.b"}}]),
     "tools[0].function.name", "invalid_value"),
    ("function name of 65 characters", "chat", chat(tools=[{"type": "function", "function": {"name": "a" * 65}}]),
     "tools[0].function.name", "string_above_max_length"),
    ("duplicate function names", "chat", chat(tools=[F, F]), "tools[1].function.name", "invalid_value"),
    ("custom tool without its object", "chat", chat(tools=[{"type": "custom"}]), "tools[0].custom",
     "missing_required_parameter"),
    ("json_schema without a schema", "chat", chat(response_format={"type": "json_schema"}),
     "response_format.json_schema", "missing_required_parameter"),
    ("json_schema without a name", "chat", chat(response_format={"type": "json_schema", "json_schema": {}}),
     "response_format.json_schema.name", "missing_required_parameter"),
    ("unknown response_format", "chat", chat(response_format={"type": "xml"}), "response_format.type", "invalid_value"),
    ("stream_options unknown key", "chat", chat(stream=True, stream_options={"include_usge": True}),
     "stream_options.include_usge", "unknown_parameter"),
    ("seed beyond int64", "chat", chat(seed=2**63), "seed", "integer_above_max_value"),
    ("seed an integer-valued float beyond int64", "chat", chat(seed=1e19), "seed", "integer_above_max_value"),
    ("legacy seed beyond int64", "completions", {"model": "m", "prompt": "x", "seed": -(2**63) - 1}, "seed",
     "integer_below_min_value"),
    ("tool_choice names a tool not offered", "chat",
     chat(tools=[F], tool_choice={"type": "function", "function": {"name": "get_time"}}),
     "tool_choice.function.name", "invalid_value"),
    ("tool_choice names a custom tool not offered", "chat",
     chat(tools=[F], tool_choice={"type": "custom", "custom": {"name": "get_weather"}}),
     "tool_choice.custom.name", "invalid_value"),
    ("prediction without content", "chat", chat(prediction={"type": "content"}), "prediction.content",
     "missing_required_parameter"),
    ("web_search_options an array", "chat", chat(web_search_options=[]), "web_search_options", "invalid_type"),
    ("prompt token id list empty", "completions", {"model": "m", "prompt": [[]]}, "prompt[0]", "empty_array"),
    ("encoding_format unknown", "embeddings", {"model": "m", "input": "x", "encoding_format": "hex"},
     "encoding_format", "invalid_value"),
    ("input of 2,049 strings", "embeddings", {"model": "m", "input": ["x"] * 2049}, "input", "array_above_max_length"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "endpoint", "body", "param", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(label: str, endpoint: str, body: dict[str, Any], param: str, code: str) -> None:
    err = refused(endpoint, body)
    assert (err.param, err.code) == (param, code)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            with_message({"role": "user", "content": 5}),
            "Invalid type for 'messages[0].content': expected one of a string or array of objects, "
            "but got an integer instead.",
        ),
        (chat(audio=True), "Invalid type for 'audio': expected an object, but got a boolean instead."),
        (
            chat(service_tier="turbo"),
            "Invalid value: 'turbo'. Supported values are: 'auto', 'default', 'flex', 'scale', 'priority', and 'fast'.",
        ),
        (
            with_message({"role": "user", "content": [{"type": "video"}]}),
            "Invalid value: 'video'. Supported values are: 'text', 'image_url', 'input_audio', 'file', "
            "'video_url', 'audio_url', and 'image_embeds'.",
        ),
        (
            {"model": "m", "messages": [USER, {"role": "assistant", "content": [{"type": "image_url"}]}]},
            "Invalid value: 'image_url'. Supported values are: 'text' and 'refusal'.",
        ),
        # One supported value used to print "Supported values are: , and 'function'."
        (
            chat(tools=[{"type": "retrieval"}]),
            "Invalid value: 'retrieval'. Supported values are: 'function' and 'custom'.",
        ),
        (chat(prediction={"type": "diff", "content": "x"}), "Invalid value: 'diff'. Supported values are: 'content'."),
        (chat(stream=True, stream_options={"x": 1}), "Unknown parameter: 'stream_options.x'."),
        (
            chat(tools=[{"type": "function", "function": {"name": "get weather"}}]),
            "Invalid 'tools[0].function.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
        ),
        (
            chat(tools=[{"type": "function", "function": {"name": "a" * 70}}]),
            "Invalid 'tools[0].function.name': string too long. "
            "Expected a string with maximum length 64, but got a string with length 70 instead.",
        ),
        (
            chat(response_format={"type": "json_schema"}),
            "Missing required parameter: 'response_format.json_schema'.",
        ),
    ],
    ids=[
        "union type",
        "object type",
        "enum",
        "part type",
        "assistant part type",
        "two values",
        "one value",
        "unknown key",
        "pattern",
        "too long",
        "missing",
    ],
)
def test_wording(body: dict[str, Any], message: str) -> None:
    assert refused("chat", body).message == message


ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    *(
        (f"vLLM's {part} part", "chat", with_message({"role": "user", "content": [{"type": part, part: {"url": "u"}}]}))
        for part in ("video_url", "audio_url", "image_embeds")
    ),
    ("custom tool", "chat", chat(tools=[{"type": "custom", "custom": {"name": "code_exec"}}])),
    ("custom tool with a grammar", "chat", chat(tools=[{"type": "custom", "custom": {
        "name": "sql", "format": {"type": "grammar", "grammar": {"definition": "start: 'x'", "syntax": "lark"}}}}])),
    ("tool_choice naming a custom tool", "chat", chat(tools=[F, {"type": "custom", "custom": {"name": "c"}}],
                                                     tool_choice={"type": "custom", "custom": {"name": "c"}})),
    ("tool_choice naming a function", "chat", chat(tools=[F], tool_choice={"type": "function",
                                                                           "function": {"name": "get_weather"}})),
    ("allowed_tools", "chat", chat(tools=[F], tool_choice={"type": "allowed_tools", "allowed_tools": {
        "mode": "auto", "tools": [{"type": "function", "function": {"name": "get_weather"}}]}})),
    ("function name of 64 characters", "chat", chat(tools=[{"type": "function", "function": {"name": "a-_9" * 16}}])),
    ("prompt null", "completions", {"model": "m", "prompt": None}),
    ("1e308 where there is no maximum", "chat", chat(max_completion_tokens=1e308)),
    ("integer-valued float", "chat", chat(n=2.0, max_tokens=16.0)),
    ("negative zero", "chat", chat(temperature=-0.0, top_p=-0.0, presence_penalty=-0.0)),
    ("null for every optional field the spec does not mark nullable", "chat", chat(
        top_logprobs=None, parallel_tool_calls=None, user=None, web_search_options=None, prompt_cache_key=None)),
    ("null inside nested optional fields", "chat", {"model": "m", "messages": [
        {"role": "user", "content": "x", "name": None},
        {"role": "assistant", "content": "y", "tool_calls": None, "refusal": None},
    ], "stream": True, "stream_options": {"include_usage": None}}),
    ("every documented field", "chat", chat(
        store=False, metadata={"k": "v"}, reasoning_effort="low", service_tier="flex", verbosity="high",
        modalities=["text"], logit_bias={"50256": -100}, seed=-(2**63), stop="\n", response_format={"type": "json_object"},
        prediction={"type": "content", "content": "x"}, web_search_options={}, safety_identifier="u", user="u",
        prompt_cache_key="k", parallel_tool_calls=False, audio={"voice": "alloy", "format": "mp3"})),
    ("json_schema response format", "chat", chat(response_format={
        "type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": True}})),
    ("content parts of each kind", "chat", with_message({"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}}]})),
    ("history tool call without type, arguments an object", "chat", {"model": "m", "messages": [USER,
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1"}]}),
    ("vLLM's continuous_usage_stats", "chat", chat(stream=True, stream_options={
        "include_usage": True, "continuous_usage_stats": True})),
    ("vendor fields anywhere", "chat", {"model": "m", "messages": [{**USER, "x_vendor": [1]}], "top_k": 5,
                                        "chat_template_kwargs": {"enable_thinking": False}}),
    ("vendor field in embeddings", "embeddings", {"model": "m", "input": "x", "truncate_prompt_tokens": 5}),
    ("embeddings token arrays", "embeddings", {"model": "m", "input": [[1, 2], [3]], "encoding_format": "base64"}),
    ("legacy completion with every field", "completions", {"model": "m", "prompt": ["a", "b"], "best_of": 2,
        "echo": True, "logprobs": 5, "max_tokens": 0, "suffix": "z", "seed": 1, "stop": ["x"], "n": 2}),
]  # fmt: skip


@pytest.mark.parametrize(("label", "endpoint", "body"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(label: str, endpoint: str, body: dict[str, Any]) -> None:
    assert validate(endpoint, body) is body  # type: ignore[arg-type]
