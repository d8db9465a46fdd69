"""Tests for oaishim.wire.accumulate.

Two kinds of oracle: literal expected values written by hand, and the official openai-python stream helper
(``ChatCompletionStreamState``) run over the same chunks, for the streams it can handle.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.lib.streaming._deltas import accumulate_delta as sdk_accumulate_delta
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from oaishim.wire.accumulate import (
    ChatAccumulator,
    CompletionAccumulator,
    accumulate_chat,
    accumulate_completion,
    accumulate_delta,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "openai-live"
LIVE_STREAMS = sorted(FIXTURES.glob("*.sse"))


def load_sse(path: Path) -> list[dict[str, Any]]:
    """Tiny SSE reader for the fixtures: events are separated by blank lines, payload on ``data: ``."""
    chunks: list[dict[str, Any]] = []
    for event in path.read_text(encoding="utf-8").split("\n\n"):
        for line in event.splitlines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                return chunks
            chunks.append(json.loads(payload))
    return chunks


def sdk_accumulate(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What openai-python's stream helper builds from ``chunks``, as a plain dict.

    The ``object`` filter lives in the SDK's ``ChatCompletionStream`` iterator, not in the state object, so
    it is applied here. The live snapshot is used rather than ``get_final_completion()``, which raises on
    ``finish_reason == "length"``; the final completion is built from that same snapshot.
    """
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        if chunk.get("object") == "chat.completion.chunk":
            state.handle_chunk(ChatCompletionChunk.construct(**copy.deepcopy(chunk)))
    return normalise(state.current_completion_snapshot.to_dict())


def normalise(completion: Mapping[str, Any]) -> dict[str, Any]:
    """Drop the SDK-only parse results and the top-level and message keys that are ``None``.

    The SDK rebuilds its message model on every chunk, so unsent optional fields (``audio``, ``annotations``,
    ``tool_calls``, a tool call's ``arguments``, ...) show up as ``None``; we leave them out. ``None`` means
    "absent" on both sides after this.
    """
    result = {key: value for key, value in copy.deepcopy(dict(completion)).items() if value is not None}
    for choice in result["choices"]:
        message = choice["message"]
        message.pop("parsed", None)
        for call in message.get("tool_calls") or []:
            call["function"].pop("parsed_arguments", None)
            # An unsent ``arguments`` comes back from the SDK's model as None.
            call["function"] = {key: value for key, value in call["function"].items() if value is not None}
        choice["message"] = {key: value for key, value in message.items() if value is not None}
    return result


def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test",
        "system_fingerprint": "fp_x",
        "choices": choices,
        **extra,
    }


def delta(index: int, finish_reason: str | None = None, logprobs: Any = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "logprobs": logprobs, "finish_reason": finish_reason}


USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


# --- the live fixtures against the SDK ------------------------------------------------------------------


def test_fixtures_are_present() -> None:
    assert len(LIVE_STREAMS) == 12


@pytest.mark.parametrize("path", LIVE_STREAMS, ids=lambda p: p.name)
def test_live_stream_matches_sdk(path: Path) -> None:
    chunks = load_sse(path)
    ours = accumulate_chat(chunks)
    assert normalise(ours) == sdk_accumulate(chunks)
    # The normalisation must not hide the fixed message keys on our side.
    for choice in ours["choices"]:
        assert {"role", "content", "refusal"} <= choice["message"].keys()
        assert choice["message"]["role"] == "assistant"
    assert ours["object"] == "chat.completion"
    assert ours["usage"] == chunks[-1]["usage"]


