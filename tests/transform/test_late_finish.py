"""Issue 19: text that a backend sends after its finish_reason reaches the client, before the finish.

A backend may send a choice's finish chunk before the last piece of that choice's content. The
gateway holds the finish until the stream really ends (the upstream's ``[DONE]``, the end of the
body, or a stop at the gateway), so the client gets every piece, then the finish alone in its own
``delta: {}`` chunk, then usage when asked, then ``[DONE]``; the checker finds the output clean.

Each upstream stream is decoded from its raw bytes cut in two at every offset, as the relay sees
them from the network.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _pipes import every_split

from oaishim.check import check, exchange_from_bytes
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion


def sse(*chunks: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c).encode()) + b"\n\n" for c in chunks
    )


def chat(choices: list[dict[str, Any]], usage: Any = ...) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-up1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
    }
    if usage is not ...:
        chunk["usage"] = usage
    return chunk


def delta(index: int, finish: str | None = None, logprobs: Any = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "logprobs": logprobs, "finish_reason": finish}


def legacy(text: str, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
    return {"id": "cmpl-up1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


# The stream of the issue, as a vLLM-style backend sends it.
ISSUE = sse(
    chat([delta(0, role="assistant", content="")]),
    chat([delta(0, content="Hello")]),
    chat([delta(0, "stop")]),
    chat([delta(0, content=" world.")]),
    "[DONE]",
)
LEGACY = sse(legacy("Hello"), legacy("", "length"), legacy(" world."), "[DONE]")
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
# n = 2: choice 0 finishes early and sends more text; choice 1 finishes normally, after it.
TWO = sse(
    chat([delta(0, role="assistant", content="")]),
    chat([delta(1, role="assistant", content="")]),
    chat([delta(0, content="Hello")]),
    chat([delta(0, "stop")]),
    chat([delta(1, content="Bye")]),
    chat([delta(0, content=" world.")]),
    chat([delta(1, content=" now.")]),
    chat([delta(1, "length")]),
    chat([], USAGE),
    "[DONE]",
)


def relay(raw_pieces: list[bytes], ctx: ResponseContext) -> bytes:
    """What the relay does with the upstream bytes: the stream pipe, flushed at the end of the body."""
    pipe = StreamPipe(ctx)
    return b"".join(pipe.feed(piece) for piece in raw_pieces) + pipe.flush()


def client_chunks(out: bytes) -> list[dict[str, Any]]:
    events = [e for e in out.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]", events[-1]
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all("error" not in c for c in chunks)
    return chunks


def assert_official(out: bytes, request: dict[str, Any]) -> None:
    exchange = exchange_from_bytes(out, request=request, status=200, headers={"content-type": "text/event-stream"})
    assert [(f.rule, f.chunk, f.message) for f in check(exchange) if f.severity in ("error", "warning")] == []


def finishes(chunks: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(chunk number, choice index, finish_reason) of every finish the client saw."""
    return [
        (n, c["index"], c["finish_reason"]) for n, k in enumerate(chunks) for c in k["choices"] if c["finish_reason"]
    ]


CHAT_REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_chat_text_after_the_finish_arrives_before_it_at_every_split_point() -> None:
    for pieces in every_split(ISSUE):
        out = relay(pieces, ResponseContext(model="m"))
        chunks = client_chunks(out)
        (choice,) = accumulate_chat(chunks)["choices"]
        assert (choice["message"]["content"], choice["finish_reason"]) == ("Hello world.", "stop"), pieces
        # one finish, in the last chunk before [DONE], alone
        assert finishes(chunks) == [(len(chunks) - 1, 0, "stop")]
        assert chunks[-1]["choices"][0]["delta"] == {}
        assert_official(out, CHAT_REQUEST)


def test_legacy_text_after_the_finish_arrives_before_it_at_every_split_point() -> None:
    request = {"model": "m", "prompt": "hi", "stream": True}
    for pieces in every_split(LEGACY):
        out = relay(pieces, ResponseContext(model="m", chat=False))
        chunks = client_chunks(out)
        (choice,) = accumulate_completion(chunks)["choices"]
        assert (choice["text"], choice["finish_reason"]) == ("Hello world.", "length"), pieces
        assert finishes(chunks) == [(len(chunks) - 1, 0, "length")]
        assert chunks[-1]["choices"][0]["text"] == ""
        assert_official(out, request)


