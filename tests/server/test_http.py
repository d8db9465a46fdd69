"""The gateway's HTTP surface: /health, /v1/models, API keys (and where keys may and may not go),
body limits, refusals before anything reaches the backend, replicas and upstream failures (other
paths: test_routes.py). Every error a client gets is in the official shape, judged by the checker."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from _servers import Canned, Replayer, RunningGateway, free_port

from oaishim.check import check, exchange_from_bytes
from oaishim.server.config import ModelRoute, Settings

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMA = RECORDED / "llamacpp-server"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}]}
CLIENT_KEY = "sk-client-7f3a9e"
OTHER_KEY = "sk-client-second-2b81"
UPSTREAM_KEY = "sk-upstream-91c2d0"


def call(
    url: str,
    method: str = "GET",
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def official_error(status: int, headers: dict[str, str], body: bytes, expected_status: int) -> dict[str, Any]:
    """The error object, after checking status, content type and the four-key shape."""
    assert status == expected_status, body
    assert headers["content-type"].startswith("application/json")
    payload = json.loads(body)
    assert set(payload) == {"error"}
    error: dict[str, Any] = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    findings = check(exchange_from_bytes(body, status=status, headers=headers))
    assert [(f.rule, f.path, f.message) for f in findings if f.severity == "error"] == []
    return error


def answer(text: str) -> Canned:
    """A vLLM 0.32 chat answer (the recorded one) with its text replaced, to tell replicas apart."""
    body = json.loads((VLLM / "s1_chat.body").read_bytes())
    body["choices"][0]["message"]["content"] = text
    return Canned(json.dumps(body).encode())


@contextmanager
def gateway(*routes: ModelRoute, **settings: Any) -> Iterator[str]:
    """A gateway with routes of our own (replicas, upstream keys), stopped on exit."""
    with RunningGateway(Settings(models=routes, port=free_port(), **settings)) as running:
        yield running.url


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there once the probe socket is closed


# ---------------------------------------------------------------------------------------------------
# /health and /v1/models


def test_health(backend: Replayer, gateways: Any) -> None:
    status, headers, body = call(gateways("vllm@0.32") + "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["content-type"].startswith("application/json")
    assert backend.seen == []


def model_cards(body: bytes, status: int, headers: dict[str, str]) -> list[dict[str, Any]]:
    listing = json.loads(body)
    assert status == 200 and set(listing) == {"object", "data"} and listing["object"] == "list"
    for card in listing["data"]:
        assert set(card) == {"id", "object", "created", "owned_by"}
        assert card["object"] == "model" and isinstance(card["created"], int) and isinstance(card["owned_by"], str)
    findings = check(exchange_from_bytes(body, status=status, headers=headers))
    assert [(f.rule, f.path) for f in findings if f.severity in ("error", "warning")] == []
    cards: list[dict[str, Any]] = listing["data"]
    return cards


def test_models_from_the_served_name(backend: Replayer, gateways: Any) -> None:
    before = time.time()
    status, headers, body = call(gateways("vllm@0.32", name="tiny") + "/v1/models")
    cards = model_cards(body, status, headers)
    assert [c["id"] for c in cards] == ["tiny"]
    assert cards[0]["created"] <= before + 1
    assert backend.seen == []  # a named route is answered from the settings


@pytest.mark.parametrize(("folder", "name"), [(VLLM, "s1_models"), (LLAMA, "ls.models")])
def test_models_from_the_upstream_list(backend: Replayer, gateways: Any, folder: Path, name: str) -> None:
    raw = (folder / f"{name}.body").read_bytes()
    backend.push(Canned(raw))
    status, headers, body = call(gateways("vllm@0.32") + "/v1/models")
    cards = model_cards(body, status, headers)
    assert [c["id"] for c in cards] == [m["id"] for m in json.loads(raw)["data"]]
    assert [(s.method, s.path) for s in backend.seen] == [("GET", "/v1/models")]
    # the official SDK reads it
    backend.push(Canned(raw))
    client = openai.OpenAI(base_url=gateways("vllm@0.32") + "/v1", api_key="x", max_retries=0)
    assert [m.id for m in client.models.list()] == [m["id"] for m in json.loads(raw)["data"]]


# ---------------------------------------------------------------------------------------------------
# API keys


def test_api_keys(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", api_keys=(CLIENT_KEY, OTHER_KEY))
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {CLIENT_KEY}x"}):
        error = official_error(*call(url + "/v1/chat/completions", "POST", CHAT, headers), 401)
        assert error["code"] == "invalid_api_key"
    official_error(*call(url + "/v1/models"), 401)
    official_error(*call(url + "/tokenize", "POST", {"model": "tiny", "prompt": "hi"}), 401)
    assert backend.seen == []  # refused before anything went upstream

    for headers in ({"authorization": f"Bearer {CLIENT_KEY}"}, {"authorization": f"bearer {OTHER_KEY}"}):
        backend.push(answer("fine"))
        status, _, body = call(url + "/v1/chat/completions", "POST", CHAT, headers)
        assert (status, json.loads(body)["choices"][0]["message"]["content"]) == (200, "fine")
    backend.push(answer("azure style"))
    assert call(url + "/v1/chat/completions", "POST", CHAT, {"api-key": OTHER_KEY})[0] == 200
    assert call(url + "/health")[0] == 200  # open without a key

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_keys_stay_out_of_the_log_and_off_the_upstream(backend: Replayer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    route = ModelRoute("tiny", (closed_url(), backend.url), profile="vllm@0.32", upstream_api_key=UPSTREAM_KEY)
    with gateway(route, api_keys=(CLIENT_KEY,)) as url:
        good, bad = {"authorization": f"Bearer {CLIENT_KEY}"}, {"authorization": f"Bearer {CLIENT_KEY}-nope"}
        backend.push(answer("one"), answer("two"), Canned(b'{"version":"0.32.0"}'))
        assert call(url + "/v1/chat/completions", "POST", CHAT, good)[0] == 200
        assert call(url + "/v1/chat/completions", "POST", {**CHAT, "stream": False}, good)[0] == 200
        assert call(url + "/version?x=1", headers=good)[0] == 200
        assert call(url + "/v1/chat/completions", "POST", CHAT, bad)[0] == 401
    assert len(backend.seen) == 3
    for seen in backend.seen:
        assert seen.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert not any(CLIENT_KEY in value for value in seen.headers.values())
    assert "unreachable" in caplog.text  # the log did run (a replica was skipped), and:
    assert CLIENT_KEY not in caplog.text
    assert UPSTREAM_KEY not in caplog.text


def test_client_key_not_forwarded_without_an_upstream_key(backend: Replayer) -> None:
    with gateway(ModelRoute("tiny", (backend.url,), profile="vllm@0.32"), api_keys=(CLIENT_KEY,)) as url:
        backend.push(answer("one"))
        assert call(url + "/v1/chat/completions", "POST", CHAT, {"authorization": f"Bearer {CLIENT_KEY}"})[0] == 200
        backend.push(Canned(b"{}"))
        call(url + "/tokenize", "POST", {"prompt": "x"}, {"authorization": f"Bearer {CLIENT_KEY}", "api-key": "k"})
    assert len(backend.seen) == 2
    for seen in backend.seen:
        assert "authorization" not in seen.headers and "api-key" not in seen.headers


# ---------------------------------------------------------------------------------------------------
# Requests refused by the gateway itself


def test_body_over_the_limit_is_413(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", max_body_bytes=1000)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    error = official_error(*call(url + "/v1/chat/completions", "POST", big), 413)
    assert error["type"] == "invalid_request_error"
    official_error(*call(url + "/tokenize", "POST", big), 413)
    assert backend.seen == []
    backend.push(answer("small is fine"))
    assert call(url + "/v1/chat/completions", "POST", CHAT)[0] == 200


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"model": "tiny",', b"\xff\xfe{}"])
def test_body_that_is_not_json_is_400(backend: Replayer, gateways: Any, body: bytes) -> None:
    error = official_error(*call(gateways("vllm@0.32") + "/v1/chat/completions", "POST", body), 400)
    assert error["type"] == "invalid_request_error" and "JSON" in error["message"]
    assert backend.seen == []


def test_unknown_model_with_a_named_route_is_404(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", name="tiny")
    error = official_error(*call(url + "/v1/chat/completions", "POST", {**CHAT, "model": "gpt-9"}), 404)
    assert (error["type"], error["code"]) == ("invalid_request_error", "model_not_found")
    assert "gpt-9" in error["message"]
    with pytest.raises(openai.NotFoundError) as caught:
        openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).embeddings.create(model="gpt-9", input="x")
    assert caught.value.code == "model_not_found"
    assert backend.seen == []


# (path, body, param): what the official API refuses, and the field it names.
INVALID = [
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": "auto"}, "tool_choice"),
    ("/v1/chat/completions", {**CHAT, "n": 0}, "n"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": "16"}, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "stream": "yes"}, "stream"),
    ("/v1/chat/completions", {**CHAT, "logprobs": 1}, "logprobs"),
    ("/v1/chat/completions", {"model": "tiny", "messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"content": "hi"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"model": "tiny"}, "messages"),
    ("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": True}}, "stream_options"),
    ("/v1/completions", {"model": "tiny", "prompt": 5}, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": "hi", "logprobs": 6}, "logprobs"),
    ("/v1/embeddings", {"model": "tiny"}, "input"),
    ("/v1/embeddings", {"model": "tiny", "input": "x", "dimensions": "8"}, "dimensions"),
]


@pytest.mark.parametrize("profile", ["vllm", "auto"])
def test_invalid_requests_are_400_and_never_reach_the_upstream(backend: Replayer, gateways: Any, profile: str) -> None:
    # "auto" detects the backend on a model's first request: a refused request must not start that
    # either (this module's only "auto" gateway, so nothing was detected before).
    url = gateways(profile, name="tiny")
    for path, body, param in INVALID:
        error = official_error(*call(url + path, "POST", body), 400)
        assert (error["type"], error["param"]) == ("invalid_request_error", param), (path, body)
    assert [(s.method, s.path) for s in backend.seen] == []


# ---------------------------------------------------------------------------------------------------
# Replicas and failing upstreams


def test_replica_refusing_connections_is_skipped(backend: Replayer) -> None:
    with gateway(ModelRoute("tiny", (closed_url(), backend.url), profile="vllm@0.32")) as url:
        for i in range(3):
            backend.push(answer(f"answer {i}"))
            status, _, body = call(url + "/v1/chat/completions", "POST", CHAT)
            assert (status, json.loads(body)["choices"][0]["message"]["content"]) == (200, f"answer {i}")
    assert len(backend.seen) == 3


def test_round_robin_between_live_replicas() -> None:
    with ExitStack() as stack:
        first, second = stack.enter_context(Replayer()), stack.enter_context(Replayer())
        first.push(*(answer("first") for _ in range(3)))
        second.push(*(answer("second") for _ in range(3)))
        url = stack.enter_context(gateway(ModelRoute("tiny", (first.url, second.url), profile="vllm@0.32")))
        served = []
        for _ in range(4):
            status, _, body = call(url + "/v1/chat/completions", "POST", CHAT)
            assert status == 200
            served.append(json.loads(body)["choices"][0]["message"]["content"])
    assert served in (["first", "second"] * 2, ["second", "first"] * 2)
    assert (len(first.seen), len(second.seen)) == (2, 2)


def test_upstream_down_is_502(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with gateway(ModelRoute("*", (closed_url(), closed_url()), profile="vllm@0.32")) as url:
        for path, method, body in (
            ("/v1/chat/completions", "POST", CHAT),
            ("/v1/chat/completions", "POST", {**CHAT, "stream": True}),
            ("/v1/models", "GET", None),
            ("/version", "GET", None),
        ):
            error = official_error(*call(url + path, method, body), 502)
            assert error["type"] == "server_error"
        with pytest.raises(openai.InternalServerError) as caught:
            openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).completions.create(
                model="tiny", prompt="hi"
            )
        assert caught.value.status_code == 502
    # each refused connection is the client's 502 and a warning, and nothing more: no exception of
    # it escapes to the server's log (the compiled core once raised one again after the 502 was sent)
    assert "unreachable" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


def test_upstream_down_with_auto_profile_is_502_and_detection_retried() -> None:
    """A backend still starting when the first request comes: that request fails (502), and the
    backend is detected once it is up (not left at the fallback profile for good)."""
    port = free_port()
    with gateway(ModelRoute("*", (f"http://127.0.0.1:{port}",))) as url:
        official_error(*call(url + "/v1/chat/completions", "POST", CHAT), 502)
        with Replayer(port) as late:  # the backend comes up on the port the gateway knows
            late.push(
                Canned((VLLM / "s1_version.body").read_bytes()),
                Canned((VLLM / "s1_models.body").read_bytes()),
                Canned((VLLM / "s1_chat.body").read_bytes()),
            )
            status, _, _ = call(url + "/v1/chat/completions", "POST", CHAT)
        assert status == 200
        assert [s.path for s in late.seen] == ["/version", "/v1/models", "/v1/chat/completions"]


def test_upstream_slower_than_first_byte_timeout_is_504(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", first_byte_timeout=0.3)
    for stream in (False, True):
        backend.push(Canned((VLLM / "s1_chat.body").read_bytes(), head_delay=1.0))
        started = time.monotonic()
        error = official_error(*call(url + "/v1/chat/completions", "POST", {**CHAT, "stream": stream}), 504)
        assert time.monotonic() - started < 0.9  # answered at the timeout, not when the upstream did
        assert error["type"] == "server_error"


@contextmanager
def not_http() -> Iterator[str]:
    """A server on the upstream's port that answers with something that is not HTTP (a wrong port)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_all() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=answer_all, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_upstream_that_does_not_speak_http_is_502() -> None:
    with not_http() as upstream, gateway(ModelRoute("*", (upstream,), profile="vllm@0.32")) as url:
        for path, method, body in (("/v1/chat/completions", "POST", CHAT), ("/version", "GET", None)):
            error = official_error(*call(url + path, method, body), 502)
            assert error["type"] == "server_error"


def test_plain_body_cut_short_is_502(backend: Replayer, gateways: Any) -> None:
    """The upstream said how long its body is and sent less."""
    raw = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(raw, headers={"content-length": str(len(raw))}, cut_after=len(raw) // 2))
    error = official_error(*call(gateways("vllm@0.32") + "/v1/chat/completions", "POST", CHAT), 502)
    assert error["type"] == "server_error"


def test_upstream_idle_in_the_middle_of_a_body(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", idle_timeout=0.3)
    plain = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(plain, piece=len(plain) // 2 + 1, delay=0.8))
    error = official_error(*call(url + "/v1/chat/completions", "POST", CHAT), 504)
    assert (error["type"], error["code"]) == ("server_error", "upstream_timeout")

    stream = (VLLM / "s1_chat_stream.body").read_bytes()
    backend.push(Canned(stream, content_type="text/event-stream", piece=len(stream) // 2 + 1, delay=0.8))
    status, _, out = call(url + "/v1/chat/completions", "POST", {**CHAT, "stream": True})
    assert status == 200  # the stream had begun: the failure is its last event, which the SDK raises
    last = json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == "upstream_timeout"