def test_live_parallel_tool_calls_literal() -> None:
    result = accumulate_chat(load_sse(FIXTURES / "parallel-tool-calls.sse"))
    (choice,) = result["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {
            "index": 0,
            "id": "call_JMW1whyEaYG438VE1OIflxA2",
            "type": "function",
            "function": {
                "name": "GetWeatherArgs",
                "arguments": '{"city": "Edinburgh", "country": "GB", "units": "c"}',
            },
        },
        {
            "index": 1,
            "id": "call_DNYTawLBoN8fj3KN6qU9N1Ou",
            "type": "function",
            "function": {"name": "get_stock_price", "arguments": '{"ticker": "AAPL", "exchange": "NASDAQ"}'},
        },
    ]
    assert result["usage"] == {
        "prompt_tokens": 149,
        "completion_tokens": 60,
        "total_tokens": 209,
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_live_refusal_logprobs_literal() -> None:
    result = accumulate_chat(load_sse(FIXTURES / "refusal-logprobs.sse"))
    (choice,) = result["choices"]
    assert choice["message"]["content"] is None
    assert choice["message"]["refusal"] == "I'm very sorry, but I can't assist with that."
    assert choice["logprobs"]["content"] is None
    tokens = [entry["token"] for entry in choice["logprobs"]["refusal"]]
    assert tokens == ["I'm", " very", " sorry", ",", " but", " I", " can't", " assist", " with", " that", "."]


def test_live_content_logprobs_and_n3_literal() -> None:
    result = accumulate_chat(load_sse(FIXTURES / "content-logprobs.sse"))
    (choice,) = result["choices"]
    assert choice["message"]["content"] == "Foo!"
    assert [entry["token"] for entry in choice["logprobs"]["content"]] == ["Foo", "!"]
    assert choice["logprobs"]["refusal"] is None

    n3 = accumulate_chat(load_sse(FIXTURES / "n3-interleaved.sse"))
    temperatures = [json.loads(c["message"]["content"])["temperature"] for c in n3["choices"]]
    assert [c["index"] for c in n3["choices"]] == [0, 1, 2]
    assert temperatures == [65, 61, 59]


# --- accumulate_delta -----------------------------------------------------------------------------------

# (acc, delta, expected): cases where the SDK's accumulate_delta gives the same answer.
SDK_COMPATIBLE_DELTAS = [
    pytest.param({"n": 1}, {"n": 2}, {"n": 3}, id="ints-added"),
    pytest.param({"x": 0.5}, {"x": 0.25}, {"x": 0.75}, id="floats-added"),
    pytest.param({"u": {"n": 1, "s": "a"}}, {"u": {"n": 4, "s": "b"}}, {"u": {"n": 5, "s": "ab"}}, id="nested"),
    pytest.param({"content": "Hel"}, {"content": "lo"}, {"content": "Hello"}, id="strings-concatenated"),
    pytest.param({"content": "x"}, {"content": None}, {"content": "x"}, id="none-in-delta-keeps-acc"),
    pytest.param({"content": None}, {"content": "y"}, {"content": "y"}, id="none-in-acc-replaced"),
    pytest.param({}, {"refusal": None}, {"refusal": None}, id="new-none-key-copied"),
    pytest.param({"content": "x"}, {"other": 1}, {"content": "x", "other": 1}, id="new-key-copied"),
    pytest.param(  # the delta's values, not 2 nor "functionfunction"
        {"index": 1, "type": "function"},
        {"index": 1, "type": "function"},
        {"index": 1, "type": "function"},
        id="index-type-replaced",
    ),
    pytest.param({"content": "x"}, {"content": 3}, {"content": "x"}, id="mismatched-types-keep-acc"),
    pytest.param({"ids": [1, 2]}, {"ids": [3]}, {"ids": [1, 2, 3]}, id="scalar-list-extended"),
    pytest.param(
        {},
        {
            "tool_calls": [
                {"index": 0, "function": {"arguments": "ab"}},
                {"index": 0, "function": {"arguments": "cd"}},
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": "abcd"}}]},
        id="same-index-twice-in-first-delta",
    ),
    pytest.param(
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}, {"index": 1, "id": "b"}]},
        {
            "tool_calls": [
                {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
                {"index": 1, "id": "b"},
            ]
        },
        id="indexed-merge-and-append",
    ),
]


@pytest.mark.parametrize(("acc", "delta_value", "expected"), SDK_COMPATIBLE_DELTAS)
def test_accumulate_delta_like_sdk(acc: dict[str, Any], delta_value: dict[str, Any], expected: Any) -> None:
    assert accumulate_delta(copy.deepcopy(acc), delta_value) == expected
    sdk_acc = cast("dict[object, object]", copy.deepcopy(acc))
    assert sdk_accumulate_delta(sdk_acc, cast("dict[object, object]", copy.deepcopy(delta_value))) == expected


def test_accumulate_delta_mutates_and_returns_acc() -> None:
    acc: dict[str, Any] = {"content": "a"}
    assert accumulate_delta(acc, {"content": "b"}) is acc
    assert acc == {"content": "ab"}


def test_accumulate_delta_does_not_alias_delta() -> None:
    incoming: dict[str, Any] = {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}], "meta": {"k": [1]}}
    acc = accumulate_delta({}, incoming)
    incoming["tool_calls"][0]["function"]["arguments"] = "changed"
    incoming["meta"]["k"].append(2)
    assert acc == {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}], "meta": {"k": [1]}}

    extended: dict[str, Any] = {"annotations": [{"n": 1}]}
    more: dict[str, Any] = {"annotations": [{"n": 2}]}
    accumulate_delta(extended, more)
    more["annotations"][0]["n"] = 99
    assert extended == {"annotations": [{"n": 1}, {"n": 2}]}


