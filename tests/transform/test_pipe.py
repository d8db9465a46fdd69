"""The stream pipe on its own: upstream bytes in, the official stream out, at every split point.

What the gateway's clients see of a stream is decided here (``transform.pipe.StreamPipe``), with no
socket: the official order (one role chunk per choice, deltas, the finish alone in ``delta: {}``,
usage with ``choices: []`` only when asked, ``[DONE]``), the stop at the gateway (``close_upstream``),
the one error event for everything that breaks, and the encoder seam (the same normalised chunks for
any encoder).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from _pipes import every_split, feed_until_closed, run

from oaishim.check import check, exchange_from_bytes
from oaishim.transform.context import ResponseContext
from oaishim.transform.encode import ChatSSEEncoder, Encoder
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan
from oaishim.wire.errors import OpenAIError

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def chunk(finish: Any = None, usage: Any = None, **delta: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "up-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [choice],
        "usage": usage,
    }


def sse(*events: Mapping[str, Any] | str) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


UPSTREAM = sse(
    chunk(role="assistant", content=""),
    chunk(content="Hel"),
    chunk(content="lo"),
    chunk("stop"),
    {"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "up", "choices": [], "usage": USAGE},
    "[DONE]",
)


def events(raw: bytes) -> list[Any]:
    blocks = [b for b in raw.split(b"\n\n") if b]
    assert all(b.startswith(b"data: ") for b in blocks), raw
    return [b[6:].decode() if b == b"data: [DONE]" else json.loads(b[6:]) for b in blocks]


def errors_in(raw: bytes) -> list[str]:
    exchange = exchange_from_bytes(raw, request=REQUEST, status=200, headers={"content-type": "text/event-stream"})
    return [f"{f.rule}: {f.message}" for f in check(exchange) if f.severity == "error"]


@pytest.mark.parametrize("usage", [False, True])
def test_the_official_order_at_every_split(usage: bool) -> None:
    ctx = ResponseContext(model="m", include_usage=usage)
    request = {**REQUEST, "stream_options": {"include_usage": True}} if usage else REQUEST
    for pieces in every_split(UPSTREAM):
        raw, pipe = run(pieces, ctx)
        got = events(raw)
        assert got[-1] == "[DONE]" and pipe.ended and not pipe.close_upstream
        body = got[:-1]
        assert {c["id"] for c in body} == {ctx.response_id} and {c["model"] for c in body} == {"m"}
        deltas = [c["choices"][0]["delta"] for c in body if c["choices"]]
        assert deltas == [
            {"role": "assistant", "content": "", "refusal": None},
            {"content": "Hel"},
            {"content": "lo"},
            {},
        ]
        assert [c["choices"][0]["finish_reason"] for c in body if c["choices"]] == [None, None, None, "stop"]
        if usage:  # the usage chunk last, with no choices; null usage on every other chunk
            assert (body[-1]["choices"], body[-1]["usage"]) == ([], USAGE)
            assert all(c["usage"] is None for c in body[:-1])
        else:
            assert all("usage" not in c for c in body)
        exchange = exchange_from_bytes(raw, request=request, status=200, headers={"content-type": "text/event-stream"})
        assert [f.message for f in check(exchange) if f.severity == "error"] == []


def test_a_body_for_a_stream_gives_the_same_stream_at_every_split() -> None:
    """A backend that ignored ``stream: true`` answers with one JSON body: the client still gets the
    official stream, the same chunks as from the backend's own stream of that answer."""
    body = {"id": "up-1", "object": "chat.completion", "created": 1, "model": "up", "usage": USAGE}
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]
    ctx = ResponseContext(model="m", include_usage=True, response_id="chatcmpl-x", created=5)
    want = events(run([sse(chunk(role="assistant", content="Hello"), chunk("stop", USAGE), "[DONE]")], ctx)[0])
    raw = json.dumps(body).encode()
    for pieces in every_split(raw):
        assert events(run(pieces, ctx, sse=False)[0]) == want