def test_two_choices_one_finishing_early_at_every_split_point() -> None:
    request = {**CHAT_REQUEST, "n": 2, "stream_options": {"include_usage": True}}
    for pieces in every_split(TWO):
        out = relay(pieces, ResponseContext(model="m", include_usage=True))
        chunks = client_chunks(out)
        texts = {c["index"]: (c["message"]["content"], c["finish_reason"]) for c in accumulate_chat(chunks)["choices"]}
        assert texts == {0: ("Hello world.", "stop"), 1: ("Bye now.", "length")}, pieces
        # both finishes after every content delta, in the order the upstream sent them; usage last
        n = len(chunks)
        assert finishes(chunks) == [(n - 3, 0, "stop"), (n - 2, 1, "length")]
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == USAGE
        assert_official(out, request)


def test_tool_calls_reasoning_and_logprobs_after_the_finish() -> None:
    """Everything a choice carries, when it comes after the finish, comes before it, in order."""
    lp = {"content": [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]}
    call = {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "f", "arguments": ""}}
    raw = sse(
        chat([delta(0, role="assistant", content=None)]),
        chat([delta(0, reasoning_content="think")]),
        chat([delta(0, "tool_calls")]),
        chat([delta(0, reasoning_content=" more")]),
        chat([delta(0, tool_calls=[call])]),
        chat([delta(0, tool_calls=[{"index": 0, "function": {"arguments": '{"a": 1}'}}])]),
        "[DONE]",
    )
    for pieces in every_split(raw):
        chunks = client_chunks(relay(pieces, ResponseContext(model="m", tool_mode="auto")))
        (choice,) = accumulate_chat(chunks)["choices"]
        assert choice["message"]["reasoning_content"] == "think more"
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [
            ("f", '{"a": 1}')
        ]
        assert finishes(chunks) == [(len(chunks) - 1, 0, "tool_calls")]
    raw = sse(
        chat([delta(0, role="assistant", content="")]),
        chat([delta(0, logprobs=lp, content="x")]),
        chat([delta(0, "stop")]),
        chat([delta(0, logprobs=lp, content="x")]),
        "[DONE]",
    )
    for pieces in every_split(raw):
        chunks = client_chunks(relay(pieces, ResponseContext(model="m", logprobs=True)))
        (choice,) = accumulate_chat(chunks)["choices"]
        assert choice["message"]["content"] == "xx"
        assert [e["token"] for e in choice["logprobs"]["content"]] == ["x", "x"]
        assert finishes(chunks) == [(len(chunks) - 1, 0, "stop")]


def test_a_body_that_ends_without_done_still_sends_the_held_finish() -> None:
    raw = ISSUE.removesuffix(b"data: [DONE]\n\n")
    chunks = client_chunks(relay([raw], ResponseContext(model="m")))
    assert accumulate_chat(chunks)["choices"][0]["message"]["content"] == "Hello world."
    assert finishes(chunks) == [(len(chunks) - 1, 0, "stop")]


@pytest.mark.parametrize("chat_endpoint", [True, False])
def test_a_stop_at_the_gateway_after_the_upstream_finish_ends_the_text_there(chat_endpoint: bool) -> None:
    """Text after the finish is still the model's: a stop string in it ends the answer at the gateway."""
    plan = RepairPlan(stops=("END",))
    if chat_endpoint:
        raw = sse(chat([delta(0, content="Hello")]), chat([delta(0, "length")]), chat([delta(0, content=" wEND x")]))
    else:
        raw = sse(legacy("Hello"), legacy("", "length"), legacy(" wEND x"))
    for pieces in every_split(raw):
        chunks = client_chunks(relay(pieces, ResponseContext(model="m", chat=chat_endpoint, repair=plan)))
        if chat_endpoint:
            choice = accumulate_chat(chunks)["choices"][0]
            text = choice["message"]["content"]
        else:
            choice = accumulate_completion(chunks)["choices"][0]
            text = choice["text"]
        assert (text, choice["finish_reason"]) == ("Hello w", "stop")
        assert finishes(chunks) == [(len(chunks) - 1, 0, "stop")]


def test_the_checker_reports_text_after_the_finish_on_the_raw_side() -> None:
    """The backend's own stream of the issue is a finding (the probe shows checker findings as they are)."""
    for raw, request in ((ISSUE, CHAT_REQUEST), (LEGACY, {"model": "m", "prompt": "hi", "stream": True})):
        exchange = exchange_from_bytes(raw, request=request, status=200, headers={"content-type": "text/event-stream"})
        found = [(f.rule, f.chunk) for f in check(exchange) if f.rule == "stream.after-finish"]
        late = 3 if raw is ISSUE else 2  # the chunk with the late text
        assert found == [("stream.after-finish", late)]