def test_entry_without_index_raises_value_error() -> None:
    acc: dict[str, Any] = {"tool_calls": [{"index": 0, "id": "a"}]}
    with pytest.raises(ValueError, match="no 'index' key"):
        accumulate_delta(acc, {"tool_calls": [{"function": {"arguments": "x"}}]})
    with pytest.raises(ValueError, match="no 'index' key"):
        accumulate_delta({}, {"tool_calls": [{"index": 0}, {"id": "orphan"}]})


@pytest.mark.parametrize("bad", ["0", 1.0, True, None])
def test_non_integer_index_raises_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="not an integer"):
        accumulate_delta({"tool_calls": [{"index": 0}]}, {"tool_calls": [{"index": bad}]})


def test_non_object_entry_in_indexed_list_raises_type_error() -> None:
    with pytest.raises(TypeError, match="not an object"):
        accumulate_delta({"tool_calls": [{"index": 0}]}, {"tool_calls": ["x"]})


def test_lists_of_objects_without_index_are_extended() -> None:
    # Deliberate difference: the SDK raises here (it takes every non-scalar list for an indexed one).
    acc: dict[str, Any] = {"annotations": [{"type": "url_citation", "n": 1}]}
    accumulate_delta(acc, {"annotations": [{"type": "url_citation", "n": 2}]})
    assert acc == {"annotations": [{"type": "url_citation", "n": 1}, {"type": "url_citation", "n": 2}]}


def test_booleans_take_latest_value() -> None:
    # Deliberate difference: the SDK adds them as ints (True + True == 2).
    assert accumulate_delta({"flag": True}, {"flag": True}) == {"flag": True}
    assert accumulate_delta({"flag": True}, {"flag": False}) == {"flag": False}


def test_indexed_entries_out_of_order_merge_by_key() -> None:
    # Deliberate difference: the SDK uses index as a list position and would merge index 0 into index 1.
    acc: dict[str, Any] = {}
    accumulate_delta(acc, {"tool_calls": [{"index": 1, "id": "b", "function": {"arguments": "B"}}]})
    accumulate_delta(acc, {"tool_calls": [{"index": 0, "id": "a", "function": {"arguments": "A"}}]})
    accumulate_delta(acc, {"tool_calls": [{"index": 1, "function": {"arguments": "b"}}]})
    assert acc == {
        "tool_calls": [
            {"index": 0, "id": "a", "function": {"arguments": "A"}},
            {"index": 1, "id": "b", "function": {"arguments": "Bb"}},
        ]
    }


# --- ChatAccumulator: hand-written streams --------------------------------------------------------------


