"""The response path through the running gateway: text after an early finish (issue 19), odd JSON
from the backend, and the bound on what one upstream event or body may hold.

Whatever the backend sends, the client gets either the official answer or an official error: a
plain 502 in the four-key shape, or, once a stream has started, one ``data: {"error": …}`` event
and the end of the stream, never a cut connection or a bare 500.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _fake import call
from _servers import Canned, Replayer

from oaishim.check import check, exchange_from_bytes
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion

IN_PROCESS = True  # the gateway app in process, behind _fake.FakeUpstream (conftest)

MiB = 1024 * 1024
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LEGACY = {"model": "m", "prompt": "hi"}


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return call(url + path, "POST", body)


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


def chunk(index: int, finish: Any = None, **delta: Any) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}


def text_chunk(text: str, finish: Any = None) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {"id": "cmpl-up", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


def events(raw: bytes) -> list[Any]:
    blocks = [b for b in raw.split(b"\n\n") if b]
    assert all(b.startswith(b"data: ") for b in blocks), raw[-200:]
    return [b[6:].decode() if b == b"data: [DONE]" else json.loads(b[6:]) for b in blocks]


def clean(raw: bytes, request: dict[str, Any], status: int = 200, content_type: str = "text/event-stream") -> None:
    exchange = exchange_from_bytes(raw, request=request, status=status, headers={"content-type": content_type})
    assert [(f.rule, f.chunk, f.message) for f in check(exchange) if f.severity == "error"] == []


def stream_error(raw: bytes) -> dict[str, Any]:
    """The one error event a failed stream ends with (nothing after it, no [DONE])."""
    got = events(raw)
    assert [e for e in got if isinstance(e, dict) and "error" in e] == [got[-1]]
    error: dict[str, Any] = got[-1]["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "server_error"
    return error


# ---------------------------------------------------------------------------------------------------
# Issue 19: text after an early finish


ISSUE = sse(
    chunk(0, role="assistant", content=""),
    chunk(0, content="Hello"),
    chunk(0, "stop"),
    chunk(0, content=" world."),
    "[DONE]",
)
TWO = sse(
    chunk(0, role="assistant", content=""),
    chunk(1, role="assistant", content=""),
    chunk(0, content="Hello"),
    chunk(0, "stop"),
    chunk(1, content="Bye"),
    chunk(0, content=" world."),
    chunk(1, "stop"),
    "[DONE]",
)
PIECES = (0, 1, 7, 64)  # TCP pieces of that many bytes (0: the body at once)


@pytest.mark.parametrize("piece", PIECES)
def test_issue_19_text_after_the_finish_reaches_the_client(backend: Replayer, gateways: Any, piece: int) -> None:
    backend.push(Canned(ISSUE, content_type="text/event-stream", piece=piece))
    request = {**CHAT, "stream": True}
    status, _, raw = post(gateways(), "/v1/chat/completions", request)
    assert status == 200
    got = events(raw)
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    (choice,) = accumulate_chat(chunks)["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("Hello world.", "stop")
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert chunks[-1]["choices"][0]["delta"] == {}
    clean(raw, request)


@pytest.mark.parametrize("piece", PIECES)
def test_issue_19_legacy_completions(backend: Replayer, gateways: Any, piece: int) -> None:
    body = sse(text_chunk("Hello"), text_chunk("", "length"), text_chunk(" world."), "[DONE]")
    backend.push(Canned(body, content_type="text/event-stream", piece=piece))
    request = {**LEGACY, "stream": True}
    status, _, raw = post(gateways(), "/v1/completions", request)
    assert status == 200
    got = events(raw)
    assert got[-1] == "[DONE]"
    (choice,) = accumulate_completion(got[:-1])["choices"]
    assert (choice["text"], choice["finish_reason"]) == ("Hello world.", "length")
    assert [c["choices"][0]["finish_reason"] for c in got[:-1]][-1:] == ["length"]
    clean(raw, request)


@pytest.mark.parametrize("piece", PIECES)
def test_issue_19_two_choices(backend: Replayer, gateways: Any, piece: int) -> None:
    backend.push(Canned(TWO, content_type="text/event-stream", piece=piece))
    request = {**CHAT, "stream": True, "n": 2}
    status, _, raw = post(gateways(), "/v1/chat/completions", request)
    assert status == 200
    got = events(raw)
    chunks = got[:-1]
    texts = {c["index"]: c["message"]["content"] for c in accumulate_chat(chunks)["choices"]}
    assert texts == {0: "Hello world.", 1: "Bye"}
    assert [c["choices"][0]["finish_reason"] for c in chunks[-2:]] == ["stop", "stop"]
    clean(raw, request)


# ---------------------------------------------------------------------------------------------------
# Odd JSON from the backend


ODD_STREAMS = {
    "finish_reason is an array": chunk(0, ["stop"], content="x"),
    "choices is a number": {**chunk(0), "choices": 5},
    "delta is a string": {**chunk(0), "choices": [{"index": 0, "delta": "x", "finish_reason": None}]},
    "index is a string": {**chunk(0), "choices": [{"index": "0", "delta": {"content": "x"}}]},
}


@pytest.mark.parametrize("name", list(ODD_STREAMS))
def test_an_odd_chunk_ends_the_stream_with_one_error_event(backend: Replayer, gateways: Any, name: str) -> None:
    body = sse(chunk(0, role="assistant", content=""), chunk(0, content="Hi"), ODD_STREAMS[name], "[DONE]")
    backend.push(Canned(body, content_type="text/event-stream"))
    status, headers, raw = post(gateways(), "/v1/chat/completions", {**CHAT, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    error = stream_error(raw)
    assert "cannot be read" in error["message"]
    clean(raw, {**CHAT, "stream": True})


def test_odd_logprobs_and_usage_are_read_as_absent(backend: Replayer, gateways: Any) -> None:
    """Annotations in a wrong shape are not the answer: the answer still arrives whole."""
    odd = chunk(0, content=" there")
    odd["choices"][0]["logprobs"] = {"content": [{"token": "a", "logprob": -1, "top_logprobs": 3}]}
    body = sse(chunk(0, role="assistant", content=""), odd, chunk(0, "stop"), {**chunk(0), "choices": [], "usage": []})
    backend.push(Canned(body + b"data: [DONE]\n\n", content_type="text/event-stream"))
    request = {**CHAT, "stream": True, "logprobs": True, "top_logprobs": 1}
    status, _, raw = post(gateways(), "/v1/chat/completions", request)
    assert status == 200
    got = events(raw)
    assert got[-1] == "[DONE]"
    assert accumulate_chat(got[:-1])["choices"][0]["message"]["content"] == " there"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"id": "x", "object": "chat.completion", "choices": 5}),
        ("/v1/chat/completions", {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": ["stop"]}]}),
        ("/v1/chat/completions", {"choices": [{"index": 0, "message": {"content": 5}}]}),
        ("/v1/completions", {"choices": [5]}),
        ("/v1/completions", {"choices": [{"index": 0, "text": "x", "logprobs": {"tokens": 3}}]}),
    ],
)
def test_an_odd_plain_body_is_an_official_502(backend: Replayer, gateways: Any, path: str, body: Any) -> None:
    backend.push(Canned(json.dumps(body).encode()))
    request = {**(CHAT if "chat" in path else LEGACY), "logprobs": True if "chat" in path else 1}
    status, headers, raw = post(gateways(), path, request)
    if status == 200:  # logprobs in a wrong shape are read as absent
        assert json.loads(raw)["choices"][0]["text"] == "x"
        return
    assert status == 502 and headers["content-type"].startswith("application/json"), raw
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "server_error"
    clean(raw, request, 502, "application/json")


# ---------------------------------------------------------------------------------------------------
# A bound on one upstream event and one plain body


def test_an_endless_sse_line_is_a_502_event_not_unbounded_memory(backend: Replayer, gateways: Any) -> None:
    body = sse(chunk(0, role="assistant", content=""), chunk(0, content="Hi")) + b"data: " + b"x" * (3 * MiB)
    backend.push(Canned(body, content_type="text/event-stream", piece=64 * 1024))
    request = {**CHAT, "stream": True}
    status, _, raw = post(gateways(max_upstream_event_bytes=MiB), "/v1/chat/completions", request)
    assert status == 200
    error = stream_error(raw)
    assert error["code"] == "upstream_response_too_large" and str(MiB) in error["message"]
    assert accumulate_chat(events(raw)[:-1])["choices"][0]["message"]["content"] == "Hi"  # what came first is kept


def test_many_data_lines_of_one_event_count_together(backend: Replayer, gateways: Any) -> None:
    line = b"data: " + b"y" * 1000 + b"\n"
    body = sse(chunk(0, role="assistant", content="")) + line * 2000  # 2 MB, never dispatched
    backend.push(Canned(body, content_type="text/event-stream", piece=64 * 1024))
    status, _, raw = post(gateways(max_upstream_event_bytes=MiB), "/v1/chat/completions", {**CHAT, "stream": True})
    assert status == 200 and stream_error(raw)["code"] == "upstream_response_too_large"


def test_a_large_plain_body_is_an_official_502(backend: Replayer, gateways: Any) -> None:
    big = json.dumps({"choices": [{"index": 0, "message": {"content": "z" * (2 * MiB)}, "finish_reason": "stop"}]})
    for headers in ({}, {"content-length": str(len(big))}):
        # without a length (read to the close) the gateway stops at the bound; with one it refuses at once
        backend.push(Canned(big.encode(), piece=64 * 1024, headers=headers))
        status, _, raw = post(gateways(max_upstream_event_bytes=MiB), "/v1/chat/completions", CHAT)
        assert status == 502, raw[:200]
        assert json.loads(raw)["error"]["code"] == "upstream_response_too_large"
        clean(raw, CHAT, 502, "application/json")


def test_events_and_bodies_under_the_bound_pass(backend: Replayer, gateways: Any) -> None:
    text = "w" * (MiB // 2)
    backend.push(Canned(sse(chunk(0, content=text), chunk(0, "stop"), "[DONE]"), content_type="text/event-stream"))
    status, _, raw = post(gateways(max_upstream_event_bytes=MiB), "/v1/chat/completions", {**CHAT, "stream": True})
    assert status == 200 and accumulate_chat(events(raw)[:-1])["choices"][0]["message"]["content"] == text
    body = {"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}]}
    backend.push(Canned(json.dumps(body).encode()))
    status, _, raw = post(gateways(max_upstream_event_bytes=MiB), "/v1/chat/completions", CHAT)
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == text


# ---------------------------------------------------------------------------------------------------
# The setting


def test_the_bound_from_flag_environment_and_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from oaishim.server.config import ConfigError, build_settings

    monkeypatch.delenv("OAISHIM_MAX_UPSTREAM_EVENT_MB", raising=False)
    monkeypatch.delenv("OAISHIM_CONFIG", raising=False)
    assert build_settings(upstream="http://u:1").max_upstream_event_bytes == 16 * MiB
    path = tmp_path / "gateway.toml"
    path.write_text("max_upstream_event_mb = 4\n")
    assert build_settings(upstream="http://u:1", config=path).max_upstream_event_bytes == 4 * MiB
    monkeypatch.setenv("OAISHIM_MAX_UPSTREAM_EVENT_MB", "0.5")
    assert build_settings(upstream="http://u:1", config=path).max_upstream_event_bytes == MiB // 2
    assert build_settings(upstream="http://u:1", max_upstream_event_mb=64).max_upstream_event_bytes == 64 * MiB
    monkeypatch.setenv("OAISHIM_MAX_UPSTREAM_EVENT_MB", "lots")
    with pytest.raises(ConfigError, match="max_upstream_event_mb: expected a number"):
        build_settings(upstream="http://u:1")


def test_the_serve_flag_reaches_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``oaishim serve --max-upstream-event-mb``; the server start is replaced by one that records
    the settings it was given (starting the server is not what this is about)."""
    import oaishim.server.main
    from oaishim.commands.main import main

    started: list[Any] = []
    monkeypatch.delenv("OAISHIM_MAX_UPSTREAM_EVENT_MB", raising=False)
    monkeypatch.setattr(oaishim.server.main, "serve", lambda settings, **_: started.append(settings))
    assert main(["serve", "--upstream", "http://u:1", "--max-upstream-event-mb", "2"]) == 0
    assert started[0].max_upstream_event_bytes == 2 * MiB
