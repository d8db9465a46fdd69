"""``n`` fanned out, the pure part: n upstream answers of one choice each in, one official answer with
choices 0 … n-1 out (``transform.fanin``), and the copies' request bodies (``transform.params.n``).

The stream merge is fed at every interleaving of the copies' bytes and every split of each copy's
body (hypothesis), and judged by the strict checker plus what the checker cannot know: which text
each index carries, the summed usage, one ``[DONE]``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.check import check, exchange_from_bytes
from oaishim.transform.context import ResponseContext
from oaishim.transform.fanin import FanIn, merge_plain, merge_usage
from oaishim.transform.params.n import copy_bodies, copy_seed
from oaishim.transform.repair import RepairPlan
from oaishim.wire.errors import OpenAIError

TEXTS = ["Hello there", "Hi!", "Good day to you"]


def chunk(copy: int, finish: Any = None, **delta: Any) -> dict[str, Any]:
    """A copy's chunk as a backend of one choice sends it (its own id, index 0)."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": f"up-{copy}",
        "object": "chat.completion.chunk",
        "created": 1 + copy,
        "model": "up",
        "choices": [choice],
    }


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def sse(*events: Mapping[str, Any] | str) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


def copy_stream(copy: int, text: str, with_usage: bool = True) -> bytes:
    words = [text[i : i + 4] for i in range(0, len(text), 4)]
    events: list[Mapping[str, Any] | str] = [chunk(copy, role="assistant", content="")]
    events += [chunk(copy, content=w) for w in words]
    events.append(chunk(copy, "stop"))
    if with_usage:
        events.append({**chunk(copy), "choices": [], "usage": usage(7, len(words))})
    events.append("[DONE]")
    return sse(*events)


def events_of(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def request(n: int, include_usage: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "n": n}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def strict_errors(raw: bytes, body: Mapping[str, Any]) -> list[str]:
    exchange = exchange_from_bytes(raw, request=body, status=200, headers={"content-type": "text/event-stream"})
    return [f"{f.rule}: {f.message}" for f in check(exchange) if f.severity == "error"]


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, bool, list[tuple[int, bytes | None]]]:
    """n copies, whether usage is asked, and the order the shell sees their pieces and ends in."""
    n = draw(st.integers(1, 3))
    include_usage = draw(st.booleans())
    pieces: list[list[bytes]] = []
    for copy in range(n):
        raw = copy_stream(copy, TEXTS[copy])
        cuts = sorted(draw(st.sets(st.integers(1, len(raw) - 1), max_size=6)))
        bounds = [0, *cuts, len(raw)]
        pieces.append([raw[a:b] for a, b in itertools.pairwise(bounds)])
    queues: list[list[bytes | None]] = [[*p, None] for p in pieces]  # None: that copy's body ended
    order: list[tuple[int, bytes | None]] = []
    while any(queues):
        copy = draw(st.sampled_from([k for k, q in enumerate(queues) if q]))
        order.append((copy, queues[copy].pop(0)))
    return n, include_usage, order


def run(merger: FanIn, order: list[tuple[int, bytes | None]]) -> bytes:
    out = b""
    for copy, piece in order:
        out += merger.end(copy) if piece is None else merger.feed(copy, piece)
    assert merger.ended
    return out