def test_n3_choices_first_seen_out_of_order() -> None:
    chunks = [
        chunk([delta(2, role="assistant", content="C1")]),
        chunk([delta(0, role="assistant", content="A1")]),
        chunk([delta(1, role="assistant", content="B1")]),
        chunk([delta(2, content="C2"), delta(0, content="A2")]),
        chunk([delta(1, content="B2", finish_reason="length")]),
        chunk([delta(0, finish_reason="stop"), delta(2, finish_reason="stop")]),
        chunk([], usage=USAGE),
    ]
    result = accumulate_chat(chunks)

    def choice(index: int, content: str, finish_reason: str) -> dict[str, Any]:
        message = {"role": "assistant", "content": content, "refusal": None}
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}

    assert result == {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "system_fingerprint": "fp_x",
        "choices": [choice(0, "A1A2", "stop"), choice(1, "B1B2", "length"), choice(2, "C1C2", "stop")],
        "usage": USAGE,
    }


def test_two_parallel_tool_calls_over_many_deltas() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": index, **fields}

    chunks = [
        chunk([delta(0, role="assistant", content=None)]),
        chunk([delta(0, tool_calls=[call(0, id="call_a", type="function", function={"name": "get_weather"})])]),
        chunk([delta(0, tool_calls=[call(0, function={"arguments": '{"ci'})])]),
        chunk(
            [
                delta(
                    0,
                    tool_calls=[call(1, id="call_b", type="function", function={"name": "t", "arguments": "{"})],
                )
            ]
        ),
        chunk(
            [
                delta(
                    0,
                    tool_calls=[
                        call(0, function={"arguments": 'ty":"Oslo"}'}),
                        call(1, function={"arguments": '"tz":'}),
                    ],
                )
            ]
        ),
        chunk([delta(0, tool_calls=[call(1, function={"arguments": '"CET"'})])]),
        chunk([delta(0, tool_calls=[call(1, function={"arguments": "}"})])]),
        chunk([delta(0, finish_reason="tool_calls")]),
        chunk([], usage=USAGE),
    ]
    result = accumulate_chat(chunks)
    message = result["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            },
            {
                "index": 1,
                "id": "call_b",
                "type": "function",
                "function": {"name": "t", "arguments": '{"tz":"CET"}'},
            },
        ],
    }
    assert result["choices"][0]["finish_reason"] == "tool_calls"
    assert normalise(result) == sdk_accumulate(chunks)


def test_later_chunk_without_usage_resets_usage_like_sdk() -> None:
    # The SDK assigns snapshot.usage = chunk.usage on every chunk: a chunk after the usage chunk that has
    # no usage key wipes it. We mirror that on purpose; the live API never sends such a chunk.
    chunks = [chunk([delta(0, role="assistant", content="hi", finish_reason="stop")]), chunk([], usage=USAGE)]
    assert accumulate_chat(chunks)["usage"] == USAGE
    chunks.append(chunk([]))
    assert accumulate_chat(chunks)["usage"] is None
    assert "usage" not in sdk_accumulate(chunks)  # normalise() drops None: the SDK's usage is None too


def test_non_chunk_objects_are_skipped() -> None:
    azure_filter_event = {"id": "", "object": "", "created": 0, "model": "", "choices": [], "usage": USAGE}
    chunks = [azure_filter_event, chunk([delta(0, role="assistant", content="ok", finish_reason="stop")])]
    result = accumulate_chat(chunks)
    assert result["id"] == "chatcmpl-x"
    assert result["usage"] is None
    assert result["choices"][0]["message"]["content"] == "ok"
    assert normalise(result) == sdk_accumulate(chunks)


def test_unknown_delta_keys_pass_through_like_sdk() -> None:
    chunks = [
        chunk([delta(0, role="assistant", reasoning_content="Let me ")]),
        chunk([delta(0, reasoning_content="think.")]),
        chunk([delta(0, content="42")]),
        chunk([delta(0, finish_reason="stop")]),
    ]
    result = accumulate_chat(chunks)
    assert result["choices"][0]["message"] == {
        "role": "assistant",
        "content": "42",
        "refusal": None,
        "reasoning_content": "Let me think.",
    }
    assert normalise(result) == sdk_accumulate(chunks)


