"""Odd JSON from the backend never breaks the response path.

Real recorded chunks and bodies (tests/fixtures) are mutated, one to three values at a time, into
what a broken backend might send (a number for an array, an array for a string, a string for an
object, a key removed), and fed through the stream normaliser and the plain normalisers for chat
and legacy completions. Whatever comes in, no exception escapes; a stream is either the official
one ending in ``data: [DONE]`` or ends with exactly one error event; a plain body is either an
official body or an OpenAIError 502. Seeded and bounded (``derandomize``), so a run is repeatable.

The named cases below are the inputs that cut the client's stream, or gave a bare 500, before.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _props import examples
from oaishim.transform import _parts
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan
from oaishim.transform.response import normalize_chat, normalize_completion
from oaishim.wire.errors import OpenAIError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _events(path: Path) -> list[str]:
    blocks = path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n\n")
    return [line[5:].strip() for b in blocks for line in b.split("\n") if line.startswith("data:")]


def _streams(pattern: str) -> list[tuple[str, list[str]]]:
    return [(p.name, _events(p)) for p in sorted(FIXTURES.glob(pattern))]


CHAT_STREAMS = _streams("*/chat-stream*.sse") + _streams("openai-live/*.sse")
LEGACY_STREAMS = _streams("*/completions-stream*.sse")
CHAT_BODIES = [(p.name, json.loads(p.read_bytes())) for p in sorted(FIXTURES.glob("*/chat-nonstream*.json"))]
LEGACY_BODIES = [
    (p.name, json.loads(p.read_bytes()))
    for p in sorted(FIXTURES.glob("*/completions-*.json"))
    if "stream" not in p.name
]
ODD: list[Any] = [None, 5, -1, 1.5, True, "x", "", "0", [], [5], ["stop"], {}, {"content": 3}, [{"a": 1}], "DELETE"]


def test_the_fixtures_are_there() -> None:
    assert len(CHAT_STREAMS) > 20 and LEGACY_STREAMS and CHAT_BODIES and LEGACY_BODIES


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value that a mutation can replace."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(data: st.DataObject, value: Any, times: int) -> Any:
    value = copy.deepcopy(value)
    for _ in range(times):
        paths = _paths(value)
        if not paths:
            return data.draw(st.sampled_from(ODD[:-1]))
        path = data.draw(st.sampled_from(paths))
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        odd = data.draw(st.sampled_from(ODD))
        if odd == "DELETE":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(odd)
    return value


def _context(data: st.DataObject, chat: bool) -> ResponseContext:
    repair = RepairPlan(reasoning=chat, tools=chat, stops=("zq",)) if data.draw(st.booleans()) else None
    return ResponseContext(
        model="m",
        chat=chat,
        include_usage=data.draw(st.booleans()),
        logprobs=data.draw(st.booleans()),
        top_logprobs=data.draw(st.integers(0, 3)),
        tool_mode=data.draw(st.sampled_from(["none", "auto"])),
        keep_extensions=data.draw(st.booleans()),
        repair=repair,
    )


def assert_well_ended(out: list[bytes]) -> None:
    """The official stream ending in [DONE], or a stream ending in exactly one error event."""
    assert out, "nothing at all"
    assert all(isinstance(b, bytes) and b.startswith(b"data: ") and b.endswith(b"\n\n") for b in out)
    payloads = [orjson.loads(b[6:]) for b in out if b != b"data: [DONE]\n\n"]
    errors = [p for p in payloads if "error" in p]
    if out[-1] == b"data: [DONE]\n\n":
        assert errors == [] and out.count(b"data: [DONE]\n\n") == 1
        return
    assert errors == [payloads[-1]], out[-3:]
    error = errors[0]["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)


def run_stream(events: list[str], ctx: ResponseContext) -> list[bytes]:
    """Each event as its own upstream read, through the stream pipe; the client's events, one each."""
    pipe = StreamPipe(ctx)
    raw = b"".join(pipe.feed(b"data: " + event.encode() + b"\n\n") for event in events) + pipe.flush()
    return [event + b"\n\n" for event in raw.split(b"\n\n") if event]


def _mutated_events(data: st.DataObject, streams: list[tuple[str, list[str]]]) -> list[str]:
    _, events = data.draw(st.sampled_from(streams))
    events = list(events)
    jsons = [i for i, e in enumerate(events) if e.startswith("{")]
    for _ in range(data.draw(st.integers(1, 2))):
        i = data.draw(st.sampled_from(jsons))
        events[i] = json.dumps(_mutate(data, json.loads(events[i]), data.draw(st.integers(1, 3))))
    return events


FUZZ = settings(examples(200), suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.data())
def test_mutated_chat_streams_end_well(data: st.DataObject) -> None:
    assert_well_ended(run_stream(_mutated_events(data, CHAT_STREAMS), _context(data, True)))


@FUZZ
@given(st.data())
def test_mutated_legacy_streams_end_well(data: st.DataObject) -> None:
    assert_well_ended(run_stream(_mutated_events(data, LEGACY_STREAMS), _context(data, False)))


def _plain(normalize: Callable[..., dict[str, Any]], body: Any, ctx: ResponseContext) -> None:
    try:
        out = normalize(body, ctx)
    except OpenAIError as error:
        assert error.status == 502 and error.type == "server_error"
        return
    payload = orjson.loads(orjson.dumps(out))  # serialisable as JSON
    assert payload["id"] == ctx.response_id and payload["model"] == "m"
    for choice in payload["choices"]:
        assert isinstance(choice["finish_reason"], str)
        assert set(choice) >= {"index", "logprobs", "finish_reason"}
        if ctx.chat:
            assert {"role", "content", "refusal"} <= set(choice["message"])
        else:
            assert isinstance(choice["text"], str)


