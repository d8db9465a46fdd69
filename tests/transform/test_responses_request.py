"""Responses requests -> chat requests: the mapping table, the refusals, and sealed reasoning."""

from __future__ import annotations

from typing import Any

import pytest

from oaishim.transform.responses import open_reasoning, responses_to_chat, seal_reasoning
from oaishim.transform.validate import validate
from oaishim.wire.errors import OpenAIError

KEY = b"server-key-0123456789abcdef012345"


def chat(**body: Any) -> dict[str, Any]:
    out, _ = responses_to_chat({"model": "m", **body}, key=KEY)
    validate("chat", out)  # what the mapper makes is a valid official chat request
    return out


def messages(input: Any, **body: Any) -> list[dict[str, Any]]:
    return chat(input=input, **body)["messages"]


def test_string_input_and_instructions() -> None:
    out = chat(input="Hello", instructions="Be brief.")
    assert out["messages"] == [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    assert "stream" not in out


def test_stream_always_asks_for_usage() -> None:
    out = chat(input="x", stream=True)
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}


def test_message_items_and_parts() -> None:
    got = messages(
        [
            {"role": "system", "content": "sys"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "It is a cat."}]},
            {"role": "user", "content": "thanks"},
        ]
    )
    assert got == [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "It is a cat."},
        {"role": "user", "content": "thanks"},
    ]


def test_an_assistant_turn_folds_into_one_message() -> None:
    got = messages(
        [
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "two calls"}],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "w", "arguments": '{"c":"Paris"}'},
            {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "w", "arguments": '{"c":"Rome"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rain"}]},
        ],
        tools=[{"type": "function", "name": "w", "parameters": {"type": "object"}}],
    )
    assert got[1] == {
        "role": "assistant",
        "reasoning_content": "two calls",
        "content": "Checking.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "w", "arguments": '{"c":"Paris"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "w", "arguments": '{"c":"Rome"}'}},
        ],
    }
    assert got[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
    ]


def test_text_after_tool_calls_starts_a_new_assistant_message() -> None:
    got = messages(
        [
            {"type": "function_call", "call_id": "call_a", "name": "w", "arguments": "{}"},
            {"role": "assistant", "content": "after"},
            {"role": "user", "content": "ok"},
        ],
        tools=[{"type": "function", "name": "w"}],
    )
    assert [m["role"] for m in got] == ["assistant", "assistant", "user"]
    assert got[0]["content"] is None and got[1] == {"role": "assistant", "content": "after"}


def test_history_goes_between_instructions_and_input() -> None:
    history = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
    out, _ = responses_to_chat({"model": "m", "instructions": "I", "input": "3"}, history=history)
    assert [m["content"] for m in out["messages"]] == ["I", "1", "2", "3"]


@pytest.mark.parametrize(
    ("request_fields", "chat_fields"),
    [
        ({"max_output_tokens": 100}, {"max_completion_tokens": 100}),
        ({"temperature": 0.2, "top_p": 0.5}, {"temperature": 0.2, "top_p": 0.5}),
        ({"reasoning": {"effort": "high", "summary": "auto"}}, {"reasoning_effort": "high"}),
        ({"top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
        ({"include": ["message.output_text.logprobs"]}, {"logprobs": True}),
        ({"safety_identifier": "abc"}, {"user": "abc"}),
        ({"user": "u1"}, {"user": "u1"}),
        ({"text": {"format": {"type": "json_object"}}}, {"response_format": {"type": "json_object"}}),
        (
            {"text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}}},
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": True},
                }
            },
        ),
        ({"text": {"format": {"type": "text"}, "verbosity": "low"}}, {}),
        ({"store": False, "metadata": {"a": "b"}, "truncation": "auto", "previous_response_id": "resp_1"}, {}),
    ],
)
def test_settings(request_fields: dict[str, Any], chat_fields: dict[str, Any]) -> None:
    out = chat(input="x", **request_fields)
    got = {k: v for k, v in out.items() if k not in ("model", "messages")}
    assert got == chat_fields


def test_tools_and_tool_choice() -> None:
    tools = [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        {"type": "function", "name": "g"},
    ]
    out = chat(input="x", tools=tools, tool_choice={"type": "function", "name": "g"}, parallel_tool_calls=False)
    assert out["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        },
        {"type": "function", "function": {"name": "g"}},
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "g"}}
    assert out["parallel_tool_calls"] is False
    for choice in ("auto", "none", "required"):
        assert chat(input="x", tools=tools, tool_choice=choice)["tool_choice"] == choice
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}
    out = chat(input="x", tools=tools, tool_choice=allowed)
    assert out["tool_choice"] == "required" and [t["function"]["name"] for t in out["tools"]] == ["f"]