@examples(60)
@given(schedules())
def test_the_copies_merge_into_the_official_n_stream_at_every_interleaving(
    plan: tuple[int, bool, list[tuple[int, bytes | None]]],
) -> None:
    n, include_usage, order = plan
    ctx = ResponseContext(model="m", include_usage=include_usage)
    raw = run(FanIn(ctx, n), order)
    assert strict_errors(raw, request(n, include_usage)) == []
    events = events_of(raw)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = events[:-1]
    assert {(c["id"], c["created"], c["model"]) for c in chunks} == {(ctx.response_id, ctx.created, "m")}
    body = [c for c in chunks if c["choices"]]
    assert all(len(c["choices"]) == 1 for c in body)
    seen: list[int] = []
    texts: dict[int, str] = {}
    for c in body:
        choice = c["choices"][0]
        index = choice["index"]
        if index not in seen:
            seen.append(index)
            assert choice["delta"].get("role") == "assistant"  # each choice's first chunk is its role chunk
        else:
            assert "role" not in choice["delta"]
        texts[index] = texts.get(index, "") + (choice["delta"].get("content") or "")
    assert seen == list(range(n))  # new indices in order 0, 1, 2 (the SDK's stream helper needs it)
    finishes = [c["choices"][0]["index"] for c in body if c["choices"][0]["finish_reason"] is not None]
    assert sorted(finishes) == list(range(n))
    for index in range(n):
        last = [c for c in body if c["choices"][0]["index"] == index][-1]
        assert last["choices"][0] == {"index": index, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert sorted(texts.values()) == sorted(TEXTS[:n])  # every copy's text, whole, under one index
    if include_usage:
        completion = sum(len(range(0, len(t), 4)) for t in TEXTS[:n])
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == usage(7, completion)  # the prompt once, the completions summed
    else:
        assert all("usage" not in c for c in chunks)


@pytest.mark.parametrize("broken", [0, 1])
def test_one_copy_failing_mid_stream_ends_the_stream_with_one_error_event(broken: int) -> None:
    ctx = ResponseContext(model="m")
    merger = FanIn(ctx, 2)
    good = copy_stream(1 - broken, TEXTS[0])
    bad = sse(chunk(broken, role="assistant", content=""), chunk(broken, content="Hal"))
    bad += sse({"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}})
    out = merger.feed(1 - broken, good[:60]) + merger.feed(broken, bad)
    assert merger.ended and merger.close_upstream
    assert merger.feed(1 - broken, good[60:]) == b"" and merger.end(1 - broken) == b""
    events = events_of(out)
    assert "[DONE]" not in events
    assert [e for e in events if "error" in e] == [events[-1]]
    assert "CUDA out of memory" in events[-1]["error"]["message"]


OVERFLOW = {"error": {"message": "prompt is too long: 9000 > 4096 tokens", "type": "BadRequestError", "code": 400}}


@pytest.mark.parametrize("how", ["event", "error line", "body"])
@pytest.mark.parametrize("refusing", [0, 1])
def test_a_copy_refusing_before_any_chunk_is_the_answers_status_at_every_split_point(how: str, refusing: int) -> None:
    """Nothing reached the client: the shell may answer the copy's error as the HTTP status."""
    raw = {"event": sse(OVERFLOW), "error line": b"error: " + json.dumps(OVERFLOW).encode() + b"\n\n"}.get(
        how, json.dumps(OVERFLOW).encode()
    )
    for cut in range(len(raw) + 1):
        merger = FanIn(ResponseContext(model="m"), 2, sse=[how != "body" or k != refusing for k in range(2)])
        out = merger.feed(refusing, raw[:cut]) + merger.feed(refusing, raw[cut:])
        out += merger.end(refusing)
        assert merger.ended and merger.refused is not None, cut
        assert (merger.refused.status, merger.refused.code) == (400, "context_length_exceeded")
        assert merger.feed(1 - refusing, copy_stream(1 - refusing, TEXTS[0])) == b""
        assert events_of(out)[-1]["error"]["code"] == "context_length_exceeded"  # the event, where it began


@pytest.mark.parametrize("refusing", [0, 1])
def test_a_copy_refusing_after_another_copys_chunk_stays_the_streams_last_event(refusing: int) -> None:
    raw = sse(OVERFLOW)
    begun = sse(chunk(1 - refusing, role="assistant", content="Hel"))
    for cut in range(len(raw) + 1):
        merger = FanIn(ResponseContext(model="m"), 2)
        assert merger.feed(1 - refusing, begun) != b""
        out = merger.feed(refusing, raw[:cut]) + merger.feed(refusing, raw[cut:])
        assert merger.ended and merger.refused is None, cut
        assert events_of(out)[-1]["error"]["code"] == "context_length_exceeded"


def test_a_copy_whose_body_ends_before_its_finish_fails_the_stream() -> None:
    merger = FanIn(ResponseContext(model="m"), 2)
    out = merger.feed(0, copy_stream(0, TEXTS[0]))
    out += merger.feed(1, sse(chunk(1, role="assistant", content=""), chunk(1, content="Hal")))
    out += merger.end(0) + merger.end(1)
    events = events_of(out)
    assert "[DONE]" not in events and "choice 1 ended before it finished" in events[-1]["error"]["message"]


def test_the_shell_failing_ends_the_stream_once() -> None:
    merger = FanIn(ResponseContext(model="m"), 2)
    merger.feed(0, copy_stream(0, TEXTS[0])[:40])
    out = merger.fail(OpenAIError(504, "upstream silent", "server_error"))
    assert (
        events_of(out)[-1]["error"]["message"] == "upstream silent" and merger.fail(OpenAIError(500, "x", "y")) == b""
    )


def test_a_stop_at_the_gateway_closes_that_copy_only() -> None:
    """A stop string cut copy 0 at the gateway: the shell may close that copy now; the others go on."""
    ctx = ResponseContext(model="m", repair=RepairPlan(stops=("there",)))
    merger = FanIn(ctx, 2)
    out = merger.feed(0, sse(chunk(0, role="assistant", content=""), chunk(0, content="Hello there and on")))
    assert merger.closable == [0] and not merger.ended
    out += merger.feed(1, copy_stream(1, TEXTS[1])) + merger.end(1)
    events = events_of(out)
    assert events[-1] == "[DONE]"
    finished = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in events[:-1] if c["choices"]}
    assert finished == {0: "stop", 1: "stop"}
    text0 = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"][0]["index"] == 0)
    assert text0 == "Hello "


def test_a_copy_that_ignored_stream_true_is_read_as_its_one_body() -> None:
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "up", "usage": usage(7, 2)}
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "length"}]
    ctx = ResponseContext(model="m", include_usage=True)
    merger = FanIn(ctx, 2, sse=[True, False])
    out = merger.feed(0, copy_stream(0, TEXTS[0])) + merger.feed(1, json.dumps(body).encode()) + merger.end(0)
    out += merger.end(1)
    assert strict_errors(out, request(2, True)) == []
    events = events_of(out)
    assert events[-2]["usage"] == usage(7, 3 + 2)
    assert {c["choices"][0]["finish_reason"] for c in events[:-2] if c["choices"][0]["finish_reason"]} == {
        "stop",
        "length",
    }


