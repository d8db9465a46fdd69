"""What a client is sent never holds a secret the gateway knows (the upstream keys of all routes, its
own client keys) nor a backend's cookie; a backend's retry headers survive on every error relayed;
and error messages are plain sentences, not a library's repr."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from _servers import Canned, Replayer, RunningGateway, free_port
from test_routes import call, official_error

from oaishim.server.config import ModelRoute, Settings

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}]}
UPSTREAM_KEY = "sk-upstream-echo-4c1d9e2a"
OTHER_UPSTREAM_KEY = "sk-upstream-second-77e0b1"
CLIENT_KEY = "sk-client-echo-0b7f3e55"
SECRETS = (UPSTREAM_KEY, OTHER_UPSTREAM_KEY, CLIENT_KEY)
GOOD = {"authorization": f"Bearer {CLIENT_KEY}"}
MASK = b"[REDACTED]"


@contextmanager
def keyed_gateway(backend: Replayer, **settings: Any) -> Iterator[str]:
    routes = (
        ModelRoute("tiny", (backend.url,), profile="vllm@0.32", upstream_api_key=UPSTREAM_KEY),
        ModelRoute("other", (backend.url,), profile="vllm@0.32", upstream_api_key=OTHER_UPSTREAM_KEY),
    )
    with RunningGateway(Settings(models=routes, port=free_port(), api_keys=(CLIENT_KEY,), **settings)) as gw:
        yield gw.url


def assert_clean(headers: dict[str, str], body: bytes) -> None:
    for secret in SECRETS:
        assert secret.encode() not in body
        assert not any(secret in value for value in headers.values()), headers
    assert "set-cookie" not in headers


def chat_with(text: str) -> bytes:
    body = json.loads((VLLM / "s1_chat.body").read_bytes())
    body["choices"][0]["message"]["content"] = text
    return json.dumps(body).encode()


def test_an_echoed_key_is_masked_in_errors(backend: Replayer) -> None:
    echo = json.dumps({"error": {"message": f"Invalid key: Bearer {UPSTREAM_KEY}", "type": "Unauthorized"}}).encode()
    with keyed_gateway(backend, passthrough=("POST /tokenize",)) as url:
        cookie = {"set-cookie": "sid=backend-session-1234"}
        backend.push(Canned(echo, status=401, headers=cookie), Canned(echo, status=401), Canned(echo, status=401))
        for body in (CHAT, {**CHAT, "stream": True}):
            status, headers, out = call(url, "POST", "/v1/chat/completions", body, GOOD)
            error = official_error(status, headers, out, 401)
            assert error["message"] == "Invalid key: Bearer [REDACTED]"
            assert_clean(headers, out)
            assert int(headers["content-length"]) == len(out)  # framed for the scrubbed body
        status, headers, out = call(url, "POST", "/tokenize", {"prompt": "x"}, GOOD)
        assert official_error(status, headers, out, 401)["message"] == "Invalid key: Bearer [REDACTED]"
        assert_clean(headers, out)


def test_an_echoed_key_is_masked_in_answers_and_headers(backend: Replayer) -> None:
    # the model wrote the client's key (it was in the prompt): one content delta holds it whole
    with_key = (
        (VLLM / "s1_chat_stream.body").read_bytes().replace(b'"content":"NO"', f'"content":"{CLIENT_KEY}"'.encode(), 1)
    )
    echo_headers = {"x-echo": f"Bearer {UPSTREAM_KEY}", "set-cookie": "sid=backend-session-1234"}
    with keyed_gateway(backend, passthrough=("POST /tokenize",)) as url:
        backend.push(
            Canned(chat_with(f"the key is {OTHER_UPSTREAM_KEY}."), headers=echo_headers),
            Canned(with_key, content_type="text/event-stream", piece=7, headers=echo_headers),
            Canned(json.dumps({"tokens": [1], "note": UPSTREAM_KEY}).encode(), headers=echo_headers),
        )
        status, headers, out = call(url, "POST", "/v1/chat/completions", CHAT, GOOD)
        assert status == 200 and json.loads(out)["choices"][0]["message"]["content"] == "the key is [REDACTED]."
        assert_clean(headers, out)
        status, headers, out = call(url, "POST", "/v1/chat/completions", {**CHAT, "stream": True}, GOOD)
        assert status == 200 and MASK in out
        assert_clean(headers, out)
        status, headers, out = call(url, "POST", "/tokenize", {"prompt": "x"}, GOOD)
        assert (status, json.loads(out)) == (200, {"tokens": [1], "note": "[REDACTED]"})
        assert headers["x-echo"] == "Bearer [REDACTED]"
        assert_clean(headers, out)


RETRY = {
    "retry-after": "7",
    "retry-after-ms": "7000",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-limit-tokens": "9",
}


def test_retry_headers_survive_every_relayed_error(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", passthrough=("POST /tokenize",))
    busy = b'{"error": {"message": "Too many requests", "type": "RateLimitError", "code": 429}}'
    for path, body in (
        ("/v1/chat/completions", CHAT),
        ("/v1/chat/completions", {**CHAT, "stream": True}),
        ("/v1/completions", {"model": "tiny", "prompt": "hi"}),
        ("/tokenize", {"prompt": "x"}),
    ):
        backend.push(Canned(busy, status=429, headers={**RETRY, "x-other": "no"}))
        status, headers, out = call(url, "POST", path, body)
        assert official_error(status, headers, out, 429)["type"] == "rate_limit_error"
        assert {k: headers.get(k) for k in RETRY} == RETRY, path
        assert "x-other" not in headers or path == "/tokenize"
    backend.push(Canned(busy, status=503, headers={"retry-after": "2"}))
    status, headers, out = call(url, "POST", "/v1/chat/completions", CHAT)
    assert (status, headers.get("retry-after")) == (503, "2")


def test_the_sdk_waits_as_the_backend_asked(backend: Replayer, gateways: Any) -> None:
    """The SDK reads retry-after-ms: with it, its one retry waits the backend's 0.8 s (without it,
    its own backoff: at most 0.5 s before the first retry)."""
    url = gateways("vllm@0.32")
    busy = b'{"error": {"message": "Too many requests", "type": "RateLimitError", "code": 429}}'
    chat = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(busy, status=429, headers={"retry-after-ms": "800"}), Canned(chat))
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=1)
    started = time.monotonic()
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert time.monotonic() - started >= 0.8
    assert len(backend.seen) == 2


def test_a_broken_body_is_reported_in_a_sentence(backend: Replayer, gateways: Any) -> None:
    raw = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(raw, headers={"content-length": str(len(raw))}, cut_after=len(raw) // 2))
    error = official_error(*call(gateways("vllm@0.32"), "POST", "/v1/chat/completions", CHAT), 502)
    message = error["message"]
    assert "<" not in message and ":" not in message, message  # no library repr
    assert message[0].isupper() and message.endswith(".") and "ContentLengthError" in message


@pytest.mark.parametrize("routes", [1, 2])
def test_no_secrets_no_scrubbing(backend: Replayer, routes: int) -> None:
    """Short keys (under 8 characters) are not scrubbed: "k" would be masked in every word."""
    models = tuple(
        ModelRoute(f"m{i}", (backend.url,), profile="vllm@0.32", upstream_api_key="k") for i in range(routes)
    )
    with RunningGateway(Settings(models=models, port=free_port(), api_keys=("key",))) as gw:
        backend.push(Canned(chat_with("keys kept")))
        status, _, out = call(
            gw.url, "POST", "/v1/chat/completions", {**CHAT, "model": "m0"}, {"authorization": "Bearer key"}
        )
        assert status == 200 and json.loads(out)["choices"][0]["message"]["content"] == "keys kept"


# ---------------------------------------------------------------------------------------------------
# Keys split across pieces, cut by the message limit; pass-through answers that are too big or break


def test_a_key_split_across_pass_through_pieces_is_masked(backend: Replayer) -> None:
    body = json.dumps({"tokens": [1, 2, 3], "note": "xxx" + UPSTREAM_KEY}).encode()
    with keyed_gateway(backend, passthrough=("POST /tokenize",)) as url:
        for piece in (7, 20, 33):
            backend.push(Canned(body, piece=piece, delay=0.01))
            status, headers, out = call(url, "POST", "/tokenize", {"prompt": "x"}, GOOD)
            assert status == 200, out
            assert_clean(headers, out)
            assert out == body.replace(UPSTREAM_KEY.encode(), MASK), piece


def test_a_key_at_the_message_limit_leaves_no_prefix(backend: Replayer) -> None:
    """The message is cut at 1,000 characters: inside the key, a prefix would escape every scrub."""
    message = "z" * 990 + UPSTREAM_KEY
    echo = json.dumps({"error": {"message": message, "type": "BadRequest"}}).encode()
    with keyed_gateway(backend) as url:
        backend.push(Canned(echo, status=400))
        status, headers, out = call(url, "POST", "/v1/chat/completions", CHAT, GOOD)
        error = official_error(status, headers, out, 400)
        assert UPSTREAM_KEY[:8] not in error["message"] and error["message"].endswith("[truncated]")


def test_a_pass_through_error_body_is_bounded(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", passthrough=("POST /tokenize",), max_upstream_event_bytes=1 << 20)
    big = json.dumps({"error": {"message": "bad " + "y" * (4 << 20)}}).encode()
    backend.push(Canned(big, status=400))
    status, headers, out = call(url, "POST", "/tokenize", {"prompt": "x"})
    error = official_error(status, headers, out, 502)
    assert error["code"] == "upstream_response_too_large"


def test_a_pass_through_answer_that_breaks_off_is_not_passed_as_whole(backend: Replayer, gateways: Any) -> None:
    """Once the answer started no error body can follow: the client must see a broken answer."""
    import http.client

    url = gateways("vllm@0.32", passthrough=("POST /tokenize",))
    body = b'{"tokens":[' + b"1," * 5000 + b"1]}"
    backend.push(Canned(body, piece=1000, delay=0.01, cut_after=4000, headers={"content-length": str(len(body))}))
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/tokenize", body=b'{"prompt": "x"}', headers={"content-type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead):
        response.read()
