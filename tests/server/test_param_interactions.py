"""The issue-15 parameters together through the gateway: a forced ``tool_choice`` retried under a
``response_format``, ``n`` fanned out beside the reports of what an answer violated, and a fanned-out
stream that a copy refuses before its first chunk. In process (``_fake.FakeUpstream``): these are
about what the gateway sends, answers and counts, not sockets. The Ollama bodies are the documented
fixtures of ``tests/fixtures/ollama`` (Ollama ignores ``tool_choice`` and gives one choice); the
context overflow is vLLM's documented first-event error, as any backend may stream it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _fake import gateway, post, sse_answer
from _servers import Canned

from oaishim.server.app import Gateway

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CALL = (FIXTURES / "ollama" / "chat-nonstream-tool-calls.json").read_bytes()
CALL_STREAM = (FIXTURES / "ollama" / "chat-stream-tool-calls.sse").read_bytes()
TEXT = (FIXTURES / "ollama" / "chat-nonstream.json").read_bytes()
TEXT_STREAM = (FIXTURES / "ollama" / "chat-stream.sse").read_bytes()
OVERFLOW_SSE = (FIXTURES / "vllm" / "chat-stream-context-overflow.sse").read_bytes()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}


def metric(app: Gateway, name: str) -> float:
    """The sum of a counter's samples in the gateway's /metrics text."""
    total = 0.0
    for line in app.metrics.render().decode().splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def oaishim_headers(reply: Any) -> dict[str, str]:
    return {k: v for k, v in reply.headers.items() if k.startswith("x-oaishim-")}


def bad_arguments(raw: bytes) -> bytes:
    """The Ollama tool-call answer with its arguments cut (not JSON)."""
    body = json.loads(raw)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    return json.dumps(body).encode()


# -- a forced tool_choice asked again, under a response_format ---------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_the_answer_asked_again_for_the_call_reports_no_format_violation_of_the_first(stream: bool) -> None:
    """The first answer (text, not JSON) is never the client's: what it broke is not reported."""
    first, second = (sse_answer(TEXT_STREAM), sse_answer(CALL_STREAM)) if stream else (Canned(TEXT), Canned(CALL))
    app, fake = gateway("ollama", first, second)
    body = {**ASK, "tool_choice": "required", "response_format": {"type": "json_object"}, "stream": stream}
    reply = post(app, body)
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    assert b"get_weather" in reply.body
    assert "x-oaishim-format-violation" not in reply.headers
    assert metric(app, "oaishim_response_format_violations_total") == 0


# -- n fanned out: what the answer violated is reported as for one request ---------------------------
def test_a_fanned_out_plain_answer_reports_invalid_tool_arguments() -> None:
    app, _ = gateway("ollama", Canned(bad_arguments(CALL)), Canned(CALL))
    reply = post(app, {**ASK, "n": 2})
    assert reply.status == 200 and len(reply.json()["choices"]) == 2
    assert oaishim_headers(reply).get("x-oaishim-violations") == "tool_arguments_invalid"
    assert metric(app, 'oaishim_repairs_total{kind="tool_arguments_invalid"}') == 1


def test_a_fanned_out_stream_counts_invalid_tool_arguments() -> None:
    cut = CALL_STREAM.replace(b'{\\"city\\":\\"Paris\\"}', b'{\\"city\\":\\"Par')
    assert cut != CALL_STREAM
    app, _ = gateway("ollama", sse_answer(cut), sse_answer(CALL_STREAM))
    reply = post(app, {**ASK, "n": 2, "stream": True})
    assert reply.status == 200 and reply.body.endswith(b"data: [DONE]\n\n")
    assert metric(app, 'oaishim_repairs_total{kind="tool_arguments_invalid"}') == 1


# -- n fanned out: a copy refusing the request before any chunk is the HTTP answer -------------------
OK_STREAM = (
    b"".join(
        b"data: " + json.dumps(e).encode() + b"\n\n"
        for e in [
            {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [c]}
            for c in (
                {"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None},
                {"index": 0, "delta": {}, "finish_reason": "stop"},
            )
        ]
    )
    + b"data: [DONE]\n\n"
)
OVERFLOW_JSON = json.dumps(json.loads(OVERFLOW_SSE.split(b"\n", 1)[0].removeprefix(b"data: "))).encode()
REFUSALS = {
    "error event": sse_answer(OVERFLOW_SSE),
    "error line": sse_answer(b"error: " + OVERFLOW_JSON + b"\n\n"),  # old llama.cpp
    "error body": Canned(OVERFLOW_JSON),  # a copy that ignored stream: true answers one JSON body
}


@pytest.mark.parametrize("how", list(REFUSALS))
@pytest.mark.parametrize("refusing", [0, 1], ids=["first-copy", "second-copy"])
def test_a_fanned_out_stream_refused_before_its_first_chunk_is_the_http_error(how: str, refusing: int) -> None:
    answers = [sse_answer(OK_STREAM), sse_answer(OK_STREAM)]
    answers[refusing] = REFUSALS[how]
    if refusing == 1:  # the other copy's first chunk comes after the refusal (a comment, then slowly)
        answers[0] = Canned(b": x\n\n" + OK_STREAM, content_type="text/event-stream", piece=5, delay=0.005)
    app, _ = gateway("llamacpp@0", *answers)
    reply = post(app, {"model": "m", "messages": [{"role": "user", "content": "long"}], "n": 2, "stream": True})
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")


def test_a_fanned_out_stream_that_began_keeps_a_later_refusal_as_its_last_event() -> None:
    late = Canned(b": x\n\n" + OVERFLOW_SSE, content_type="text/event-stream", piece=5, delay=0.002)
    app, _ = gateway("llamacpp@0", sse_answer(OK_STREAM), late)
    reply = post(app, {"model": "m", "messages": [{"role": "user", "content": "long"}], "n": 2, "stream": True})
    assert reply.status == 200
    assert b"context_length_exceeded" in reply.body.rsplit(b"data: ", 1)[1]