@FUZZ
@given(st.data())
def test_mutated_plain_bodies_give_a_body_or_a_502(data: st.DataObject) -> None:
    chat = data.draw(st.booleans())
    _, body = data.draw(st.sampled_from(CHAT_BODIES if chat else LEGACY_BODIES))
    body = _mutate(data, body, data.draw(st.integers(1, 3)))
    if isinstance(body, dict):  # the relay refuses a body that is not an object before this
        _plain(normalize_chat if chat else normalize_completion, body, _context(data, chat))


# ---------------------------------------------------------------------------------------------------
# The inputs that broke the response path before


def _chunk(**choice: Any) -> dict[str, Any]:
    base = {"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{**base, **choice}]}


NAMED: dict[str, dict[str, Any]] = {
    "finish_reason: [stop]": _chunk(finish_reason=["stop"]),
    "finish_reason: {}": _chunk(finish_reason={}),
    "choices: 5": {**_chunk(), "choices": 5},
    "choices: [5]": {**_chunk(), "choices": [5]},
    "delta: x": _chunk(delta="x"),
    "top_logprobs: 3": _chunk(logprobs={"content": [{"token": "x", "logprob": -1, "top_logprobs": 3}]}),
    "logprobs: {content: 3}": _chunk(logprobs={"content": 3}),
    "logprobs: {tokens: 3}": _chunk(logprobs={"tokens": 3, "token_logprobs": 3}),
    "tool_calls: {}": _chunk(delta={"tool_calls": {}}),
    "tool_calls: [5]": _chunk(delta={"tool_calls": [5]}),
    "usage: []": {**_chunk(), "usage": []},
    "index: '0'": _chunk(index="0"),
}


@pytest.mark.parametrize("name", list(NAMED))
@pytest.mark.parametrize("chat", [True, False])
def test_named_odd_chunks(name: str, chat: bool) -> None:
    chunk = copy.deepcopy(NAMED[name])
    if not chat and isinstance(chunk["choices"], list) and isinstance(chunk["choices"][0], dict):
        chunk["choices"][0]["text"] = chunk["choices"][0].pop("delta")
        if isinstance(chunk["choices"][0]["text"], dict):
            chunk["choices"][0]["text"] = chunk["choices"][0]["text"].get("content", "x")
    finish = _chunk(delta={}, finish_reason="stop")
    ctx = ResponseContext(model="m", chat=chat, logprobs=True, top_logprobs=2, include_usage=True)
    assert_well_ended(run_stream([json.dumps(chunk), json.dumps(finish), "[DONE]"], ctx))
    body = copy.deepcopy(chunk)
    for choice in body["choices"] if isinstance(body["choices"], list) else []:
        if isinstance(choice, dict) and "delta" in choice:
            choice["message"] = choice.pop("delta")
    _plain(normalize_chat if chat else normalize_completion, body, ctx)


@pytest.mark.patches_internals
def test_a_fault_of_the_gateways_own_is_one_error_event_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the normaliser (a test double: a helper made to raise, since no input provokes one
    now) still ends the stream with one error event, and the log names the response."""

    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_parts, "usage", broken)
    ctx = ResponseContext(model="m", include_usage=True)
    with caplog.at_level(logging.ERROR):
        out = run_stream([json.dumps({**_chunk(), "usage": {"prompt_tokens": 1}}), "[DONE]"], ctx)
    assert_well_ended(out)
    assert b"server_error" in out[-1] and ctx.response_id.encode() in out[-1]
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert ctx.response_id in record.getMessage() and record.exc_info is not None
    with caplog.at_level(logging.ERROR), pytest.raises(OpenAIError) as raised:
        normalize_chat({"choices": [], "usage": {"prompt_tokens": 1}}, ctx)
    assert raised.value.status == 502 and ctx.response_id in raised.value.message


@pytest.mark.parametrize(
    ("chat", "field", "where"),
    [
        (True, ("message", "content"), "choices[1].message.content"),
        (True, ("message", "refusal"), "choices[1].message.refusal"),
        (True, ("finish_reason",), "choices[1].finish_reason"),
        (False, ("text",), "choices[1].text"),
        (False, ("finish_reason",), "choices[1].finish_reason"),
    ],
)
def test_a_text_field_of_the_wrong_type_is_named_in_the_502(chat: bool, field: tuple[str, ...], where: str) -> None:
    """The name of the field (built only when it is refused) says which choice and which field."""
    first = {"index": 0, "message": {"role": "assistant", "content": "a"}, "text": "a", "finish_reason": "stop"}
    second = copy.deepcopy(first)
    part = second
    for key in field[:-1]:
        part = part[key]
    part[field[-1]] = 7
    body = {"id": "x", "object": "o", "created": 1, "model": "m", "choices": [first, second]}
    normalize = normalize_chat if chat else normalize_completion
    with pytest.raises(OpenAIError) as caught:
        normalize(body, ResponseContext(model="m", chat=chat, repair=RepairPlan()))
    assert caught.value.status == 502
    assert f"the upstream sent {where} as a number" in caught.value.message
