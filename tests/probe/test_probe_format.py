"""The probe's ``format.json-schema`` case (issue 15): the ``format-honoured`` expectation and the
``thinking: false`` steer. A failure names the parameter that had no effect; an answer cut while the
model was still reasoning (the backends apply the grammar after it) is "cannot tell", not a pass."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from oaishim.probe._cases import load_catalogue
from oaishim.probe._expect import EXPECTATIONS, Context
from oaishim.probe._steer import Steering, steer_body
from oaishim.probe._view import view_of

JSON = {"content-type": "application/json"}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def answer(content: str, reasoning: str | None = None, finish: str = "stop") -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}  # fmt: skip
    return view_of(orjson.dumps(body), request={}, status=200, headers=JSON)


def verdict(view: Any, schema: dict[str, Any] | None = SCHEMA) -> tuple[str, str]:
    params: dict[str, Any] = {"step": "plain"} if schema is None else {"step": "plain", "schema": schema}
    result = EXPECTATIONS["format-honoured"](params, {"plain": view}, Context("m"))
    return result.outcome, result.message


@pytest.mark.parametrize(
    ("view", "schema", "outcome", "says"),
    [
        (answer('{"city": "Paris"}'), SCHEMA, "pass", "matches the schema"),
        (answer('{"city": "Rome"}'), SCHEMA, "fail", "response_format json_schema had no effect"),
        (answer("Paris"), SCHEMA, "fail", "response_format json_schema had no effect"),
        (answer("", '{"city": "Paris"}'), SCHEMA, "fail", "the JSON came as reasoning"),
        (answer("[1]"), None, "fail", "response_format json_object had no effect"),
        (answer("{}"), None, "pass", "is a JSON object"),
        (answer("", "fallbackust fallbackust", finish="length"), SCHEMA, "skip", "still reasoning"),
        (answer('{"city"      ', finish="length"), SCHEMA, "skip", "cut by the token limit"),
    ],
)
def test_format_honoured(view: Any, schema: dict[str, Any] | None, outcome: str, says: str) -> None:
    got, message = verdict(view, schema)
    assert got == outcome and says in message, message


def test_thinking_off_only_where_the_server_reads_extension_fields() -> None:
    body = {"messages": [], "chat_template_kwargs": {"x": 1}}
    steered = steer_body(body, {"thinking": False}, Steering("gbnf"))
    assert steered["chat_template_kwargs"] == {"x": 1, "enable_thinking": False}
    assert steer_body(body, {"thinking": False}, Steering("prompt", tokenize="vllm"))["chat_template_kwargs"] == {
        "x": 1,
        "enable_thinking": False,
    }  # a reasoning parser can spoil text calibration; /tokenize still says the server is self-hosted
    assert steer_body(body, {"thinking": False}, Steering("prompt")) == body  # the official API refuses extras
    assert body["chat_template_kwargs"] == {"x": 1}


def test_the_case_is_in_the_catalogue() -> None:
    case = next(c for c in load_catalogue() if c.id == "format.json-schema")
    assert {s.name for s in case.steps} == {"plain", "stream", "object"}
    assert all(s.steer == {"thinking": False} and "response_format" in s.body for s in case.steps)
    assert [e.kind for e in case.expect] == ["format-honoured"] * 3
