"""``response_format`` json_object / json_schema: what each profile sends upstream, and the answer checked.

Request side: the schema goes where each backend's grammar reads it (profile data, docs/backend-quirks.md
V-32, S-28, T-21, L-23, O-19). Response side: JSON a backend filed as reasoning (content empty) becomes
the content; an answer that breaks the format is noted (kind: not_json, not_object, schema), or, under
the error policy, answered with a 502 ``response_format_violation``. Streams are cut at every offset of
the model's text (and every pair of offsets): the client's content, reasoning, repairs and violations
must not depend on where the deltas were cut, and must be what the plain answer of the same text gives.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from typing import Any

import orjson
import pytest

from oaishim.profiles import get_profile
from oaishim.profiles._base import Profile
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe, plain_answer
from oaishim.transform.plan import response_context
from oaishim.transform.request import prepare
from oaishim.wire.accumulate import accumulate_chat
from oaishim.wire.errors import OpenAIError

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris"]}},
    "required": ["city"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
LOOSE = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": False}}
JSON_OBJECT = {"type": "json_object"}
ANSWER = '{"city": "Paris"}'


class Settings:
    text_repair = True
    thinking_open = False
    special_tokens = None
    display_cleanup = True
    reasoning_field = "reasoning_content"
    keep_extensions = False


def body(response_format: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "A city?"}],
        "response_format": response_format,
        **more,
    }


def erroring(profile: Profile) -> Profile:
    return dataclasses.replace(
        profile, structured_output=dataclasses.replace(profile.structured_output, violation="error")
    )


def context(response_format: dict[str, Any], profile: Profile | None = None, **more: Any) -> ResponseContext:
    prepared = prepare("chat", body(response_format, **more), profile or get_profile("vllm@0.32"))
    return response_context("chat", prepared, Settings())


# -- request side -------------------------------------------------------------------------------------


def upstream(profile: str, response_format: dict[str, Any]) -> dict[str, Any]:
    sent = prepare("chat", body(response_format), get_profile(profile)).body
    keys = ("response_format", "guided_json", "json_schema")
    return {k: sent[k] for k in keys if k in sent}


@pytest.mark.parametrize(
    ("profile", "response_format", "sent"),
    [
        # V-32: the official object from 0.6.5; the schema as guided_json before
        ("vllm@0.32", JSON_SCHEMA, {"response_format": JSON_SCHEMA}),
        ("vllm@0.32", JSON_OBJECT, {"response_format": JSON_OBJECT}),
        ("vllm@0.6.5", JSON_SCHEMA, {"response_format": JSON_SCHEMA}),
        ("vllm@0", JSON_SCHEMA, {"guided_json": SCHEMA}),
        ("vllm@0", JSON_OBJECT, {"response_format": JSON_OBJECT}),
        # L-23: json_object alone is "any JSON value" there; the old builds get the native key (L-1)
        ("llamacpp@b9174", JSON_OBJECT, {"response_format": {"type": "json_object", "schema": {"type": "object"}}}),
        ("llamacpp@b9174", JSON_SCHEMA, {"response_format": JSON_SCHEMA}),
        ("llamacpp@0", JSON_SCHEMA, {"json_schema": SCHEMA}),
        ("llamacpp@0", JSON_OBJECT, {"json_schema": {"type": "object"}}),
        # S-28: strict false may be left unconstrained
        ("sglang", LOOSE, {"response_format": JSON_SCHEMA}),
        ("sglang", JSON_OBJECT, {"response_format": JSON_OBJECT}),
        # T-21, O-19: the official object is read as it is
        ("trtllm@1.4", JSON_SCHEMA, {"response_format": JSON_SCHEMA}),
        ("trtllm@0", JSON_OBJECT, {"response_format": JSON_OBJECT}),
        ("ollama", LOOSE, {"response_format": LOOSE}),
        ("openai", LOOSE, {"response_format": LOOSE}),
        ("generic", JSON_SCHEMA, {"response_format": JSON_SCHEMA}),
    ],
)
def test_each_backend_is_sent_the_format_where_its_grammar_reads_it(
    profile: str, response_format: dict[str, Any], sent: dict[str, Any]
) -> None:
    assert upstream(profile, response_format) == sent


def test_text_format_is_no_format_and_the_callers_body_is_untouched() -> None:
    client = body({"type": "text"})
    prepared = prepare("chat", client, get_profile("vllm@0.32"))
    assert prepared.output_format is None and prepared.body["response_format"] == {"type": "text"}
    client = body(JSON_SCHEMA)
    prepare("chat", client, get_profile("vllm@0.32"))
    assert client["response_format"] == JSON_SCHEMA


def test_an_invalid_schema_is_a_400_naming_response_format() -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}
    with pytest.raises(OpenAIError) as raised:
        prepare("chat", body(bad), get_profile("vllm@0.32"))
    assert (raised.value.status, raised.value.param) == (400, "response_format")


def test_a_remote_ref_is_never_fetched() -> None:
    remote = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://127.0.0.1:9/s.json"}}}
    with pytest.raises(OpenAIError) as raised:
        prepare("chat", body(remote), get_profile("vllm@0.32"))
    assert raised.value.param == "response_format" and "does not fetch" in raised.value.message


# -- plain answers --------------------------------------------------------------------------------------


def plain(ctx: ResponseContext, content: str | None, reasoning: str | None = None, finish: str = "stop") -> Any:
    message = {"role": "assistant", "content": content, "reasoning": reasoning}
    raw = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip
    return plain_answer("chat", 200, orjson.dumps(raw), ctx)["choices"][0]


def test_plain_json_filed_as_reasoning_becomes_the_content() -> None:
    ctx = context(JSON_SCHEMA)
    choice = plain(ctx, None, "\n" + ANSWER + "\n")
    assert choice["message"]["content"] == ANSWER and "reasoning_content" not in choice["message"]
    assert ctx.repairs == {"json_from_reasoning"} and ctx.violations == []


def test_plain_reasoning_that_is_not_json_stays_reasoning_and_the_empty_answer_is_reported() -> None:
    ctx = context(JSON_SCHEMA)
    choice = plain(ctx, "", "I should name a city.")
    assert choice["message"]["reasoning_content"] == "I should name a city."
    assert [(i, kind) for i, kind, _ in ctx.violations] == [(0, "not_json")]


@pytest.mark.parametrize(
    ("response_format", "content", "kind"),
    [
        (JSON_SCHEMA, '{"city": "Rome"}', "schema"),
        (JSON_SCHEMA, '{"city": "Paris", "x": 1}', "schema"),
        (JSON_SCHEMA, "Paris", "not_json"),
        (JSON_OBJECT, "[1, 2]", "not_object"),
        (JSON_OBJECT, '{"a": NaN}', "not_json"),
        (JSON_OBJECT, '{"a": 123456789012345678901234567890}', None),  # JSON, beyond 64 bits
        (JSON_SCHEMA, ANSWER, None),
        (LOOSE, '{"city": "Rome"}', "schema"),
    ],
)
def test_plain_answers_are_checked(response_format: dict[str, Any], content: str, kind: str | None) -> None:
    ctx = context(response_format)
    assert plain(ctx, content)["message"]["content"] == content  # the answer as the model gave it
    assert [k for _, k, _ in ctx.violations] == ([kind] if kind else [])


def test_a_cut_answer_is_not_a_violation() -> None:
    ctx = context(JSON_SCHEMA)
    assert plain(ctx, '{"city": "Pa', finish="length")["finish_reason"] == "length"
    assert ctx.violations == []


def test_the_error_policy_answers_a_strict_violation_with_an_openai_error() -> None:
    ctx = context(JSON_SCHEMA, erroring(get_profile("vllm@0.32")))
    with pytest.raises(OpenAIError) as raised:
        plain(ctx, '{"city": "Rome"}')
    error = raised.value
    assert (error.status, error.type, error.param, error.code) == (
        502,
        "server_error",
        "response_format",
        "response_format_violation",
    )
    assert "/city" in error.message or "city" in error.message
    # a non-strict schema is a wish: reported, never an error
    loose = context(LOOSE, erroring(get_profile("vllm@0.32")))
    assert plain(loose, '{"city": "Rome"}')["message"]["content"] == '{"city": "Rome"}'
    assert [k for _, k, _ in loose.violations] == ["schema"]


# -- streams, cut everywhere ---------------------------------------------------------------------------


def events(deltas: Iterable[dict[str, Any]], finish: str = "stop") -> bytes:
    def one(delta: dict[str, Any], fin: str | None = None) -> bytes:
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}  # fmt: skip
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    return b"".join(
        [one({"role": "assistant", "content": ""}), *map(one, deltas), one({}, finish), b"data: [DONE]\n\n"]
    )


def streamed(ctx: ResponseContext, raw: bytes) -> tuple[dict[str, Any], bytes]:
    pipe = StreamPipe(ctx)
    out = pipe.feed(raw) + pipe.flush()
    chunks = [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    return (accumulate_chat(c for c in chunks if "choices" in c) if chunks else {}), out


def cuts(text: str) -> Iterable[list[str]]:
    """``text`` whole, cut at every offset, and at every pair of offsets."""
    yield [text]
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    for i, j in itertools.combinations(range(1, len(text)), 2):
        yield [text[:i], text[i:j], text[j:]]


def client_view(result: dict[str, Any]) -> tuple[str | None, str]:
    message = result["choices"][0]["message"]
    return message.get("content"), message.get("reasoning_content") or ""


SCENARIOS = [
    # (name, response_format, [(field, text)...], content, reasoning, repairs, violations)
    ("json in reasoning", JSON_SCHEMA, [("reasoning", " " + ANSWER)], ANSWER, "", {"json_from_reasoning"}, []),
    ("json in reasoning, whitespace content", JSON_SCHEMA, [("content", "\n\n"), ("reasoning", ANSWER)],
     ANSWER, "", {"json_from_reasoning"}, []),
    ("thinking, then the answer", JSON_SCHEMA, [("reasoning", "{hmm} Paris."), ("content", ANSWER)],
     ANSWER, "{hmm} Paris.", set(), []),
    ("unclosed think in content (gateway split)", JSON_OBJECT, [("content", "<think>" + ANSWER)],
     ANSWER, "", {"json_from_reasoning", "think_split"}, []),
    ("reasoning json, content json", JSON_SCHEMA, [("reasoning", "[1]"), ("content", ANSWER)],
     ANSWER, "[1]", set(), []),
    ("schema broken", JSON_SCHEMA, [("content", '{"city": "Rome"}')], '{"city": "Rome"}', "", set(), ["schema"]),
    ("not json", JSON_OBJECT, [("reasoning", "Let me see"), ("content", "Paris")], "Paris", "Let me see",
     set(), ["not_json"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("response_format", "parts", "content", "reasoning", "repairs", "violations"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_streams_give_the_same_answer_wherever_the_text_is_cut(
    response_format: dict[str, Any],
    parts: list[tuple[str, str]],
    content: str,
    reasoning: str,
    repairs: set[str],
    violations: list[str],
) -> None:
    # every part cut at every offset (and pair), the others whole
    for which, (_, text) in enumerate(parts):
        for pieces in cuts(text):
            deltas = [{f: piece} for k, (f, t) in enumerate(parts) for piece in (pieces if k == which else [t])]
            ctx = context(response_format)
            result, _ = streamed(ctx, events(deltas))
            assert client_view(result) == (content, reasoning), pieces
            assert ctx.repairs == repairs, pieces
            assert [k for _, k, _ in ctx.violations] == violations, pieces
    # and the plain answer of the same whole text agrees
    whole: dict[str, str] = {}
    for field, text in parts:
        whole[field] = whole.get(field, "") + text
    ctx = context(response_format)
    message = plain(ctx, whole.get("content", ""), whole.get("reasoning"))["message"]
    assert (message["content"], message.get("reasoning_content") or "") == (content, reasoning)
    assert [k for _, k, _ in ctx.violations] == violations


def test_a_streamed_violation_under_the_error_policy_ends_with_the_error_in_place_of_the_finish() -> None:
    ctx = context(JSON_SCHEMA, erroring(get_profile("vllm@0.32")), stream=True)
    result, out = streamed(ctx, events([{"content": '{"city": '}, {"content": '"Rome"}'}]))
    assert b'"finish_reason":"stop"' not in out and b"[DONE]" not in out
    last = orjson.loads(out.strip().split(b"\n\n")[-1][6:])
    assert last["error"]["code"] == "response_format_violation" and last["error"]["param"] == "response_format"
    assert result["choices"][0]["message"]["content"] == '{"city": "Rome"}'  # what came before is the model's


def test_a_streamed_cut_answer_and_a_tool_call_are_not_checked() -> None:
    ctx = context(JSON_SCHEMA)
    streamed(ctx, events([{"content": '{"city": "Pa'}], finish="length"))
    assert ctx.violations == []
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    ctx = context(JSON_SCHEMA, tools=tools)
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    result, _ = streamed(ctx, events([{"reasoning": '{"a": 1}'}, {"tool_calls": [call]}], finish="tool_calls"))
    message = result["choices"][0]["message"]
    assert message["reasoning_content"] == '{"a": 1}' and message["tool_calls"][0]["function"]["name"] == "f"
    assert ctx.violations == [] and ctx.repairs == set()


def test_reasoning_held_back_keeps_its_place_before_the_content() -> None:
    """Held reasoning is sent, in order, as soon as content shows it was reasoning."""
    ctx = context(JSON_SCHEMA)
    _, out = streamed(ctx, events([{"reasoning": "{"}, {"reasoning": "x}"}, {"content": ANSWER}]))
    deltas = [orjson.loads(b[6:])["choices"][0]["delta"] for b in out.split(b"\n\n") if b.startswith(b"data: {")]
    texts = [(k, v) for d in deltas for k, v in d.items() if k in ("content", "reasoning_content") and v]
    assert texts == [("reasoning_content", "{x}"), ("content", ANSWER)]