def test_custom_tool_is_a_one_string_function_upstream() -> None:
    out, info = responses_to_chat(
        {
            "model": "m",
            "tools": [{"type": "custom", "name": "apply", "description": "patch"}],
            "input": [
                {"type": "custom_tool_call", "call_id": "call_1", "name": "apply", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "call_1", "output": "done"},
            ],
        }
    )
    fn = out["tools"][0]["function"]
    assert fn["name"] == "apply" and fn["parameters"]["required"] == ["input"]
    assert out["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"input":"*** Begin Patch"}'
    assert info.custom_tools == frozenset({"apply"})
    assert info.tools == [{"type": "custom", "name": "apply", "description": "patch"}]


# -- refusals ---------------------------------------------------------------------------------------


def refused(body: dict[str, Any], **kw: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as err:
        responses_to_chat(body, **kw)
    assert err.value.status == 400 and err.value.type == "invalid_request_error"
    return err.value


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m", "input": "x", "foo": 1}, "foo", "unknown_parameter"),
        ({"input": "x"}, "model", "missing_required_parameter"),
        ({"model": "m"}, "input", "missing_required_parameter"),
        ({"model": 3, "input": "x"}, "model", "invalid_type"),
        ({"model": "m", "input": 3}, "input", "invalid_type"),
        ({"model": "m", "input": []}, "input", "empty_array"),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature", "decimal_above_max_value"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "invalid_type"),
        ({"model": "m", "input": "x", "top_p": -1}, "top_p", "decimal_below_min_value"),
        ({"model": "m", "input": "x", "max_output_tokens": 10}, "max_output_tokens", "integer_below_min_value"),
        ({"model": "m", "input": "x", "top_logprobs": 21}, "top_logprobs", "integer_above_max_value"),
        ({"model": "m", "input": "x", "store": "yes"}, "store", "invalid_type"),
        ({"model": "m", "input": "x", "truncation": "middle"}, "truncation", "invalid_value"),
        ({"model": "m", "input": "x", "include": ["everything"]}, "include[0]", "invalid_value"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort", "invalid_value"),
        ({"model": "m", "input": "x", "metadata": {"a": 1}}, "metadata.a", "invalid_type"),
        ({"model": "m", "input": "x", "stream_options": {}}, "stream_options", "invalid_value"),
        ({"model": "m", "input": "x", "background": True}, "background", "unsupported_parameter"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation", "unsupported_parameter"),
        ({"model": "m", "input": "x", "prompt": {"id": "p"}}, "prompt", "unsupported_parameter"),
        (
            {"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]},
            "input[0].role",
            "invalid_value",
        ),
        (
            {"model": "m", "input": [{"type": "message", "role": "user"}]},
            "input[0].content",
            "missing_required_parameter",
        ),
        ({"model": "m", "input": [{"type": "bogus"}]}, "input[0].type", "invalid_value"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "unsupported_value"),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
            "input[0].content[0]",
            "unsupported_value",
        ),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
        ({"model": "m", "input": "x", "tools": [{"type": "banana", "name": "b"}]}, "tools[0].type", "invalid_value"),
        (
            {
                "model": "m",
                "input": "x",
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"},
            },
            "tool_choice.name",
            "tool_choice_not_found",
        ),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}},
            "text.format.name",
            "missing_required_parameter",
        ),
        ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type", "invalid_value"),
    ],
)
def test_refusals(body: dict[str, Any], param: str, code: str) -> None:
    err = refused(body)
    assert (err.param, err.code) == (param, code), err.message


def test_unknown_parameter_wording() -> None:
    assert refused({"model": "m", "input": "x", "foo": 1}).message == "Unknown parameter: 'foo'."


HOSTED = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "mcp",
    "image_generation",
    "local_shell",
)


@pytest.mark.parametrize("kind", HOSTED)
def test_hosted_tools_are_echoed_but_not_offered_upstream(kind: str) -> None:
    # Codex CLI sends {"type": "web_search", "external_web_access": false} on every turn: refusing it failed them all
    hosted = {"type": kind, "external_web_access": False}
    out, info = responses_to_chat({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}, hosted]})
    validate("chat", out)
    assert [t["function"]["name"] for t in out["tools"]] == ["f"]
    assert info.tools[1] == hosted
    only, _ = responses_to_chat({"model": "m", "input": "x", "tools": [hosted], "tool_choice": "auto"})
    assert "tools" not in only and "tool_choice" not in only


@pytest.mark.parametrize("kind", HOSTED)
def test_a_request_that_forces_a_hosted_tool_is_refused_by_name(kind: str) -> None:
    base = {"model": "m", "input": "x", "tools": [{"type": kind}]}
    for choice, param in (
        ({"type": kind}, "tool_choice.type"),
        ("required", "tool_choice"),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": kind}]}, "tool_choice.tools[0].type"),
    ):
        err = refused({**base, "tool_choice": choice})
        assert err.param == param and f"'{kind}'" in err.message and err.code == "unsupported_value"
    # with a function tool beside it, "required" can be met
    out, _ = responses_to_chat(
        {**base, "tools": [{"type": kind}, {"type": "function", "name": "f"}], "tool_choice": "required"}
    )
    assert out["tool_choice"] == "required" and [t["function"]["name"] for t in out["tools"]] == ["f"]