def test_usage_counts_the_prompt_once_and_sums_the_completions() -> None:
    one = {
        **usage(79, 10),
        "completion_tokens_details": {"reasoning_tokens": 2},
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    two = {
        **usage(79, 32),
        "completion_tokens_details": {"reasoning_tokens": 5},
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    merged = merge_usage([one, two])
    assert merged == {
        "prompt_tokens": 79,
        "completion_tokens": 42,
        "total_tokens": 121,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    assert merge_usage([one, None]) is None  # not made up where a copy did not count


def test_plain_bodies_merge_in_copy_order() -> None:
    def body(text: str, completion: int) -> dict[str, Any]:
        message = {"role": "assistant", "content": text}
        out = {"id": "x", "object": "chat.completion", "created": 1, "model": "up", "usage": usage(5, completion)}
        out["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        return out

    merged = merge_plain([body("a", 1), body("b", 2), body("c", 3)])
    assert [c["message"]["content"] for c in merged["choices"]] == ["a", "b", "c"]
    assert merged["usage"] == usage(5, 6)
    assert "usage" not in merge_plain([body("a", 1), {**body("b", 2), "usage": None}])


def test_copies_get_distinct_reproducible_seeds_and_none_without_one() -> None:
    body = {"model": "m", "messages": [], "n": 3, "seed": 4294967294}
    bodies = copy_bodies(body, 3)
    seeds = [b["seed"] for b in bodies]
    assert seeds[0] == 4294967294 and len(set(seeds)) == 3  # copy 0 keeps the client's seed
    assert seeds == [b["seed"] for b in copy_bodies(body, 3)]  # the same request gives the same seeds
    assert all(0 <= s < 2**31 for s in seeds[1:])  # in every backend's range, never llama.cpp's "random"
    assert all("n" not in b for b in bodies)
    assert copy_bodies(body, 2, first=1)[0]["seed"] == seeds[1]  # numbered as copies, wherever they start
    assert all("seed" not in b for b in copy_bodies({"model": "m", "n": 2}, 2))
    assert copy_seed(-5, 1) != copy_seed(-5, 2)
