"""A stream's pieces written where the upstream's bytes arrive (``server.direct``), over real sockets:
the gateway under its HTTP server in front of a replaying backend that sends one event per write. The
relay's sink is watched (its calls counted) so each test knows which path the pieces took.

* one event per read, while the relay waits: the sink takes them, and the client's stream is the
  ordinary one (the checker finds nothing; every token arrives, in order);
* an HTTP/1.0 client: the same pieces, unchunked, ended by the close;
* a client that does not read: the client connection's transport pauses, the sink declines, the
  ordinary path waits for the client, and every byte still arrives in order;
* a secret the model writes is masked on the direct path too, also over several tokens (chat and
  the Responses API);
* a stop met in the middle of the stream closes the upstream from the sink;
* a capture keeps the direct path and records every piece on both sides, each with its own time.

Events are built from recorded vLLM 0.32 chunks (tests/fixtures/recorded/vllm-0.32-cpu), each with
its own numbered token so that order and loss show.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer, RunningGateway, free_port

from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes
from oaishim.check import check, exchange_from_bytes
from oaishim.server.config import ModelRoute, Settings
from oaishim.wire.accumulate import accumulate_chat

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
RECORDED = (VLLM / "s1_chat_stream.body").read_bytes().split(b"\n\n")
UPSTREAM_KEY = "sk-upstream-direct-5d1c9a77e2"
REQUEST = {"model": "tiny", "messages": [{"role": "user", "content": "Count."}], "stream": True}


def token(i: int) -> str:
    return f"t{i:05d} "


def stream(tokens: list[str]) -> bytes:
    """The recorded role chunk, one recorded content chunk per token, the recorded finish (as "stop") and [DONE]."""
    content = json.loads(RECORDED[1].removeprefix(b"data: "))
    assert content["choices"][0]["delta"].keys() == {"content"}
    events = [RECORDED[0]]
    for text in tokens:
        content["choices"][0]["delta"]["content"] = text
        events.append(b"data: " + json.dumps(content, separators=(",", ":")).encode())
    finish = json.loads(next(e for e in RECORDED if b'"finish_reason":"length"' in e).removeprefix(b"data: "))
    finish["choices"][0]["delta"]["content"] = ""  # the recorded finish, as vLLM ends at the model's end token
    finish["choices"][0]["finish_reason"] = "stop"
    events.append(b"data: " + json.dumps(finish, separators=(",", ":")).encode())
    return b"\n\n".join([*events, b"data: [DONE]", b""])


def paced(body: bytes, delay: float) -> Canned:
    """``body`` one event per write, ``delay`` seconds apart (each then reaches the gateway in its own read)."""
    first = body.index(b"\n\n") + 2
    return Canned(body, content_type="text/event-stream", piece=first, delay=delay)


class Counted:
    """What the relay's direct path did for the next streamed request, from the gateway's metrics
    (``oaishim_stream_direct_reads_total``): reads taken direct, reads handed back to the relay."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before = self._scrape()

    def _scrape(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            page = response.read().decode()
        values: dict[str, float] = {}
        for line in page.splitlines():
            for name, key in (
                ('oaishim_stream_direct_reads_total{outcome="taken"}', "taken"),
                ('oaishim_stream_direct_reads_total{outcome="declined"}', "declined"),
                ('oaishim_requests_total{endpoint="chat",status_class="2xx"}', "chat"),
                ('oaishim_requests_total{endpoint="responses",status_class="2xx"}', "responses"),
            ):
                if line.startswith(name + " "):
                    values[key] = float(line.split()[-1])
        return values

    def _after(self, what: str) -> float:
        """The change in ``what`` once the request's end is counted (its client may have its last
        bytes a moment before the gateway's books are closed)."""
        done = time.monotonic() + 5
        while True:
            now = self._scrape()
            ended = any(now.get(k, 0.0) > self.before.get(k, 0.0) for k in ("chat", "responses"))
            if ended or time.monotonic() > done:
                return now.get(what, 0.0) - self.before.get(what, 0.0)
            time.sleep(0.01)

    @property
    def taken(self) -> float:
        return self._after("taken")

    @property
    def declined(self) -> float:
        return self._after("declined")


@pytest.fixture(scope="module")
def backend() -> Iterator[Replayer]:
    with Replayer() as replayer:
        yield replayer


@pytest.fixture(scope="module")
def gateway(backend: Replayer) -> Iterator[str]:
    route = ModelRoute("tiny", (backend.url,), profile="vllm@0.32", upstream_api_key=UPSTREAM_KEY)
    with RunningGateway(Settings(models=(route,), port=free_port())) as gw:
        yield gw.url


@pytest.fixture(autouse=True)
def _fresh(backend: Replayer) -> None:
    backend.reset()


def raw_request(url: str, body: dict[str, Any]) -> tuple[socket.socket, bytes]:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(data)}\r\n\r\n"
    client = socket.create_connection((host, int(port)), timeout=20)
    return client, head.encode() + data