def test_defaults_when_fields_never_sent() -> None:
    fields = {"id": "chatcmpl-y", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    result = accumulate_chat([{**fields, "choices": [{"index": 0, "delta": {}}]}])
    assert result == {
        "id": "chatcmpl-y",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": None},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "usage": None,
    }


def test_service_tier_and_fingerprint_kept_when_seen() -> None:
    first = chunk([delta(0, role="assistant", content="a")], service_tier="default")
    last = chunk([delta(0, finish_reason="stop")], service_tier="default", system_fingerprint="fp_new")
    result = accumulate_chat([first, last])
    assert result["service_tier"] == "default"
    assert result["system_fingerprint"] == "fp_new"  # last chunk's, as the SDK does


def test_finish_reason_is_last_non_null() -> None:
    chunks = [
        chunk([delta(0, role="assistant", content="a", finish_reason="stop")]),
        chunk([delta(0, content="", finish_reason=None)]),
    ]
    assert accumulate_chat(chunks)["choices"][0]["finish_reason"] == "stop"
    assert sdk_accumulate(chunks)["choices"][0]["finish_reason"] == "stop"


def test_logprobs_first_object_then_concatenated() -> None:
    def token(text: str) -> dict[str, Any]:
        return {"token": text, "logprob": -1.0, "bytes": list(text.encode()), "top_logprobs": []}

    chunks = [
        chunk([delta(0, role="assistant", content="", logprobs={"content": None, "refusal": None})]),
        chunk([delta(0, content="a", logprobs={"content": [token("a")], "refusal": None})]),
        chunk([delta(0, content="b", logprobs={"content": [], "refusal": None})]),
        chunk([delta(0, content="c", logprobs={"content": [token("c")], "refusal": None})]),
        chunk([delta(0, finish_reason="stop")]),
    ]
    result = accumulate_chat(chunks)
    assert result["choices"][0]["logprobs"] == {"content": [token("a"), token("c")], "refusal": None}
    assert normalise(result) == sdk_accumulate(chunks)


def test_result_is_a_fresh_copy_and_chunks_are_not_aliased() -> None:
    accumulator = ChatAccumulator()
    first = chunk([delta(0, role="assistant", content="a")], usage=None)
    accumulator.feed(first)
    snapshot = accumulator.result()
    snapshot["choices"][0]["message"]["content"] = "mutated"
    first["choices"][0]["delta"]["content"] = "also mutated"
    accumulator.feed(chunk([delta(0, content="b", finish_reason="stop")]))
    assert accumulator.result()["choices"][0]["message"]["content"] == "ab"


def test_empty_stream_raises() -> None:
    with pytest.raises(ValueError, match="no chunk"):
        accumulate_chat([])
    with pytest.raises(ValueError, match="no chunk"):
        accumulate_completion([])


def test_choice_without_index_raises() -> None:
    with pytest.raises(ValueError, match="no 'index' key"):
        accumulate_chat([chunk([{"delta": {"content": "x"}}])])


# --- CompletionAccumulator ------------------------------------------------------------------------------


def text_chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1700000001,
        "model": "gpt-3.5-turbo-instruct",
        "choices": choices,
        **extra,
    }


