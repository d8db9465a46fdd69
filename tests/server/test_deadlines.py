"""The upstream side's deadlines, each against a replaying backend that is slow in the one way that
deadline is about: connecting, the response head, a silence inside the body, the whole exchange.
Each ends in an official error (504 before the answer began, an error event in a stream after) at
its own time, and its message names the deadline that fired with its real value."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from _servers import Canned, Replayer
from test_http import CHAT, call, gateway, official_error

from oaishim.server.config import ModelRoute

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
PLAIN = (VLLM / "s1_chat.body").read_bytes()
STREAM = (VLLM / "s1_chat_stream.body").read_bytes()


def timed_error(url: str, expected: int = 504, **extra: Any) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    error = official_error(*call(url + "/v1/chat/completions", "POST", {**CHAT, **extra}), expected)
    assert (error["type"], error["code"]) == ("server_error", "upstream_timeout")
    return time.monotonic() - started, error


def last_event(url: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    status, _, out = call(url + "/v1/chat/completions", "POST", {**CHAT, "stream": True})
    assert status == 200  # the stream had begun: the failure is its last event
    event: dict[str, Any] = json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))
    return time.monotonic() - started, event


def test_a_head_slower_than_first_byte_is_504_at_first_byte_not_at_idle(backend: Replayer, gateways: Any) -> None:
    """idle_timeout is for silences inside a body: a shorter one must not cut the wait for the head
    (a backend that never answered ended after the idle 300 s with a message saying 600 s)."""
    url = gateways("vllm@0.32", first_byte_timeout=0.5, idle_timeout=0.1)
    backend.push(Canned(PLAIN, head_delay=2.0))
    took, error = timed_error(url)
    assert 0.45 < took < 1.3
    assert "0.5 s" in error["message"] and "first_byte_timeout" in error["message"]


def test_a_silence_in_the_body_names_idle_timeout(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", idle_timeout=0.3)
    backend.push(Canned(PLAIN, piece=len(PLAIN) // 2 + 1, delay=1.0))
    took, error = timed_error(url)
    assert 0.25 < took < 0.9
    assert "0.3 s" in error["message"] and "idle_timeout" in error["message"]

    backend.push(Canned(STREAM, content_type="text/event-stream", piece=len(STREAM) // 2 + 1, delay=1.0))
    took, event = last_event(url)
    assert 0.25 < took < 0.9
    assert event["error"]["code"] == "upstream_timeout" and "idle_timeout" in event["error"]["message"]


def test_the_total_deadline_ends_a_body_that_keeps_trickling(backend: Replayer, gateways: Any) -> None:
    """Pieces every 0.1 s never trip the idle timeout; the total deadline ends the exchange."""
    url = gateways("vllm@0.32", idle_timeout=5.0, total_timeout=0.4)
    backend.push(Canned(PLAIN, piece=len(PLAIN) // 12 + 1, delay=0.1))
    took, error = timed_error(url)
    assert 0.35 < took < 1.1
    assert "0.4 s" in error["message"] and "total_timeout" in error["message"]

    backend.push(Canned(STREAM, content_type="text/event-stream", piece=len(STREAM) // 12 + 1, delay=0.1))
    took, event = last_event(url)
    assert 0.35 < took < 1.1
    assert event["error"]["type"] == "server_error" and event["error"]["code"] == "upstream_timeout"
    assert "0.4 s" in event["error"]["message"] and "total_timeout" in event["error"]["message"]


def test_the_total_deadline_also_bounds_the_wait_for_the_head(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", first_byte_timeout=30.0, total_timeout=0.5)
    backend.push(Canned(PLAIN, head_delay=2.0))
    took, error = timed_error(url)
    assert 0.4 < took < 1.2
    assert "0.5 s" in error["message"] and "total_timeout" in error["message"]


def test_an_exchange_within_every_deadline_is_untouched(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", idle_timeout=0.5, total_timeout=3.0, first_byte_timeout=1.0)
    backend.push(Canned(PLAIN, head_delay=0.15, piece=len(PLAIN) // 4 + 1, delay=0.1))
    status, _, body = call(url + "/v1/chat/completions", "POST", CHAT)
    assert status == 200 and json.loads(body)["object"] == "chat.completion"


@contextmanager
def never_accepting() -> Iterator[str]:
    """A port whose accept queue is full and never served: connecting to it hangs (Linux drops the
    SYN of a connection the full queue cannot take), as with a backend host that is down."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    with ExitStack() as stack:
        stack.callback(listener.close)
        for _ in range(4):  # fill the queue
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            stack.callback(filler.close)
        time.sleep(0.1)
        yield f"http://{address[0]}:{address[1]}"


def test_a_backend_that_does_not_accept_names_connect_timeout() -> None:
    with (
        never_accepting() as upstream,
        gateway(ModelRoute("*", (upstream,), profile="vllm@0.32"), connect_timeout=0.4) as url,
    ):
        took, error = timed_error(url)
    assert 0.3 < took < 1.5
    assert "0.4 s" in error["message"] and "connect_timeout" in error["message"]