def read_response(client: socket.socket) -> bytes:
    """The whole chunked response body (de-chunked) of a response whose connection stays open."""
    pieces: list[bytes] = []
    last = b""
    while not last.endswith(b"\r\n0\r\n\r\n"):
        piece = client.recv(1 << 20)
        assert piece, "the gateway closed the connection before the end of the body"
        pieces.append(piece)
        last = (last + piece)[-16:]
    raw = b"".join(pieces)
    end = raw.index(b"\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in raw[:end].lower()
    body: list[bytes] = []
    at = end + 4
    while True:
        line_end = raw.index(b"\r\n", at)
        size = int(raw[at:line_end], 16)
        if size == 0:
            return b"".join(body)
        body.append(raw[line_end + 2 : line_end + 2 + size])
        at = line_end + 2 + size + 2


def client_chunks(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]


def content(body: bytes) -> str:
    return "".join(c["delta"].get("content") or "" for e in client_chunks(body) for c in e["choices"])


def test_pieces_taken_direct_make_the_ordinary_stream(backend: Replayer, gateway: str) -> None:
    seen = Counted(gateway)
    tokens = [token(i) for i in range(40)]
    backend.push(paced(stream(tokens), 0.005))
    client, request = raw_request(gateway, REQUEST)
    with client:
        client.sendall(request)
        body = read_response(client)
    assert content(body) == "".join(tokens)
    assert body.endswith(b"data: [DONE]\n\n")
    assert seen.taken >= 30  # after the head, while the relay waited: nearly every event
    (choice,) = accumulate_chat(client_chunks(body))["choices"]
    assert choice["finish_reason"] == "stop"
    exchange = exchange_from_bytes(body, request=REQUEST, status=200, headers={"content-type": "text/event-stream"})
    assert [(f.rule, f.message) for f in check(exchange) if f.severity == "error"] == []


def test_a_client_that_does_not_read_gets_every_byte_in_order(backend: Replayer, gateway: str) -> None:
    seen = Counted(gateway)
    tokens = [token(i) + "x" * 2000 for i in range(6000)]  # ~12 MB to the client: more than the socket buffers
    backend.push(paced(stream(tokens), 0.0))
    client, request = raw_request(gateway, REQUEST)
    with client:
        client.sendall(request)
        time.sleep(1.5)  # not reading: the kernel's buffers fill, then the gateway's writes back up and pause
        body = read_response(client)
    assert content(body) == "".join(tokens)
    assert seen.declined >= 1  # the paused client sent pieces the ordinary way


def test_an_http_1_0_client_gets_the_direct_stream_unchunked_to_the_close(backend: Replayer, gateway: str) -> None:
    """HTTP/1.0 knows no chunks: the pieces taken direct go out as they are, and the close ends them."""
    seen = Counted(gateway)
    tokens = [token(i) for i in range(40)]
    backend.push(paced(stream(tokens), 0.005))
    client, request = raw_request(gateway, REQUEST)
    with client:
        client.sendall(request.replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1))
        raw = b""
        while piece := client.recv(1 << 20):  # to the gateway's close
            raw += piece
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    assert seen.taken >= 30
    assert content(body) == "".join(tokens) and body.endswith(b"data: [DONE]\n\n")
    exchange = exchange_from_bytes(body, request=REQUEST, status=200, headers={"content-type": "text/event-stream"})
    assert [(f.rule, f.message) for f in check(exchange) if f.severity == "error"] == []


