"""Disconnect acceptance: when a client goes away in the middle of a stream, the gateway closes its
upstream connection within 100 ms (that is what makes a real engine stop generating).

The upstream is a slow stream from recorded vLLM 0.32 traffic: 200 events, one every 50 ms. The
replaying backend notes the moment it sees its client (the gateway) close the connection; the test
notes the moment its own client closed. Both clocks are ``time.monotonic()`` of this process.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from _servers import Canned, Replayer

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
EVENTS = 200
DELAY = 0.05
BOUND = 0.1
REQUEST = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}], "stream": True}


def slow_stream() -> Canned:
    """200 recorded content events, sent one per piece with 50 ms between them (10 s in all)."""
    events = (VLLM / "s1_chat_stream.body").read_bytes().split(b"\n\n")
    content = events[1] + b"\n\n"  # a content delta, as vLLM sent it
    assert b'"content":"' in content
    return Canned(content * EVENTS, content_type="text/event-stream", piece=len(content), delay=DELAY)


def gone_within_bound(backend: Replayer, closed: float) -> float:
    assert backend.closed_early.wait(timeout=1), "the gateway kept reading the upstream stream"
    assert backend.closed_at is not None
    return backend.closed_at - closed


def test_raw_socket_client_closing_after_the_first_chunk(backend: Replayer, gateways: Any) -> None:
    backend.push(slow_stream())
    address = urlsplit(gateways("vllm@0.32"))
    body = json.dumps(REQUEST).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((address.hostname, address.port), timeout=5) as client:
        client.sendall(head + body)
        received = b""
        while b"\r\n\r\n" not in received or b"\n\n" not in received.split(b"\r\n\r\n", 1)[1]:
            piece = client.recv(65536)
            assert piece, "the gateway closed the connection"
            received += piece
        assert received.startswith(b"HTTP/1.1 200")
        assert b"data: {" in received
        closed = time.monotonic()
    # the with block closed the socket
    assert not backend.closed_early.is_set() or backend.closed_at is not None
    assert gone_within_bound(backend, closed) < BOUND


def test_sdk_client_closing_its_stream(backend: Replayer, gateways: Any) -> None:
    """An SDK user who stops iterating and closes the stream."""
    backend.push(slow_stream())
    client = openai.OpenAI(base_url=gateways("vllm@0.32") + "/v1", api_key="x", max_retries=0, timeout=10)
    stream = client.chat.completions.create(model="tiny", messages=REQUEST["messages"], stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    closed = time.monotonic()
    stream.close()
    assert gone_within_bound(backend, closed) < BOUND
    assert len(backend.seen) == 1


def test_plain_request_client_going_away_closes_the_upstream(backend: Replayer, gateways: Any) -> None:
    raw = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(raw, piece=max(1, len(raw) // 40), delay=DELAY))  # 2 s to send the body
    address = urlsplit(gateways("vllm@0.32"))
    body = json.dumps({**REQUEST, "stream": False}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((address.hostname, address.port), timeout=5) as client:
        client.sendall(head + body)
        deadline = time.monotonic() + 2
        while not backend.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.seen, "the request did not reach the upstream"
        time.sleep(2 * DELAY)  # the upstream is sending its body now
        closed = time.monotonic()
    assert gone_within_bound(backend, closed) < BOUND
