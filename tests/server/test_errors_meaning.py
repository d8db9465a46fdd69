"""Errors by meaning through the gateway, for every backend's shape of them: a context overflow is
OpenAI's 400 ``context_length_exceeded`` blaming ``messages`` (chat), ``prompt`` (completions) or
``input`` (Responses), whatever status the backend used (400, a 500, or a 200 stream whose first
event is the error); a rate limit is a 429 with the backend's ``Retry-After`` and ``x-ratelimit-*``;
a backend still loading its model is a 503. Plain and streamed, each endpoint.

Bodies: recorded where a recording exists (tests/fixtures/recorded/llamacpp-server), else the
documented ones in tests/fixtures/<backend>/ (written from backend-quirks.md, see its README).
Expected values are OpenAI's (openai-wire-format.md §5), written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _fake import call
from _servers import Canned, Replayer

IN_PROCESS = True  # the gateway app in process, behind _fake.FakeUpstream (conftest)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED_LLAMA = FIXTURES / "recorded" / "llamacpp-server"

# (profile, upstream status, content type, body file, where it comes from)
OVERFLOWS = [
    ("llamacpp@b9174", 400, "application/json", RECORDED_LLAMA / "ls.err_ctx_overflow.body", "recorded"),
    (
        "llamacpp@b9174",
        500,
        "application/json",
        FIXTURES / "llamacpp" / "error-context-exceeded-500.json",
        "documented",
    ),
    ("vllm@0.32", 400, "application/json", FIXTURES / "vllm" / "error-context-overflow.json", "documented"),
    ("sglang", 400, "application/json", FIXTURES / "sglang" / "error-context-overflow.json", "documented"),
    ("trtllm@1.4", 400, "application/json", FIXTURES / "trtllm" / "error-context-overflow.json", "documented"),
    # a 200 that carries the error: the stream's first event (V-36)
    ("vllm@0.32", 200, "text/event-stream", FIXTURES / "vllm" / "chat-stream-context-overflow.sse", "documented"),
]
# endpoint path, request, the param OpenAI blames
ENDPOINTS = [
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "long"}]}, "messages"),
    ("/v1/completions", {"model": "m", "prompt": "long"}, "prompt"),
    ("/v1/responses", {"model": "m", "input": "long"}, "input"),
]


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return call(url + path, "POST", body)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("path", "request_body", "param"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
@pytest.mark.parametrize(
    ("profile", "status", "content_type", "file", "origin"), OVERFLOWS, ids=[f"{o[0]}-{o[3].stem}" for o in OVERFLOWS]
)
def test_a_context_overflow_is_openais_400_for_every_backend(
    backend: Replayer,
    gateways: Any,
    profile: str,
    status: int,
    content_type: str,
    file: Path,
    origin: str,
    path: str,
    request_body: dict[str, Any],
    param: str,
    stream: bool,
) -> None:
    if content_type == "text/event-stream" and not stream:
        pytest.skip("a stream answer to a plain request is another test (a backend ignoring stream: false)")
    raw = file.read_bytes()
    for piece in (0, 7) if stream else (0,):
        backend.push(Canned(raw, status=status, content_type=content_type, piece=piece))
        got, headers, out = post(gateways(profile), path, {**request_body, "stream": stream})
        assert got == 400, out[:300]
        assert headers["content-type"].startswith("application/json")
        error = json.loads(out)["error"]
        assert (error["type"], error["param"], error["code"]) == (
            "invalid_request_error",
            param,
            "context_length_exceeded",
        )


RATE_LIMITED = Canned(
    b'{"error":{"message":"Too many requests","type":"rate_limit_error","code":429}}',
    status=429,
    headers={"Retry-After": "7", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "7s"},
)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("path", "request_body", "param"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_a_rate_limit_is_a_429_with_the_backends_retry_headers(
    backend: Replayer, gateways: Any, path: str, request_body: dict[str, Any], param: str, stream: bool
) -> None:
    backend.push(RATE_LIMITED)
    got, headers, out = post(gateways("vllm@0.32"), path, {**request_body, "stream": stream})
    assert got == 429
    assert json.loads(out)["error"]["type"] == "rate_limit_error"
    assert headers["retry-after"] == "7"
    assert (headers["x-ratelimit-remaining-requests"], headers["x-ratelimit-reset-requests"]) == ("0", "7s")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("path", "request_body", "param"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_a_backend_loading_its_model_is_a_503(
    backend: Replayer, gateways: Any, path: str, request_body: dict[str, Any], param: str, stream: bool
) -> None:
    """llama.cpp answers 503 ``unavailable_error`` "Loading model" while it loads (L-25): a status the
    SDKs retry, as OpenAI's own 503 "overloaded"."""
    raw = (FIXTURES / "llamacpp" / "error-model-loading.json").read_bytes()
    backend.push(Canned(raw, status=503, headers={"Retry-After": "2"}))
    got, headers, out = post(gateways("llamacpp@b9174"), path, {**request_body, "stream": stream})
    assert got == 503
    error = json.loads(out)["error"]
    assert (error["type"], error["message"]) == ("server_error", "Loading model")
    assert headers["retry-after"] == "2"


def test_a_refused_responses_stream_opens_nothing(backend: Replayer, gateways: Any) -> None:
    """The client gets the 400 alone: no ``response.created`` went out before it."""
    backend.push(
        Canned((FIXTURES / "vllm" / "chat-stream-context-overflow.sse").read_bytes(), content_type="text/event-stream")
    )
    url = gateways("vllm@0.32")
    got, _, out = post(url, "/v1/responses", {"model": "m", "input": "long", "stream": True, "store": True})
    assert got == 400
    assert b"response.created" not in out
