"""The gateway under fuzzing: malformed requests and odd upstream answers, end to end over HTTP.

Each example is one real request to a running gateway in front of the replaying backend. What must
hold, whatever the input:

* a request never causes a 5xx (the backend answers well here, so any 5xx is the gateway's fault);
* every error the client gets is in the official shape (``{"error": {message, type, param, code}}``);
* every stream ends in ``data: [DONE]`` or in exactly one error event, and nothing follows it;
* the process's memory stays bounded over the whole run.

Bounded and seeded (the test command's hypothesis profile): about 150 requests of each kind, a few
seconds. ``OAISHIM_FUZZ_EXAMPLES=5000`` (with ``scripts/explore``'s random seeds if wanted) is the
longer run.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from _servers import Canned, Replayer, RunningGateway, Seen, free_port
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oaishim.server.config import ModelRoute, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = int(os.environ.get("OAISHIM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
GOOD_PLAIN = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)
GOOD_STREAM = (FIXTURES / "openai-live" / "content.sse").read_bytes()


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Backend:
    """Answers well (plain or stream, as asked) unless an odd answer is set for the next request."""

    def __init__(self) -> None:
        self.odd: Canned | None = None

    def __call__(self, seen: Seen) -> Canned:
        if self.odd is not None:
            return self.odd
        try:
            stream = bool(orjson.loads(seen.body).get("stream"))
        except (orjson.JSONDecodeError, AttributeError):
            stream = False
        if stream:
            return Canned(GOOD_STREAM, content_type="text/event-stream")
        return Canned(GOOD_PLAIN)


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Backend]]:
    backend = Backend()
    with Replayer() as replayer:
        replayer.responder = backend
        route = ModelRoute(name="tiny", upstreams=(replayer.url,), profile="vllm@0.32")
        with RunningGateway(Settings(models=(route,), port=free_port())) as gw:
            yield gw.url, backend


def exchange(url: str, method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 exchange on a raw socket, so odd targets and bodies go out as they are."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = f"{method} {target} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        sock.sendall(head.encode("latin-1") + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    raw_headers, _, payload = rest.partition(b"\r\n\r\n")
    headers = {}
    for line in raw_headers.split(b"\r\n"):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        payload = dechunk(payload)
    return int(status_line.split()[1]), headers, payload


def dechunk(data: bytes) -> bytes:
    out, i = b"", 0
    while True:
        end = data.index(b"\r\n", i)
        size = int(data[i:end].split(b";")[0], 16)
        if size == 0:
            return out
        out += data[end + 2 : end + 2 + size]
        i = end + 4 + size


def assert_official_error(body: bytes) -> None:
    payload = json.loads(body)
    assert set(payload) == {"error"}, payload
    assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]


def assert_well_ended(status: int, headers: dict[str, str], body: bytes) -> None:
    """An error in the official shape, a JSON body, or a stream ending in [DONE] or one error event."""
    if status >= 400:
        assert headers.get("content-type", "").startswith("application/json"), (status, headers, body[:300])
        assert_official_error(body)
        return
    if not headers.get("content-type", "").startswith("text/event-stream"):
        json.loads(body)
        return
    events = [e for e in body.split(b"\n\n") if e.strip()]
    assert events, body
    datas = [e.removeprefix(b"data: ") for e in events]
    errors = [i for i, d in enumerate(datas) if d.startswith(b'{"error"')]
    if errors:
        assert errors == [len(datas) - 1], body[-500:]  # one error event, and nothing after it
        assert_official_error(datas[-1])
    else:
        assert datas[-1] == b"[DONE]", body[-500:]
        assert datas.count(b"[DONE]") == 1


# ---------------------------------------------------------------------------------------------------
# Malformed requests

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "x" * 300, "", "auto", "none", "required", "function", "json_schema", "text"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["type", "name", "text", "content", "role"]), st.text(max_size=4), max_size=3),
    st.integers(min_value=1, max_value=900).map(lambda depth: "[" * depth + "]" * depth),  # nesting, as text
)
FIELDS = [
    "model",
    "messages",
    "stream",
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "tools",
    "tool_choice",
    "response_format",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "metadata",
    "store",
    "reasoning_effort",
    "service_tier",
    "seed",
    "logit_bias",
    "audio",
    "user",
]


@st.composite
def odd_request(draw: st.DrawFn) -> tuple[str, str, bytes]:
    kind = draw(st.sampled_from(["fields", "messages", "bytes", "deep", "target"]))
    body: Any = dict(CHAT, stream=draw(st.booleans()))
    target, method = "/v1/chat/completions", "POST"
    if kind == "fields":
        for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4)):
            value = draw(ODD_VALUES)
            if draw(st.booleans()):
                body.pop(name, None)
            else:
                body[name] = json.loads(value) if isinstance(value, str) and value.startswith("[") else value
    elif kind == "messages":
        message = draw(st.dictionaries(st.sampled_from(["role", "content", "name", "tool_calls"]), ODD_VALUES))
        body["messages"] = [message] if draw(st.booleans()) else message
    elif kind == "deep":
        depth = draw(st.integers(min_value=100, max_value=1100))
        raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "metadata": '
        return method, target, raw + b"[" * depth + b"]" * depth + b"}"
    elif kind == "target":
        target = draw(
            st.sampled_from(
                [
                    "/v1/chat/../chat/completions",
                    "/v1/chat/%2e%2e/chat/completions",
                    "/v1/./chat/completions",
                    "/v1/chat/completions%3Fx",
                    "/v1/chat/completions%23",
                    "/v1/chat/completions;x",
                    "//v1/chat/completions",
                    "*",
                    "/v1/chat/completions/",
                    "/v1/%63hat/completions",
                ]
            )
        )
        method = draw(st.sampled_from(["POST", "GET", "PUT", "DELETE"]))
        body["n"] = 0
    else:
        return method, target, draw(st.binary(max_size=64))
    try:
        raw = orjson.dumps(body)
    except (TypeError, orjson.JSONEncodeError):
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return method, target, raw


@FUZZ
@given(request=odd_request())
def test_no_request_causes_a_5xx(gateway: tuple[str, Backend], request: tuple[str, str, bytes]) -> None:
    url, backend = gateway
    backend.odd = None
    status, headers, body = exchange(url, *request)
    assert status < 500, (request, status, body[:500])
    assert_well_ended(status, headers, body)


# ---------------------------------------------------------------------------------------------------
# Odd upstream answers

REAL_CHUNKS = [
    json.loads(line.removeprefix("data: ")) for line in GOOD_STREAM.decode().splitlines() if line.startswith("data: {")
]


def mutate(value: Any, draw: st.DrawFn) -> Any:
    """One random place in a JSON value replaced by an odd value."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: mutate(value[key], draw)}
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        return [*value[:i], mutate(value[i], draw), *value[i + 1 :]]
    odd = draw(ODD_VALUES)
    return odd if not (isinstance(odd, str) and odd.startswith("[")) else [odd]