NAMESPACE = {
    "type": "namespace",
    "name": "agents",
    "description": "sub-agents",
    "tools": [
        {"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {}}, "strict": False},
        {"type": "function", "name": "close", "description": "close one"},
        {"type": "custom", "name": "note"},
    ],
}


def test_namespace_members_are_tools_of_their_own_upstream_and_calls_come_back_by_namespace() -> None:
    tools = [{"type": "function", "name": "close"}, NAMESPACE]
    out, info = responses_to_chat(
        {
            "model": "m",
            "tools": tools,
            "input": [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "namespace": "agents", "name": "close", "arguments": "{}"},
                {"type": "function_call", "call_id": "c3", "name": "close", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
        },
        key=KEY,
    )
    validate("chat", out)
    names = [t["function"]["name"] for t in out["tools"]]
    # the top-level 'close' keeps its name; the member that shares it is qualified
    assert names == ["close", "spawn", "agents__close", "note"]
    assert out["tools"][2]["function"]["description"] == "close one"
    assert out["tools"][3]["function"]["parameters"]["required"] == ["input"]
    calls = [c["function"]["name"] for c in out["messages"][1]["tool_calls"]]
    assert calls == ["spawn", "agents__close", "close"]
    assert info.namespaced == {
        "spawn": ("agents", "spawn"),
        "agents__close": ("agents", "close"),
        "note": ("agents", "note"),
    }
    assert info.custom_tools == frozenset({"note"})
    assert info.tools[1] == NAMESPACE  # echoed as sent


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        ({"type": "namespace", "name": "n", "description": "d"}, "tools[0].tools", "missing_required_parameter"),
        ({"type": "namespace", "name": "n", "description": "d", "tools": []}, "tools[0].tools", "empty_array"),
        (
            {"type": "namespace", "name": "n", "description": "d", "tools": [{"type": "web_search"}]},
            "tools[0].tools[0].type",
            "invalid_value",
        ),
        (
            {"type": "namespace", "name": "n", "description": "d", "tools": [{"type": "function"}]},
            "tools[0].tools[0].name",
            "missing_required_parameter",
        ),
    ],
)
def test_bad_namespaces_are_refused(tool: dict[str, Any], param: str, code: str) -> None:
    err = refused({"model": "m", "input": "x", "tools": [tool]})
    assert (err.param, err.code) == (param, code), err.message


def test_client_metadata_is_accepted_and_not_sent_upstream() -> None:
    # not in the published spec, but the API takes it: Codex CLI sends its turn metadata in it on every request
    out = chat(input="x", client_metadata={"turn_id": "t1", "x-codex-turn-metadata": "{}"})
    assert "client_metadata" not in out
    err = refused({"model": "m", "input": "x", "client_metadata": {"turn": 1}})
    assert (err.param, err.code) == ("client_metadata.turn", "invalid_type")
    err = refused({"model": "m", "input": "x", "client_metadata": "x"})
    assert (err.param, err.code) == ("client_metadata", "invalid_type")


# -- encrypted_content ------------------------------------------------------------------------------


def reasoning_item(value: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "input": [{"type": "reasoning", "summary": [], "encrypted_content": value}, {"role": "user", "content": "go"}],
    }


def test_sealed_reasoning_round_trips() -> None:
    for text in ("", "plain", 'naïve ünïcode 思考 \n"quoted"', "x" * 5000):
        sealed = seal_reasoning(KEY, text)
        assert open_reasoning(KEY, sealed, "p") == text
        assert text not in sealed or not text
    out, _ = responses_to_chat(reasoning_item(seal_reasoning(KEY, "why")), key=KEY)
    assert out["messages"][0] == {"role": "assistant", "reasoning_content": "why", "content": None}


def _flip(value: str, at: int) -> str:
    c = value[at]
    return value[:at] + ("A" if c != "A" else "B") + value[at + 1 :]


def test_tampered_or_foreign_encrypted_content_is_refused() -> None:
    sealed = seal_reasoning(KEY, "the model's own thoughts")
    payload_at = sealed.index(".") + 3
    bad = [
        _flip(sealed, payload_at),  # payload changed
        _flip(sealed, len(sealed) - 2),  # MAC changed
        seal_reasoning(b"another key", "the model's own thoughts"),
        "gAAAAABpPDIUph8czEXzDePCV2lJ27wm7Tsb",  # another provider's blob
        "rsn1..",
        "rsn1.ü.ü",
        7,
    ]
    for value in bad:
        err = refused(reasoning_item(value), key=KEY)
        assert err.param == "input[0].encrypted_content" and err.code == "invalid_encrypted_content"
    err = refused(reasoning_item(sealed))  # a server without the key cannot vouch for it
    assert err.code == "invalid_encrypted_content"


def test_input_items_get_ids() -> None:
    _, info = responses_to_chat(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "message", "id": "msg_keep", "role": "assistant", "content": "yo"},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            ],
            "tools": [{"type": "function", "name": "f"}],
        }
    )
    items = info.input_items
    assert items[0]["id"].startswith("msg_") and items[1]["id"] == "msg_keep" and items[2]["id"].startswith("fc_")
    assert items[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert items[1]["content"] == [{"type": "output_text", "text": "yo", "annotations": []}]
    assert all(i["status"] == "completed" for i in items)
    assert len({i["id"] for i in items}) == 3
