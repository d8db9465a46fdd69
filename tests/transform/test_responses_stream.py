"""The Responses stream generated from official chat chunks: grammar, the SDK's reading, the recordings' shape.

Inputs are the real OpenAI chat streams in ``fixtures/openai-live`` (what the stream normaliser
emits for any backend), with reasoning deltas and usage chunks added where a test needs them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from _responses_grammar import check_stream, parse_frames, sdk_read
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response

from _props import examples
from oaishim.transform.responses import ResponsesStreamEncoder, chat_to_response, responses_to_chat
from oaishim.wire.errors import OpenAIError

FIXTURES = Path(__file__).parent.parent / "fixtures"
KEY = b"k" * 32
USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 9,
    "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 5},
}


def ids() -> Callable[[str], str]:
    counter = itertools.count()
    return lambda prefix: f"{prefix}_{next(counter):04d}"


def chat_stream(name: str) -> list[dict[str, Any]]:
    out = []
    for line in (FIXTURES / "openai-live" / name).read_bytes().split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return out


def recorded(name: str) -> list[dict[str, Any]]:
    return parse_frames((FIXTURES / "openai-live-responses" / name).read_bytes())


def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
    }


def usage_chunk() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": USAGE,
    }


def reasoning_chunks(text: str, size: int = 3) -> list[dict[str, Any]]:
    first = chunk({"role": "assistant", "content": None, "reasoning_content": text[:size]})
    return [first] + [chunk({"reasoning_content": text[i : i + size]}) for i in range(size, len(text), size)]


def without_role(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("role") is None]


def info_for(**request: Any) -> Any:
    body = {"model": "my-model", "input": "hi", "stream": True, **request}
    return responses_to_chat(body, key=KEY)[1]


def run(chunks: list[dict[str, Any]], info: Any = None, *, end: bool = True) -> tuple[list[dict[str, Any]], Any]:
    enc = ResponsesStreamEncoder(info or info_for(), id_factory=ids(), key=KEY, clock=lambda: 1700000000)
    data = b"".join(enc.start())
    for c in chunks:
        data += b"".join(enc.feed(c))
    if end:
        data += b"".join(enc.end())
    return parse_frames(data), enc


def runs(types: list[str]) -> list[str]:
    return [t for t, _ in itertools.groupby(types)]


def content_of(chunks: list[dict[str, Any]], key: str = "content") -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c["choices"])


# -- the answers ------------------------------------------------------------------------------------


def test_text_answer_has_the_recorded_event_order_and_the_sdk_reads_it() -> None:
    chunks = chat_stream("content.sse")
    events, enc = run(chunks)
    check_stream(events)
    assert runs([e["type"] for e in events]) == runs([e["type"] for e in recorded("text.sse")])
    final = sdk_read(events)
    assert final.output_text == content_of(chunks)
    Response.model_validate(events[-1]["response"])
    assert enc.response == events[-1]["response"]
    assert enc.response["model"] == "my-model"  # the client's name, not the backend's


def test_reasoning_then_text() -> None:
    reasoning = "The user says hi. I should greet them back, briefly."
    chunks = reasoning_chunks(reasoning) + without_role(chat_stream("content.sse")) + [usage_chunk()]
    events, enc = run(chunks)
    check_stream(events)
    # the raw-reasoning order an open-weight server uses: a reasoning item with a reasoning_text part, then text
    lm = runs([e["type"] for e in recorded("lmstudio-reasoning-text-then-function-call.sse")])
    ours = runs([e["type"] for e in events])
    assert ours[:-1] == lm[: len(ours) - 1]
    out = enc.response["output"]
    assert [i["type"] for i in out] == ["reasoning", "message"]
    assert out[0]["id"].startswith("rs_") and out[0]["summary"] == []
    assert out[0]["content"] == [{"type": "reasoning_text", "text": reasoning}]
    assert "encrypted_content" not in out[0]  # not asked
    final = sdk_read(events)
    assert final.output_text == content_of(chunks)
    assert enc.response["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 29,
    }
    Response.model_validate(enc.response)


def test_reasoning_then_two_parallel_tool_calls() -> None:
    calls = chat_stream("parallel-tool-calls.sse")
    chunks = reasoning_chunks("Two cities: call the tool twice.") + without_role(calls)
    events, enc = run(chunks)
    check_stream(events)
    out = enc.response["output"]
    assert [i["type"] for i in out] == ["reasoning", "function_call", "function_call"]
    upstream = {}
    for c in calls:
        for call in (c["choices"] or [{"delta": {}}])[0]["delta"].get("tool_calls") or []:
            entry = upstream.setdefault(call["index"], {"id": None, "args": ""})
            entry["id"] = call.get("id") or entry["id"]
            entry["args"] += call["function"].get("arguments") or ""
    for item, (_, want) in zip(out[1:], sorted(upstream.items()), strict=True):
        assert item["call_id"] == want["id"] and item["id"].startswith("fc_") and item["id"] != item["call_id"]
        assert item["arguments"] == want["args"] and item["status"] == "completed"
    assert sum(e["type"] == "response.function_call_arguments.delta" for e in events) > 4
    final = sdk_read(events)
    assert [o.type for o in final.output] == ["reasoning", "function_call", "function_call"]
    assert enc.response["status"] == "completed"


def test_length_cutoff_is_incomplete() -> None:
    chunks = chat_stream("length-cutoff.sse")
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    events, enc = run(chunks, info_for(max_output_tokens=16))
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    resp = enc.response
    assert resp["status"] == "incomplete" and resp["incomplete_details"] == {"reason": "max_output_tokens"}
    assert resp["output"][0]["status"] == "incomplete" and resp["max_output_tokens"] == 16
    Response.model_validate(resp)


def test_content_filter_is_incomplete() -> None:
    events, enc = run([chunk({"role": "assistant", "content": "Some"}), chunk({}, "content_filter")])
    check_stream(events)
    assert enc.response["incomplete_details"] == {"reason": "content_filter"}


def test_refusal_is_a_refusal_part() -> None:
    chunks = chat_stream("refusal.sse")
    events, enc = run(chunks)
    check_stream(events)
    part = enc.response["output"][0]["content"][0]
    assert part == {"type": "refusal", "refusal": content_of(chunks, "refusal")}
    assert "response.refusal.delta" in {e["type"] for e in events}
    Response.model_validate(enc.response)


def test_logprobs_when_asked() -> None:
    chunks = chat_stream("content-logprobs.sse")
    events, enc = run(chunks, info_for(include=["message.output_text.logprobs"], top_logprobs=2))
    check_stream(events)
    want = [
        e["token"] for c in chunks if c["choices"] for e in (c["choices"][0]["logprobs"] or {}).get("content") or []
    ]
    part = enc.response["output"][0]["content"][0]
    assert [lp["token"] for lp in part["logprobs"]] == want and want
    assert [lp["token"] for e in events if e["type"] == "response.output_text.delta" for lp in e["logprobs"]] == want
    # not asked: empty lists, as the recordings show
    _, plain = run(chunks)
    assert plain.response["output"][0]["content"][0]["logprobs"] == []


def test_encrypted_reasoning_round_trips_into_the_next_request() -> None:
    info = info_for(include=["reasoning.encrypted_content"], store=False)
    events, enc = run(reasoning_chunks("secret plan") + without_role(chat_stream("content.sse")), info)
    check_stream(events)
    item = enc.response["output"][0]
    assert isinstance(item["encrypted_content"], str)
    # the client sends it back (store: false), without the readable content
    back = {"type": "reasoning", "id": item["id"], "summary": [], "encrypted_content": item["encrypted_content"]}
    body = {"model": "m", "input": [back, enc.response["output"][1], {"role": "user", "content": "and?"}]}
    chat, _ = responses_to_chat(body, key=KEY)
    assert chat["messages"][0]["role"] == "assistant"
    assert chat["messages"][0]["reasoning_content"] == "secret plan"
    assert chat["messages"][0]["content"] == content_of(chat_stream("content.sse"))


def test_custom_tool_call_comes_back_as_a_custom_item() -> None:
    tool = {"type": "custom", "name": "write_sql", "description": "SQL"}
    info = info_for(tools=[tool])
    args = orjson.dumps({"input": "SELECT * FROM users"}).decode()
    chunks = [
        chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {"index": 0, "id": "call_x", "type": "function", "function": {"name": "write_sql", "arguments": ""}}
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:9]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[9:]}}]}),
        chunk({}, "tool_calls"),
    ]
    events, enc = run(chunks, info)
    check_stream(events)
    item = enc.response["output"][0]
    assert item["type"] == "custom_tool_call" and item["input"] == "SELECT * FROM users" and item["call_id"] == "call_x"
    # the recorded custom tool call has the same item fields
    recorded_item = next(e for e in recorded("custom-tool.sse") if e["type"] == "response.output_item.done")["item"]
    assert set(item) == set(recorded_item)
    Response.model_validate(enc.response)


def test_a_namespace_member_call_comes_back_with_its_namespace_and_own_name() -> None:
    # Codex CLI offers its sub-agent tools as the namespace 'multi_agent_v1' and routes a call by (namespace, name)
    member = {"type": "function", "name": "close", "parameters": {"type": "object", "properties": {}}}
    namespace = {"type": "namespace", "name": "agents", "description": "d", "tools": [member]}
    info = info_for(tools=[{"type": "function", "name": "close"}, namespace])
    call = {"index": 0, "id": "call_n", "type": "function", "function": {"name": "agents__close", "arguments": "{}"}}
    events, enc = run([chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls")], info)
    check_stream(events)
    done = next(e for e in events if e["type"] == "response.output_item.done")["item"]
    assert enc.response["output"] == [done]
    assert (done["type"], done["namespace"], done["name"], done["call_id"]) == (
        "function_call",
        "agents",
        "close",
        "call_n",
    )
    added = next(e for e in events if e["type"] == "response.output_item.added")["item"]
    assert (added["namespace"], added["name"]) == ("agents", "close")
    Response.model_validate(enc.response)


# -- failures ---------------------------------------------------------------------------------------


def test_failure_mid_stream_never_completes() -> None:
    chunks = chat_stream("content.sse")
    events, enc = run(chunks[:5], end=False)
    tail = parse_frames(b"".join(enc.fail(OpenAIError(500, "engine died", "server_error"))))
    events += tail
    check_stream(events)
    assert [e["type"] for e in tail][-2:] == ["error", "response.failed"]
    assert "response.completed" not in {e["type"] for e in events}
    resp = enc.response
    assert resp["status"] == "failed" and resp["error"] == {"code": "server_error", "message": "engine died"}
    assert resp["output"][0]["status"] == "incomplete"
    assert enc.end() == [] and enc.feed(chunks[5]) == []  # nothing after the end


def test_failure_before_any_output_has_the_recorded_shape() -> None:
    enc = ResponsesStreamEncoder(info_for(), id_factory=ids())
    events = parse_frames(
        b"".join(
            enc.fail(
                OpenAIError(429, "You exceeded your current quota.", "insufficient_quota", None, "insufficient_quota")
            )
        )
    )
    check_stream(events)
    assert [e["type"] for e in events] == [e["type"] for e in recorded("error-insufficient-quota.sse")]
    assert events[-1]["response"]["error"]["code"] == "insufficient_quota"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            OpenAIError(400, "too long", "invalid_request_error", "messages", "context_length_exceeded"),
            "context_length_exceeded",
        ),
        (OpenAIError(429, "slow down", "rate_limit_error"), "rate_limit_exceeded"),
        (OpenAIError(502, "bad gateway", "server_error"), "server_error"),
        (OpenAIError(504, "timeout", "server_error", None, "timeout"), "server_error"),
    ],
)
def test_failure_codes(error: OpenAIError, code: str) -> None:
    events, enc = run([], end=False)
    events += parse_frames(b"".join(enc.fail(error)))
    assert events[-2]["code"] == code and events[-1]["response"]["error"]["code"] == code


def test_upstream_that_ends_without_a_finish_fails() -> None:
    chunks = [c for c in chat_stream("content.sse") if c["choices"] and c["choices"][0]["finish_reason"] is None]
    events, _ = run(chunks)
    check_stream(events)
    assert events[-1]["type"] == "response.failed"


def test_interleaved_tool_call_arguments_fail_loudly() -> None:
    start = [
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "f", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
    ]
    events, _ = run(start, info_for(tools=[{"type": "function", "name": "f"}]))
    check_stream(events)
    assert events[-1]["type"] == "response.failed"


def test_unreadable_chunk_fails_the_response() -> None:
    events, _ = run([chunk({"content": "a"}), {"choices": [{"index": 0, "delta": 5}]}])
    check_stream(events)
    assert events[-1]["type"] == "response.failed"


# -- the echo and the plain body --------------------------------------------------------------------


def test_response_echoes_the_fields_the_recordings_have() -> None:
    events, enc = run(chat_stream("content.sse"))
    rec = recorded("text.sse")
    azure_only = {"content_filters"}
    assert list(events[0]["response"]) == [k for k in rec[0]["response"] if k not in azure_only]
    assert set(enc.response) == set(rec[-1]["response"]) - azure_only
    plain = orjson.loads((FIXTURES / "openai-live-responses" / "text.json").read_bytes())
    assert set(enc.response) == set(plain) - azure_only
    # defaults echoed as the recording shows them when the request left them out
    for key in (
        "parallel_tool_calls",
        "temperature",
        "top_p",
        "tool_choice",
        "tools",
        "truncation",
        "store",
        "text",
        "metadata",
    ):
        assert enc.response[key] == plain[key], key


def test_request_settings_are_echoed() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    info = info_for(
        instructions="Be brief.",
        temperature=0.5,
        top_p=0.9,
        tools=[tool],
        tool_choice={"type": "function", "name": "f"},
        metadata={"a": "b"},
        store=False,
        previous_response_id="resp_prev",
        user="u",
        text={"format": {"type": "json_object"}},
        reasoning={"effort": "low"},
    )
    _, enc = run(chat_stream("content.sse"), info)
    r = enc.response
    assert (r["instructions"], r["temperature"], r["top_p"], r["metadata"], r["store"]) == (
        "Be brief.",
        0.5,
        0.9,
        {"a": "b"},
        False,
    )
    assert r["tools"] == [tool] and r["tool_choice"] == {"type": "function", "name": "f"}
    assert r["previous_response_id"] == "resp_prev" and r["user"] == "u"
    assert r["text"]["format"] == {"type": "json_object"} and r["reasoning"]["effort"] == "low"
    Response.model_validate(r)


def _completion(reasoning: str, text: str, calls: list[tuple[str, str]], finish: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "reasoning_content": reasoning or None}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": USAGE,
    }


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def _chunks_of(completion: dict[str, Any], cuts: list[int]) -> list[dict[str, Any]]:
    message = completion["choices"][0]["message"]
    out = [chunk({"role": "assistant", "content": None})]
    out += [chunk({"reasoning_content": p}) for p in _split(message["reasoning_content"] or "", cuts)]
    out += [chunk({"content": p}) for p in _split(message["content"] or "", cuts)]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        out += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _split(fn["arguments"], cuts)
        ]
    return [*out, chunk({}, completion["choices"][0]["finish_reason"]), usage_chunk()]


@examples(40)
@given(
    reasoning=st.text(max_size=30),
    text=st.text(max_size=30),
    calls=st.lists(st.tuples(st.sampled_from(["f", "g"]), st.text(max_size=20)), max_size=3),
    finish=st.sampled_from(["stop", "length", "tool_calls"]),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_stream_and_plain_body_agree_at_any_split(
    reasoning: str, text: str, calls: list[tuple[str, str]], finish: str, cuts: list[int]
) -> None:
    info = info_for(tools=[{"type": "function", "name": "f"}, {"type": "function", "name": "g"}])
    completion = _completion(reasoning, text, calls, finish)
    events, enc = run(_chunks_of(completion, cuts), info)
    check_stream(events)
    plain = chat_to_response(completion, info, id_factory=ids(), key=KEY, clock=lambda: 1700000000)
    assert enc.response == plain
    assert plain["output"] == events[-1]["response"]["output"]
    if finish != "length":
        final = sdk_read(events)
        assert final.output_text == text
        Response.model_validate(plain)


def test_every_split_point_of_one_answer() -> None:
    info = info_for()
    completion = _completion("think", "Hello there", [], "stop")
    want = chat_to_response(completion, info, id_factory=ids(), key=KEY, clock=lambda: 1700000000)
    for cut in range(len("Hello there") + 1):
        events, enc = run(_chunks_of(completion, [cut]), info)
        check_stream(events)
        assert enc.response == want


def test_plain_body_without_a_choice_is_a_server_error() -> None:
    with pytest.raises(OpenAIError) as err:
        chat_to_response({"choices": []}, info_for())
    assert err.value.status == 502