def test_legacy_completion_text_logprobs_and_usage_chunk() -> None:
    def logprobs(token: str, logprob: float, offset: int) -> dict[str, Any]:
        # A token spelled "index" in top_logprobs must not be taken for a list index.
        return {
            "tokens": [token],
            "token_logprobs": [logprob],
            "top_logprobs": [{token: logprob, "index": -9.5}],
            "text_offset": [offset],
        }

    chunks = [
        text_chunk([{"index": 0, "text": "Hel", "logprobs": logprobs("Hel", -0.5, 10), "finish_reason": None}]),
        text_chunk([{"index": 1, "text": "Bye", "logprobs": None, "finish_reason": None}]),
        text_chunk([{"index": 0, "text": "lo", "logprobs": logprobs("lo", -0.25, 13), "finish_reason": None}]),
        text_chunk([{"index": 1, "text": "", "logprobs": None, "finish_reason": "length"}]),
        text_chunk([{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]),
        {"object": "something.else", "choices": [{"index": 0, "text": "IGNORED"}]},
        text_chunk([], usage=USAGE),
    ]
    assert accumulate_completion(chunks) == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1700000001,
        "model": "gpt-3.5-turbo-instruct",
        "choices": [
            {
                "index": 0,
                "text": "Hello",
                "logprobs": {
                    "tokens": ["Hel", "lo"],
                    "token_logprobs": [-0.5, -0.25],
                    "top_logprobs": [{"Hel": -0.5, "index": -9.5}, {"lo": -0.25, "index": -9.5}],
                    "text_offset": [10, 13],
                },
                "finish_reason": "stop",
            },
            {"index": 1, "text": "Bye", "logprobs": None, "finish_reason": "length"},
        ],
        "usage": USAGE,
    }


def test_legacy_completion_usage_from_last_chunk() -> None:
    accumulator = CompletionAccumulator()
    accumulator.feed(text_chunk([{"index": 0, "text": "a", "finish_reason": "stop"}]))
    accumulator.feed(text_chunk([], usage=USAGE))
    assert accumulator.result()["usage"] == USAGE
    accumulator.feed(text_chunk([]))
    assert accumulator.result()["usage"] is None


# --- properties -----------------------------------------------------------------------------------------


@given(st.lists(st.text(), max_size=20))
def test_split_content_accumulates_to_original(pieces: list[str]) -> None:
    chunks = [chunk([delta(0, role="assistant", content="")])]
    chunks += [chunk([delta(0, content=piece)]) for piece in pieces]
    chunks.append(chunk([delta(0, finish_reason="stop")]))
    assert accumulate_chat(chunks)["choices"][0]["message"]["content"] == "".join(pieces)


@given(
    content=st.lists(st.text(max_size=5), max_size=6),
    calls=st.lists(st.lists(st.text(max_size=5), max_size=5), max_size=3),
    data=st.data(),
)
def test_random_streams_match_sdk(content: list[str], calls: list[list[str]], data: st.DataObject) -> None:
    """Content pieces and tool-call argument pieces interleaved at random accumulate to the joined strings
    and to what the SDK builds. Calls are opened in index order, as every server does (the SDK needs it)."""
    queues: list[list[dict[str, Any]]] = [[{"content": piece} for piece in content]]
    for index, pieces in enumerate(calls):
        head = {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": f"f{index}"}}
        tail = [{"index": index, "function": {"arguments": piece}} for piece in pieces]
        queues.append([{"tool_calls": [call]} for call in [head, *tail]])
    chunks = [chunk([delta(0, role="assistant", content=None)])]
    while any(queues):
        # A call's queue may start only once the previous call has been opened (its head was taken).
        ready = [q for i, q in enumerate(queues) if q and (i <= 1 or len(queues[i - 1]) < len(calls[i - 2]) + 1)]
        queue = data.draw(st.sampled_from(ready))
        chunks.append(chunk([delta(0, **queue.pop(0))]))
    chunks.append(chunk([delta(0, finish_reason="tool_calls" if calls else "stop")]))
    chunks.append(chunk([], usage=USAGE))

    result = accumulate_chat(chunks)
    message = result["choices"][0]["message"]
    assert message["content"] == ("".join(content) if content else None)
    got = [(c["id"], c["function"]["name"], c["function"].get("arguments", "")) for c in message.get("tool_calls", [])]
    assert got == [(f"call_{i}", f"f{i}", "".join(pieces)) for i, pieces in enumerate(calls)]
    assert normalise(result) == sdk_accumulate(chunks)