def test_a_secret_the_model_writes_is_masked(backend: Replayer, gateway: str) -> None:
    seen = Counted(gateway)
    tokens = [token(i) for i in range(10)] + [f"the key is {UPSTREAM_KEY}."] + [token(99)]
    backend.push(paced(stream(tokens), 0.005))
    client, request = raw_request(gateway, REQUEST)
    with client:
        client.sendall(request)
        body = read_response(client)
    assert UPSTREAM_KEY.encode() not in body
    assert "the key is [REDACTED]." in content(body) and content(body).endswith(token(99))
    assert seen.taken >= 8


@pytest.mark.parametrize("cut", [1, 3, 9, len(UPSTREAM_KEY) - 1])
def test_a_secret_the_model_writes_over_several_tokens_is_masked(backend: Replayer, gateway: str, cut: int) -> None:
    seen = Counted(gateway)
    tokens = [token(i) for i in range(10)] + [f"the key is {UPSTREAM_KEY[:cut]}", f"{UPSTREAM_KEY[cut:]}."]
    backend.push(paced(stream([*tokens, token(99)]), 0.005))
    client, request = raw_request(gateway, REQUEST)
    with client:
        client.sendall(request)
        body = read_response(client)
    assert UPSTREAM_KEY.encode() not in body
    assert content(body) == "".join(token(i) for i in range(10)) + "the key is [REDACTED]." + token(99)
    assert seen.taken >= 8


def test_a_secret_over_several_tokens_is_masked_in_a_responses_stream(backend: Replayer, gateway: str) -> None:
    tokens = ["the key ", UPSTREAM_KEY[:5], UPSTREAM_KEY[5:12], UPSTREAM_KEY[12:], " ok"]
    backend.push(paced(stream(tokens), 0.005))
    host, port = gateway.removeprefix("http://").split(":")
    data = json.dumps({"model": "tiny", "input": "Count.", "stream": True}).encode()
    head = f"POST /v1/responses HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(data)}\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=20) as client:
        client.sendall(head.encode() + data)
        body = read_response(client)
    assert UPSTREAM_KEY[5:12].encode() not in body
    events = [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "the key [REDACTED] ok"
    (done,) = [e for e in events if e["type"] == "response.completed"]
    assert done["response"]["output"][0]["content"][0]["text"] == text


def test_a_stop_in_the_middle_closes_the_upstream_from_the_sink(backend: Replayer, gateway: str) -> None:
    seen = Counted(gateway)
    tokens = [token(i) for i in range(200)]
    backend.push(paced(stream(tokens), 0.01))  # 2 s in all, if read to the end
    client, request = raw_request(gateway, {**REQUEST, "stop": [token(20).strip()]})
    started = time.monotonic()
    with client:
        client.sendall(request)
        body = read_response(client)
    assert content(body) == "".join(tokens[:20])
    (choice,) = accumulate_chat(client_chunks(body))["choices"]
    assert choice["finish_reason"] == "stop"
    assert backend.closed_early.wait(timeout=2), "the gateway kept reading the upstream stream"
    assert backend.closed_at is not None and backend.closed_at - started < 1.5
    assert seen.taken >= 15


def test_a_capture_keeps_the_direct_path_and_records_every_piece(backend: Replayer, tmp_path: Path) -> None:
    tokens = [token(i) for i in range(40)]
    sent = stream(tokens)
    backend.push(paced(sent, 0.005))
    route = ModelRoute("tiny", (backend.url,), profile="vllm@0.32", upstream_api_key=UPSTREAM_KEY)
    folder = tmp_path / "capture"
    with RunningGateway(Settings(models=(route,), port=free_port(), capture_dir=folder)) as gw:
        seen = Counted(gw.url)
        client, request = raw_request(gw.url, REQUEST)
        with client:
            client.sendall(request)
            body = read_response(client)
        assert seen.taken >= 30  # recording did not send the pieces the ordinary way
    assert content(body) == "".join(tokens)
    (record,) = CaptureReader(folder).records()
    client_side, upstream_side = record["client"]["response"], record["upstream"]["response"]
    assert body_bytes(client_side) == body and client_side["complete"]
    assert body_bytes(upstream_side) == sent and upstream_side["complete"]
    for side in (client_side, upstream_side):  # one read per piece, as it passed, in time order
        times = [t for t, _ in side["reads"]]
        assert len(times) >= 30 and times == sorted(times)
    assert record["timings"]["ttft_ms"] is not None