@st.composite
def odd_answer(draw: st.DrawFn) -> tuple[bool, Canned]:
    kind = draw(st.sampled_from(["chunk", "plain", "status", "cut", "garbage"]))
    if kind == "chunk":
        chunks = [dict(c) for c in REAL_CHUNKS]
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(chunks) - 1))
            chunks[i] = mutate(chunks[i], draw)
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        return True, Canned(body, content_type="text/event-stream", piece=draw(st.sampled_from([0, 7, 64])))
    if kind == "plain":
        return False, Canned(json.dumps(mutate(json.loads(GOOD_PLAIN), draw)).encode())
    if kind == "status":
        status = draw(st.sampled_from([400, 401, 404, 413, 422, 429, 500, 502, 503]))
        body = draw(st.sampled_from([b"", b"oops", b'{"error": 5}', b'{"detail": [1]}', b'{"message": null}']))
        return draw(st.booleans()), Canned(body, status)
    if kind == "cut":
        return True, Canned(GOOD_STREAM, content_type="text/event-stream", cut_after=draw(st.integers(1, 400)))
    content_type = draw(st.sampled_from(["text/event-stream", "application/json", "text/plain"]))
    return draw(st.booleans()), Canned(draw(st.binary(max_size=200)), content_type=content_type)


@FUZZ
@given(answer=odd_answer())
def test_no_upstream_answer_breaks_the_response(gateway: tuple[str, Backend], answer: tuple[bool, Canned]) -> None:
    url, backend = gateway
    stream, canned = answer
    backend.odd = canned
    try:
        status, headers, body = exchange(url, "POST", "/v1/chat/completions", orjson.dumps(dict(CHAT, stream=stream)))
    finally:
        backend.odd = None
    assert_well_ended(status, headers, body)


def test_memory_stays_bounded(gateway: tuple[str, Backend]) -> None:
    """After the fuzz runs above (same process), a further round of big odd requests adds little."""
    url, _ = gateway
    before = rss_kb()
    deep = b'{"model": "tiny", "messages": [], "metadata": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    for _ in range(200):
        status, _, _ = exchange(url, "POST", "/v1/chat/completions", deep)
        assert status == 400
    assert rss_kb() - before < 50_000