def test_a_stop_at_the_gateway_closes_the_upstream_in_the_read_that_found_it() -> None:
    ctx = ResponseContext(model="m", repair=RepairPlan(stops=("END",)))
    upstream = sse(chunk(role="assistant", content=""), chunk(content="one END two"), chunk(content=" three"))
    for pieces in every_split(upstream + b"data: {half"):
        pipe = StreamPipe(ctx)
        out = feed_until_closed(pipe, pieces)
        assert pipe.close_upstream and pipe.ended  # nothing after the stop is needed: the end is out
        assert b"".join(pipe.feed(piece) for piece in pieces) == b""  # whatever comes later
        assert pipe.flush() == b"" and pipe.feed(b"data: [DONE]\n\n") == b""
        got = events(out)
        assert (
            got[-1] == "[DONE]" and "".join(c["choices"][0]["delta"].get("content") or "" for c in got[:-1]) == "one "
        )
        assert got[-2]["choices"][0]["finish_reason"] == "stop" and errors_in(out) == []


@pytest.mark.parametrize(
    ("tail", "code"),
    [
        (sse({"error": {"message": "boom", "type": "server_error"}}), None),  # an error event from the backend
        (b"error: the slot died\n\n", None),  # old llama.cpp: an `error:` line
        (sse(chunk(content=5)), None),  # odd JSON: content not a string
        (b"data: not json\n\n", None),
        (b"data: " + b"x" * 2000 + b"\n\n", "upstream_response_too_large"),  # over max_event
    ],
)
def test_what_breaks_ends_in_one_error_event_and_closes_the_upstream(tail: bytes, code: str | None) -> None:
    head = sse(chunk(role="assistant", content=""), chunk(content="Hi"))
    for pieces in every_split(head + tail + sse(chunk(content="late"), chunk("stop"), "[DONE]")):
        raw, pipe = run(pieces, ResponseContext(model="m"), max_event=1000)
        got = events(raw)
        assert pipe.close_upstream and "error" in got[-1], got
        assert [e for e in got if "error" in e] == [got[-1]] and "[DONE]" not in got
        assert set(got[-1]["error"]) == {"message", "type", "param", "code"} and got[-1]["error"]["code"] == code
        if not tail.startswith(b"error:"):  # an `error:` line fails the stream at the end of the read it is in
            assert not any(c.get("choices") and c["choices"][0]["delta"].get("content") == "late" for c in got[:-1])


def test_a_stream_that_just_stops_fails_and_a_failure_from_the_shell_comes_last() -> None:
    ctx = ResponseContext(model="m")
    raw, _ = run([sse(chunk(role="assistant", content=""), chunk(content="Hi"))], ctx)
    assert "the upstream stream ended before choice 0 finished" in events(raw)[-1]["error"]["message"]
    pipe = StreamPipe(ctx)
    out = pipe.feed(sse(chunk(role="assistant", content=""), chunk(content="Hi"), chunk("stop")))
    broke = OpenAIError(502, "The upstream connection broke", "server_error", code="upstream_disconnected")
    out += pipe.fail(broke)
    got = events(out)
    assert got[-1]["error"]["code"] == "upstream_disconnected" and pipe.close_upstream
    assert all(c["choices"][0]["finish_reason"] is None for c in got[:-1])  # the held finish is not sent
    assert pipe.flush() == b"" and pipe.fail(broke) == b""


class Recording:
    """An encoder that keeps what it is given (what a second output format would be fed)."""

    def __init__(self) -> None:
        self.chunks: list[Mapping[str, Any]] = []
        self.endings: list[str | OpenAIError] = []

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        self.chunks.append(chunk)
        return [b"c"]

    def fail(self, error: OpenAIError) -> list[bytes]:
        self.endings.append(error)
        return [b"f"]

    def end(self) -> list[bytes]:
        self.endings.append("end")
        return [b"e"]


def test_another_encoder_gets_the_chunks_the_chat_encoder_writes() -> None:
    ctx = ResponseContext(model="m", include_usage=True, repair=RepairPlan(reasoning=True))
    upstream = sse(chunk(role="assistant", content="<think>hm</think>Hi"), chunk("stop"), chunk(usage=USAGE), "[DONE]")
    for pieces in every_split(upstream):
        encoder = Recording()
        wired: Encoder = encoder
        raw, _ = run(pieces, ctx, encoder=wired)
        assert raw == b"c" * len(encoder.chunks) + b"e" and encoder.endings == ["end"]
        chat, _ = run(pieces, ctx, encoder=ChatSSEEncoder())
        assert [*encoder.chunks, "[DONE]"] == events(chat)
    encoder = Recording()
    raw, _ = run([sse(chunk(role="assistant", content="Hi"), {"error": {"message": "x"}})], ctx, encoder=encoder)
    assert raw.endswith(b"f") and len(encoder.endings) == 1 and isinstance(encoder.endings[0], OpenAIError)
