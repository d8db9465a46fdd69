"""Tests for oaishim.transform.request (and the validation it runs first).

Expected bodies and error params are written by hand from openai-wire-format.md §1-2 (what the
official API accepts) and backend-quirks.md §8 (what each rewrite is for). Profiles are built here,
not taken from oaishim.profiles, so these tests pin the generic code only.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.check import Exchange, check
from oaishim.profiles._base import Profile
from oaishim.transform.request import PreparedRequest, prepare, rewrite
from oaishim.wire.errors import OpenAIError

BASE = Profile(name="test")  # reasoning_content in, max_tokens in, nothing rejected
USER = {"role": "user", "content": "Hi"}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "Once", **fields}


def refused(endpoint: str, body: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        prepare(endpoint, body, BASE)  # type: ignore[arg-type]
    err = info.value
    assert (err.status, err.type) == (400, "invalid_request_error")
    findings = check(Exchange(None, err.status, body=err.body()))
    assert [f for f in findings if f.severity == "error"] == []
    return err


# ---------------------------------------------------------------------------------------------------
# Validation: every refusal names its param

REFUSALS: list[tuple[str, str, Any, str | None, str | None]] = [
    # (label, endpoint, body, param, code)
    ("body is an array", "chat", [chat()], None, None),
    ("body is a string", "chat", "hello", None, None),
    ("no model", "chat", {"messages": [USER]}, "model", "missing_required_parameter"),
    ("empty model", "chat", chat(model=""), "model", "missing_required_parameter"),
    ("model not a string", "chat", chat(model=3), "model", "invalid_type"),
    ("no messages", "chat", {"model": "m"}, "messages", "missing_required_parameter"),
    ("messages null", "chat", {"model": "m", "messages": None}, "messages", "missing_required_parameter"),
    ("messages not a list", "chat", {"model": "m", "messages": {"role": "user"}}, "messages", "invalid_type"),
    ("messages empty", "chat", {"model": "m", "messages": []}, "messages", "empty_array"),
    ("message not an object", "chat", {"model": "m", "messages": [USER, "hi"]}, "messages[1]", "invalid_type"),
    (
        "message without role",
        "chat",
        {"model": "m", "messages": [USER, {"content": "x"}]},
        "messages[1].role",
        "missing_required_parameter",
    ),
    (
        "role not a string",
        "chat",
        {"model": "m", "messages": [{"role": 1, "content": "x"}]},
        "messages[0].role",
        "invalid_type",
    ),
    (
        "unknown role",
        "chat",
        {"model": "m", "messages": [USER, USER, USER, {"role": "robot", "content": "x"}]},
        "messages[3].role",
        "invalid_value",
    ),
    (
        "user without content",
        "chat",
        {"model": "m", "messages": [{"role": "user"}]},
        "messages[0].content",
        "missing_required_parameter",
    ),
    (
        "user content null",
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": None}]},
        "messages[0].content",
        "invalid_type",
    ),
    (
        "content a number",
        "chat",
        {"model": "m", "messages": [{"role": "system", "content": 5}]},
        "messages[0].content",
        "invalid_type",
    ),
    (
        "content empty list",
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": []}]},
        "messages[0].content",
        "empty_array",
    ),
    (
        "content part untyped",
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
        "messages[0].content[0].type",
        "missing_required_parameter",
    ),
    (
        "tool message without id",
        "chat",
        {"model": "m", "messages": [USER, {"role": "tool", "content": "42"}]},
        "messages[1].tool_call_id",
        "missing_required_parameter",
    ),
    ("n a string", "chat", chat(n="2"), "n", "invalid_type"),
    ("n a float", "chat", chat(n=1.5), "n", "invalid_type"),
    ("n a boolean", "chat", chat(n=True), "n", "invalid_type"),
    ("n zero", "chat", chat(n=0), "n", "integer_below_min_value"),
    ("n 129", "chat", chat(n=129), "n", "integer_above_max_value"),
    ("temperature a string", "chat", chat(temperature="hot"), "temperature", "invalid_type"),
    ("temperature negative", "chat", chat(temperature=-0.1), "temperature", "decimal_below_min_value"),
    ("temperature above 2", "chat", chat(temperature=2.5), "temperature", "decimal_above_max_value"),
    ("top_p above 1", "chat", chat(top_p=1.01), "top_p", "decimal_above_max_value"),
    ("top_p negative", "completions", completion(top_p=-1), "top_p", "decimal_below_min_value"),
    ("presence_penalty above 2", "chat", chat(presence_penalty=3), "presence_penalty", "decimal_above_max_value"),
    ("max_tokens zero (chat)", "chat", chat(max_tokens=0), "max_tokens", "integer_below_min_value"),
    ("max_tokens a string", "chat", chat(max_tokens="10"), "max_tokens", "invalid_type"),
    ("max_tokens a float", "completions", completion(max_tokens=10.5), "max_tokens", "invalid_type"),
    (
        "max_tokens negative (completions)",
        "completions",
        completion(max_tokens=-1),
        "max_tokens",
        "integer_below_min_value",
    ),
    (
        "max_completion_tokens zero",
        "chat",
        chat(max_completion_tokens=0),
        "max_completion_tokens",
        "integer_below_min_value",
    ),
    (
        "max_completion_tokens a string",
        "chat",
        chat(max_completion_tokens="a"),
        "max_completion_tokens",
        "invalid_type",
    ),
    ("stream a string", "chat", chat(stream="true"), "stream", "invalid_type"),
    ("stream an int", "completions", completion(stream=1), "stream", "invalid_type"),
    ("stop a number", "chat", chat(stop=5), "stop", "invalid_type"),
    ("stop five strings", "chat", chat(stop=["a", "b", "c", "d", "e"]), "stop", "array_above_max_length"),
    ("stop with a number", "chat", chat(stop=["a", 1]), "stop[1]", "invalid_type"),
    ("chat logprobs an int", "chat", chat(logprobs=1), "logprobs", "invalid_type"),
    ("completions logprobs a bool", "completions", completion(logprobs=True), "logprobs", "invalid_type"),
    ("completions logprobs 6", "completions", completion(logprobs=6), "logprobs", "integer_above_max_value"),
    ("completions logprobs negative", "completions", completion(logprobs=-1), "logprobs", "integer_below_min_value"),
    ("top_logprobs without logprobs", "chat", chat(top_logprobs=2), "top_logprobs", None),
    ("top_logprobs with logprobs false", "chat", chat(logprobs=False, top_logprobs=2), "top_logprobs", None),
    ("top_logprobs 21", "chat", chat(logprobs=True, top_logprobs=21), "top_logprobs", "integer_above_max_value"),
    ("top_logprobs negative", "chat", chat(logprobs=True, top_logprobs=-1), "top_logprobs", "integer_below_min_value"),
    ("top_logprobs a string", "chat", chat(logprobs=True, top_logprobs="3"), "top_logprobs", "invalid_type"),
    ("tool_choice without tools", "chat", chat(tool_choice="auto"), "tool_choice", None),
    (
        "tool_choice named without tools",
        "chat",
        chat(tool_choice={"type": "function", "function": {"name": "f"}}),
        "tool_choice",
        None,
    ),
    ("tools not a list", "chat", chat(tools={"type": "function"}), "tools", "invalid_type"),
    ("tools empty", "chat", chat(tools=[]), "tools", "empty_array"),
    ("tool not an object", "chat", chat(tools=["f"]), "tools[0]", "invalid_type"),
    (
        "tool without type",
        "chat",
        chat(tools=[{"function": {"name": "f"}}]),
        "tools[0].type",
        "missing_required_parameter",
    ),
    (
        "tool of another type",
        "chat",
        chat(tools=[{"type": "retrieval", "function": {"name": "f"}}]),
        "tools[0].type",
        "invalid_value",
    ),
    (
        "tool without function",
        "chat",
        chat(tools=[{"type": "function"}]),
        "tools[0].function",
        "missing_required_parameter",
    ),
    (
        "tool function not an object",
        "chat",
        chat(tools=[{"type": "function", "function": "f"}]),
        "tools[0].function",
        "invalid_type",
    ),
    (
        "second tool without name",
        "chat",
        chat(
            tools=[
                {"type": "function", "function": {"name": "f"}},
                {"type": "function", "function": {"parameters": {}}},
            ]
        ),
        "tools[1].function.name",
        "missing_required_parameter",
    ),
    (
        "tool name empty",
        "chat",
        chat(tools=[{"type": "function", "function": {"name": ""}}]),
        "tools[0].function.name",
        "invalid_type",
    ),
    (
        "tool_choice unknown string",
        "chat",
        chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="always"),
        "tool_choice",
        "invalid_value",
    ),
    (
        "tool_choice a number",
        "chat",
        chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice=1),
        "tool_choice",
        "invalid_type",
    ),
    (
        "tool_choice named without a name",
        "chat",
        chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function"}),
        "tool_choice.function.name",
        "missing_required_parameter",
    ),
    ("stream_options without stream", "chat", chat(stream_options={"include_usage": True}), "stream_options", None),
    ("stream_options with stream false", "chat", chat(stream=False, stream_options={}), "stream_options", None),
    (
        "stream_options without stream (completions)",
        "completions",
        completion(stream_options={"include_usage": False}),
        "stream_options",
        None,
    ),
    ("stream_options not an object", "chat", chat(stream=True, stream_options=True), "stream_options", "invalid_type"),
    (
        "include_usage a string",
        "chat",
        chat(stream=True, stream_options={"include_usage": "yes"}),
        "stream_options.include_usage",
        "invalid_type",
    ),
    ("completions without prompt", "completions", {"model": "m"}, "prompt", "missing_required_parameter"),
    ("prompt a number", "completions", completion(prompt=5), "prompt", "invalid_type"),
    ("prompt empty list", "completions", completion(prompt=[]), "prompt", "empty_array"),
    ("prompt mixed list", "completions", completion(prompt=["a", 1]), "prompt", "invalid_type"),
    ("embeddings without input", "embeddings", {"model": "m"}, "input", "missing_required_parameter"),
    ("input an object", "embeddings", {"model": "m", "input": {"text": "x"}}, "input", "invalid_type"),
    (
        "dimensions zero",
        "embeddings",
        {"model": "m", "input": "x", "dimensions": 0},
        "dimensions",
        "integer_below_min_value",
    ),
]


@pytest.mark.parametrize(("label", "endpoint", "body", "param", "code"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals(label: str, endpoint: str, body: Any, param: str | None, code: str | None) -> None:
    err = refused(endpoint, body)
    assert (err.param, err.code) == (param, code)


def test_wording_matches_the_official_api() -> None:
    assert (
        refused("chat", chat(n="2")).message == "Invalid type for 'n': expected an integer, but got a string instead."
    )
    assert refused("chat", {"model": "m"}).message == "Missing required parameter: 'messages'."
    assert refused("chat", chat(temperature=3)).message == (
        "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead."
    )
    assert refused("chat", chat(n=0)).message == (
        "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead."
    )
    assert refused("chat", {"model": "m", "messages": []}).message == (
        "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."
    )
    assert refused("chat", {"model": "m", "messages": [{"role": "robot", "content": "x"}]}).message == (
        "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
    )


def test_the_required_field_is_reported_before_other_mistakes() -> None:
    assert refused("chat", {"model": "m", "n": "x"}).param == "messages"


ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    (
        "every optional field null",
        "chat",
        chat(
            n=None,
            temperature=None,
            top_p=None,
            max_tokens=None,
            stop=None,
            stream=None,
            stream_options=None,
            logprobs=None,
            top_logprobs=None,
            tools=None,
            tool_choice=None,
        ),
    ),
    ("bounds included", "chat", chat(n=128, temperature=2, top_p=0, logprobs=True, top_logprobs=20, max_tokens=1)),
    ("lower bounds included", "chat", chat(n=1, temperature=0, top_p=1, logprobs=True, top_logprobs=0)),
    ("four stops", "chat", chat(stop=["a", "b", "c", "d"])),
    ("stop a string", "chat", chat(stop="\n")),
    (
        "assistant with only tool calls",
        "chat",
        {
            "model": "m",
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c", "content": "1"},
            ],
        },
    ),
    ("assistant content null", "chat", {"model": "m", "messages": [USER, {"role": "assistant", "content": None}]}),
    (
        "content parts",
        "chat",
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "data:"}}],
                }
            ],
        },
    ),
    (
        "every role",
        "chat",
        {
            "model": "m",
            "messages": [
                {"role": r, "content": "x", "tool_call_id": "c", "name": "f"}
                for r in ("developer", "system", "user", "assistant", "tool", "function")
            ],
        },
    ),
    (
        "tool_choice none with tools",
        "chat",
        chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none"),
    ),
    (
        "tool_choice named",
        "chat",
        chat(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
        ),
    ),
    ("stream_options with stream", "chat", chat(stream=True, stream_options={"include_usage": True})),
    ("completions max_tokens 0 and logprobs 5", "completions", completion(max_tokens=0, logprobs=5, echo=True)),
    ("prompt token ids", "completions", completion(prompt=[1, 2, 3])),
    ("prompt token id lists", "completions", completion(prompt=[[1, 2], [3]])),
    ("prompt strings", "completions", completion(prompt=["a", "b"])),
    ("embeddings list input", "embeddings", {"model": "m", "input": ["a", "b"], "dimensions": 8}),
    ("vendor fields are not judged", "chat", chat(top_k="anything", chat_template_kwargs=5, n_probs=[1])),
]


@pytest.mark.parametrize(("label", "endpoint", "body"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(label: str, endpoint: str, body: dict[str, Any]) -> None:
    assert isinstance(prepare(endpoint, body, BASE), PreparedRequest)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Rewrites


def upstream(body: dict[str, Any], profile: Profile = BASE, endpoint: str = "chat", **kw: Any) -> dict[str, Any]:
    return prepare(endpoint, body, profile, **kw).body  # type: ignore[arg-type]


DEV = replace(BASE, developer_to_system=True)


def test_plain_request_goes_up_unchanged() -> None:
    body = chat(temperature=0.2, max_tokens=5, seed=1)
    assert upstream(body) == body


def test_developer_merged_into_the_leading_system_message() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Answer in French."},
            USER,
        ],
    }
    assert upstream(body, DEV)["messages"] == [
        {"role": "system", "content": "Be brief.\n\nAnswer in French."},
        USER,
    ]


def test_developer_becomes_a_new_system_message_first() -> None:
    body = {
        "model": "m",
        "messages": [
            USER,
            {"role": "assistant", "content": "Hello"},
            {"role": "developer", "content": "Now be formal."},
            {"role": "user", "content": "Again"},
        ],
    }
    assert upstream(body, DEV)["messages"] == [
        {"role": "system", "content": "Now be formal."},
        USER,
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Again"},
    ]


def test_several_developer_messages_keep_their_order_around_the_system_message() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": "one"},
            {"role": "system", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "2b"}]},
            {"role": "developer", "content": [{"type": "text", "text": "three"}]},
            USER,
        ],
    }
    assert upstream(body, DEV)["messages"] == [{"role": "system", "content": "one\n\ntwo\n2b\n\nthree"}, USER]


def test_developer_kept_when_the_backend_reads_it() -> None:
    body = {"model": "m", "messages": [{"role": "developer", "content": "x"}, USER]}
    assert upstream(body)["messages"] == body["messages"]


@pytest.mark.parametrize(
    ("reasoning_in", "history", "expected"),
    [
        ("reasoning", {"reasoning_content": "think"}, {"reasoning": "think"}),
        ("reasoning_content", {"reasoning": "think"}, {"reasoning_content": "think"}),
        ("reasoning_content", {"reasoning_content": "think"}, {"reasoning_content": "think"}),
        ("drop", {"reasoning_content": "a", "reasoning": "b"}, {}),
        ("reasoning", {"reasoning_content": "old", "reasoning": "new"}, {"reasoning": "new"}),
        ("reasoning_content", {"reasoning_content": None, "reasoning": "b"}, {"reasoning_content": "b"}),
        ("reasoning", {"reasoning": None}, {}),
    ],
)
def test_history_reasoning(reasoning_in: Any, history: dict[str, Any], expected: dict[str, Any]) -> None:
    body = {"model": "m", "messages": [USER, {"role": "assistant", "content": "ok", **history}, USER]}
    sent = upstream(body, replace(BASE, reasoning_in=reasoning_in))
    assert sent["messages"][1] == {"role": "assistant", "content": "ok", **expected}


def test_reasoning_on_other_roles_is_left_alone() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x", "reasoning_content": "?"}]}
    assert upstream(body, replace(BASE, reasoning_in="drop"))["messages"] == body["messages"]


@pytest.mark.parametrize("empty", [None, []])
def test_empty_tool_calls_removed(empty: Any) -> None:
    body = {"model": "m", "messages": [USER, {"role": "assistant", "content": "ok", "tool_calls": empty}, USER]}
    assert upstream(body)["messages"][1] == {"role": "assistant", "content": "ok"}


def history_call(**call: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "22"},
        ],
    }


def test_type_added_to_history_tool_calls_where_required() -> None:
    body = history_call(id="c1", function={"name": "f", "arguments": "{}"})
    sent = upstream(body, replace(BASE, tool_call_type_required=True))
    assert sent["messages"][1]["tool_calls"] == [
        {"id": "c1", "function": {"name": "f", "arguments": "{}"}, "type": "function"}
    ]
    assert upstream(body)["messages"][1]["tool_calls"] == [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]


def test_tool_call_arguments_object_becomes_a_json_string() -> None:
    body = history_call(id="c1", type="function", function={"name": "f", "arguments": {"city": "Paris", "n": 2}})
    call = upstream(body)["messages"][1]["tool_calls"][0]
    assert call == {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"city":"Paris","n":2}'}}


def test_tool_call_string_arguments_untouched() -> None:
    body = history_call(id="c1", type="function", function={"name": "f", "arguments": '{"city": "Paris"}'})
    assert upstream(body)["messages"][1] is body["messages"][1]


@pytest.mark.parametrize(
    ("max_tokens_in", "given", "expected"),
    [
        ("max_tokens", {"max_completion_tokens": 7}, {"max_tokens": 7}),
        ("max_tokens", {"max_tokens": 7}, {"max_tokens": 7}),
        ("max_tokens", {"max_tokens": 9, "max_completion_tokens": 7}, {"max_tokens": 7}),
        ("max_completion_tokens", {"max_tokens": 7}, {"max_completion_tokens": 7}),
        ("max_completion_tokens", {"max_tokens": 9, "max_completion_tokens": 7}, {"max_completion_tokens": 7}),
        ("both", {"max_tokens": 7}, {"max_tokens": 7}),
        ("both", {"max_completion_tokens": 7, "max_tokens": None}, {"max_completion_tokens": 7}),
        ("both", {"max_tokens": 9, "max_completion_tokens": 7}, {"max_completion_tokens": 7}),
        ("max_tokens", {"max_completion_tokens": None, "max_tokens": 9}, {"max_tokens": 9}),
        ("both", {}, {}),
    ],
)
def test_output_limit_names(max_tokens_in: Any, given: dict[str, Any], expected: dict[str, Any]) -> None:
    sent = upstream(chat(**given), replace(BASE, max_tokens_in=max_tokens_in))
    assert {k: v for k, v in sent.items() if k in ("max_tokens", "max_completion_tokens")} == expected
    assert prepare("chat", chat(**given), BASE).max_tokens == (
        expected.get("max_tokens") or expected.get("max_completion_tokens")
    )


def test_completions_get_the_official_default_limit() -> None:
    prepared = prepare("completions", completion(), replace(BASE, max_tokens_in="max_completion_tokens"))
    assert prepared.body["max_tokens"] == 16
    assert "max_completion_tokens" not in prepared.body
    assert prepared.max_tokens == 16
    assert prepare("completions", completion(max_tokens=100), BASE).body["max_tokens"] == 100
    assert prepare("completions", completion(max_tokens=None), BASE).body["max_tokens"] == 16


@pytest.mark.parametrize(
    ("flag", "options", "sent", "include_usage"),
    [
        # (profile.usage_on_empty_stream_options, client's stream_options, upstream's, client's wish)
        (False, None, None, False),
        (False, {}, None, False),
        (False, {"include_usage": True}, {"include_usage": True}, True),
        (False, {"include_usage": False}, {"include_usage": False}, False),
        (True, None, {"include_usage": False}, False),
        (True, {}, {"include_usage": False}, False),
        (True, {"include_usage": True}, {"include_usage": True}, True),
        (False, {"include_usage": True, "include_obfuscation": False}, {"include_usage": True}, True),
        (
            False,
            {"include_usage": True, "continuous_usage_stats": True},
            {"include_usage": True, "continuous_usage_stats": True},
            True,
        ),
    ],
)
def test_stream_options(flag: bool, options: Any, sent: Any, include_usage: bool) -> None:
    body = chat(stream=True) if options is None else chat(stream=True, stream_options=options)
    prepared = prepare("chat", body, replace(BASE, usage_on_empty_stream_options=flag))
    assert prepared.body.get("stream_options") == sent
    assert prepared.include_usage is include_usage
    assert prepared.stream is True


def test_obfuscation_option_is_reported_dropped() -> None:
    prepared = prepare("chat", chat(stream=True, stream_options={"include_obfuscation": False}), BASE)
    assert prepared.dropped == ["stream_options.include_obfuscation"]


def test_no_stream_options_without_a_stream() -> None:
    prepared = prepare("chat", chat(stream_options=None), replace(BASE, usage_on_empty_stream_options=True))
    assert "stream_options" not in prepared.body
    assert (prepared.stream, prepared.include_usage) == (False, False)


def test_model_replaced_for_the_upstream() -> None:
    prepared = prepare("chat", chat(model="gpt-4o"), BASE, upstream_model="Qwen/Qwen3-8B")
    assert prepared.body["model"] == "Qwen/Qwen3-8B"
    assert prepared.client_model == "gpt-4o"


def test_rejected_fields_dropped_and_listed() -> None:
    profile = replace(BASE, rejects=frozenset({"store", "metadata", "service_tier"}))
    prepared = prepare("chat", chat(store=True, metadata={"a": "b"}, seed=3), profile)
    assert prepared.body == chat(seed=3)
    assert prepared.dropped == ["store", "metadata"]


def test_fields_the_gateway_added_are_not_listed_when_rejected() -> None:
    profile = replace(BASE, usage_on_empty_stream_options=True, rejects=frozenset({"stream_options"}))
    prepared = prepare("chat", chat(stream=True), profile)
    assert "stream_options" not in prepared.body
    assert prepared.dropped == []


def test_null_defaults_are_not_sent() -> None:
    sent = upstream(chat(temperature=None, stop=None, tools=None, tool_choice=None, seed=None, top_k=None))
    assert sent == chat(top_k=None)  # top_k is a vendor field: its null is the backend's business


def test_backend_fields_pass_untouched() -> None:
    extras = {
        "chat_template_kwargs": {"enable_thinking": False},
        "skip_special_tokens": False,
        "structured_outputs": {"regex": "a+"},
        "grammar": 'root ::= "x"',
        "include_stop_str_in_output": True,
    }
    sent = upstream(chat(**extras))
    assert {k: sent[k] for k in extras} == extras
    assert sent["chat_template_kwargs"] is extras["chat_template_kwargs"]


def test_hooks_run_last_on_the_rewritten_body() -> None:
    seen: list[dict[str, Any]] = []

    def add_top_k(body: dict[str, Any]) -> None:
        seen.append(copy.deepcopy(body))
        body["top_k"] = 20

    def upper_first_message(body: dict[str, Any]) -> None:
        body["messages"][0]["content"] = body["messages"][0]["content"].upper()

    profile = replace(
        BASE,
        max_tokens_in="max_completion_tokens",
        request_hooks=(("top_k", add_top_k), ("upper", upper_first_message)),
    )
    body = chat(max_tokens=5)
    sent = upstream(body, profile, upstream_model="up")
    assert seen == [{"model": "up", "messages": [USER], "max_completion_tokens": 5}]
    assert sent == {
        "model": "up",
        "messages": [{"role": "user", "content": "HI"}],
        "max_completion_tokens": 5,
        "top_k": 20,
    }
    assert body == chat(max_tokens=5)  # the hook edited nested data; the caller's is untouched


# ---------------------------------------------------------------------------------------------------
# What the response side is told


def test_prepared_chat_fields() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = chat(
        n=3,
        logprobs=True,
        top_logprobs=4,
        tools=tools,
        tool_choice="required",
        stop="END",
        include_stop_str_in_output=True,
        max_completion_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
    prepared = prepare("chat", body, BASE)
    assert (prepared.endpoint, prepared.client_model, prepared.stream, prepared.include_usage) == (
        "chat",
        "m",
        True,
        True,
    )
    assert (prepared.n, prepared.logprobs, prepared.top_logprobs) == (3, True, 4)
    assert (prepared.tools_offered, prepared.tool_choice, prepared.stop) == (True, "required", ["END"])
    assert (prepared.include_stop_str_in_output, prepared.max_tokens, prepared.dropped) == (True, 50, [])


def test_prepared_defaults() -> None:
    prepared = prepare("chat", chat(), BASE)
    assert (prepared.n, prepared.logprobs, prepared.top_logprobs, prepared.max_tokens) == (1, False, None, None)
    assert (prepared.tools_offered, prepared.tool_choice, prepared.stop) == (False, "none", [])
    assert (prepared.stream, prepared.include_usage, prepared.include_stop_str_in_output) == (False, False, False)


def test_tool_choice_defaults_to_auto_with_tools() -> None:
    prepared = prepare("chat", chat(tools=[{"type": "function", "function": {"name": "f"}}]), BASE)
    assert (prepared.tools_offered, prepared.tool_choice) == (True, "auto")
    named = {"type": "function", "function": {"name": "f"}}
    prepared = prepare("chat", chat(tools=[named], tool_choice=named), BASE)
    assert prepared.tool_choice == named


def test_prepared_completions_fields() -> None:
    prepared = prepare("completions", completion(logprobs=2, stop=["a", "b"], n=2), BASE)
    assert (prepared.endpoint, prepared.logprobs, prepared.top_logprobs, prepared.stop, prepared.n) == (
        "completions",
        2,
        None,
        ["a", "b"],
        2,
    )
    assert prepare("completions", completion(), BASE).logprobs is None
    assert prepare("completions", completion(logprobs=0), BASE).logprobs == 0


def test_prepared_embeddings() -> None:
    body = {"model": "m", "input": "x", "encoding_format": "float"}
    prepared = prepare("embeddings", body, replace(BASE, usage_on_empty_stream_options=True), upstream_model="e")
    assert prepared.body == {"model": "e", "input": "x", "encoding_format": "float"}
    assert (prepared.endpoint, prepared.stream, prepared.max_tokens) == ("embeddings", False, None)


# ---------------------------------------------------------------------------------------------------
# The caller's body is never changed, and only rewritten messages are copied

EVERYTHING = replace(
    BASE,
    developer_to_system=True,
    reasoning_in="reasoning",
    max_tokens_in="both",
    rejects=frozenset({"store"}),
    usage_on_empty_stream_options=True,
    tool_call_type_required=True,
)


def busy_body() -> dict[str, Any]:
    return {
        "model": "m",
        "store": True,
        "max_completion_tokens": 9,
        "stream": True,
        "stream_options": {"include_obfuscation": True},
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {"role": "developer", "content": "dev"},
            USER,
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "r",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": [1, 2]}}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done", "tool_calls": None},
            {"role": "user", "content": "bye"},
        ],
    }


def test_caller_body_is_never_changed() -> None:
    body = busy_body()
    before = copy.deepcopy(body)
    prepared = prepare("chat", body, EVERYTHING)
    assert body == before
    assert prepared.body == {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "system", "content": "sys\n\ndev"},
            USER,
            {
                "role": "assistant",
                "content": None,
                "reasoning": "r",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a":[1,2]}'}, "type": "function"}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "bye"},
        ],
        "max_completion_tokens": 9,  # the backend reads both names: it gets the client's own
        "stream_options": {"include_usage": False},
    }
    assert prepared.dropped == ["stream_options.include_obfuscation", "store"]


def test_untouched_messages_are_shared_not_copied() -> None:
    body = busy_body()
    sent = prepare("chat", body, EVERYTHING).body["messages"]
    assert sent[1] is body["messages"][2]  # user
    assert sent[3] is body["messages"][4]  # tool
    assert sent[5] is body["messages"][6]  # user


def test_unchanged_message_list_is_passed_as_is() -> None:
    body = chat()
    assert prepare("chat", body, EVERYTHING).body["messages"] is body["messages"]


message_strategy = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"]), "content": st.text(max_size=5)},
    optional={
        "reasoning_content": st.none() | st.text(max_size=3),
        "reasoning": st.none() | st.text(max_size=3),
        "tool_calls": st.none()
        | st.lists(
            st.fixed_dictionaries(
                {
                    "id": st.text(max_size=3),
                    "function": st.fixed_dictionaries(
                        {
                            "name": st.just("f"),
                            # int64: wider integers are refused (tests/transform/test_validate_limits.py)
                            "arguments": st.dictionaries(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1))
                            | st.text(max_size=5),
                        }
                    ),
                },
                optional={"type": st.just("function")},
            ),
            max_size=2,
        ),
    },
)
profiles = st.builds(
    lambda dev, reasoning, mt, usage, typed: replace(
        BASE,
        developer_to_system=dev,
        reasoning_in=reasoning,
        max_tokens_in=mt,
        usage_on_empty_stream_options=usage,
        tool_call_type_required=typed,
    ),
    st.booleans(),
    st.sampled_from(["reasoning", "reasoning_content", "drop"]),
    st.sampled_from(["max_tokens", "max_completion_tokens", "both"]),
    st.booleans(),
    st.booleans(),
)


@examples(200)
@given(messages=st.lists(message_strategy, min_size=1, max_size=6), profile=profiles, stream=st.booleans())
def test_never_mutates_and_never_leaves_developer_behind(
    messages: list[dict[str, Any]], profile: Profile, stream: bool
) -> None:
    body = {"model": "m", "messages": messages, "max_tokens": 3, "stream": stream}
    before = copy.deepcopy(body)
    sent = prepare("chat", body, profile).body
    assert body == before
    roles = [m["role"] for m in sent["messages"]]
    if profile.developer_to_system:
        assert "developer" not in roles
        given_roles = [m["role"] for m in messages]
        others = [r for r in given_roles if r != "developer"]
        if "developer" in given_roles:
            assert roles[0] == "system"
            # merged into a leading system message, or one new message in front
            assert len(roles) == len(others) + (0 if others[:1] == ["system"] else 1)
        else:
            assert roles == given_roles
    else:
        assert roles == [m["role"] for m in messages]
    for m in sent["messages"]:
        if m["role"] == "assistant":
            assert m.get("tool_calls", ["x"]) not in (None, [])
            for call in m.get("tool_calls", []):
                assert isinstance(call["function"]["arguments"], str)
            kept = {k for k in ("reasoning", "reasoning_content") if k in m}
            assert kept <= ({profile.reasoning_in} - {"drop"})


# -- the history's rewrite, in one pass ------------------------------------------------------------

_CALL = {"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}
_MESSAGE_PARTS = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
        "content": st.sampled_from(["x", ""]),
    },
    optional={
        "reasoning_content": st.sampled_from(["r", None]),
        "reasoning": st.sampled_from(["q", None]),
        "tool_calls": st.sampled_from(
            [None, [], [_CALL], [{"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]]
        ),
    },
)


def _rewritten_as_before(messages: list[Any], profile: Profile) -> list[Any]:
    """The rewrite as it was written before it took one pass: every message looked at, then the
    developer messages merged, and the result kept only where an element changed."""
    from oaishim.transform.request import _merge_developer, _rewrite_assistant

    out = [_rewrite_assistant(m, profile) if m.get("role") == "assistant" else m for m in messages]
    if profile.developer_to_system:
        out = _merge_developer(out)
    changed = len(out) != len(messages) or any(a is not b for a, b in zip(out, messages, strict=False))
    return out if changed else messages


@given(
    st.lists(_MESSAGE_PARTS, min_size=1, max_size=6),
    st.booleans(),
    st.sampled_from(["reasoning", "reasoning_content", "drop"]),
    st.booleans(),
)
@examples(400)
def test_the_history_is_rewritten_as_before(
    messages: list[dict[str, Any]], merge: bool, reasoning_in: Any, type_required: bool
) -> None:
    profile = Profile(
        name="t", developer_to_system=merge, reasoning_in=reasoning_in, tool_call_type_required=type_required
    )
    body = {"model": "m", "messages": copy.deepcopy(messages)}
    expected = _rewritten_as_before(copy.deepcopy(messages), profile)
    prepared = rewrite("chat", body, profile)  # (the rewrite alone: validation would refuse some of these)
    assert prepared.body["messages"] == expected
    assert body["messages"] == messages  # the client's own are never edited
