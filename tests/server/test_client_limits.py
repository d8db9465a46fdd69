"""The client side of the gateway's HTTP layer, over real sockets (that is what it is about): a client
that drips its head or body is cut off with a 408, an oversized head gets a 431 and costs no memory,
a declared body over the limit gets a 413 before any of it is read, malformed HTTP gets an
OpenAI-shaped 400, and a flood of half-open connections neither exhausts the file descriptors nor
keeps ``/health`` from answering. Every refusal is an official error body, judged by the checker."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _servers import Canned, Replayer, free_port

from oaishim.check import check, exchange_from_bytes

SRC = Path(__file__).resolve().parents[2] / "src"
CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"


def connect(url: str) -> socket.socket:
    address = urlsplit(url)
    return socket.create_connection((address.hostname, address.port), timeout=5)


def read_answer(sock: socket.socket, wait: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """The one response on the connection: read up to the end of its declared body, or up to the
    server's close when it declares none (a kept-alive connection is not waited out)."""
    sock.settimeout(wait)
    data = b""
    try:
        while not _complete(data) and (piece := sock.recv(65536)):
            data += piece
    except (ConnectionResetError, TimeoutError):
        pass
    assert data, "no answer on the connection"
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def _complete(data: bytes) -> bool:
    head, ended, body = data.partition(b"\r\n\r\n")
    if not ended:
        return False
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value)
    return False


def official_refusal(answer: tuple[int, dict[str, str], bytes], status: int) -> dict[str, Any]:
    got, headers, body = answer
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    error: dict[str, Any] = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    findings = check(exchange_from_bytes(body, status=got, headers=headers))
    assert [(f.rule, f.message) for f in findings if f.severity == "error"] == []
    return error


def drip(sock: socket.socket, data: bytes, every: float, limit: float) -> float:
    """Send ``data`` a byte at a time until the server answers or closes; the seconds it took."""
    started = time.monotonic()
    for byte in data:
        readable, _, _ = select.select([sock], [], [], every)
        if readable:
            return time.monotonic() - started
        sock.sendall(bytes([byte]))
        assert time.monotonic() - started < limit, "the gateway kept waiting for the dripping client"
    raise AssertionError("the data ran out before the gateway answered")


def test_a_head_sent_byte_by_byte_is_cut_off_with_408(gateways: Any) -> None:
    url = gateways("openai", header_timeout=0.5)
    with connect(url) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n")
        took = drip(sock, b"X-Slow: " + b"a" * 400, every=0.02, limit=3.0)
        assert 0.3 < took < 1.5
        error = official_refusal(read_answer(sock), 408)
    assert "0.5 s" in error["message"]


def test_a_connection_that_sends_nothing_is_closed(gateways: Any) -> None:
    url = gateways("openai", header_timeout=0.5)
    with connect(url) as sock:
        started = time.monotonic()
        sock.settimeout(3)
        assert sock.recv(100) == b""  # closed quietly: no request was begun, none is answered
        assert 0.3 < time.monotonic() - started < 1.5


def test_a_body_sent_too_slowly_is_cut_off_with_408(backend: Replayer, gateways: Any) -> None:
    url = gateways("openai", body_timeout=0.5)
    with connect(url) as sock:
        sock.sendall(CHAT_HEAD + b"Content-Length: 400\r\n\r\n{")
        took = drip(sock, b'"model": "x"' + b" " * 300, every=0.02, limit=3.0)
        assert 0.3 < took < 1.5
        error = official_refusal(read_answer(sock), 408)
    assert "0.5 s" in error["message"]
    assert backend.seen == []


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_huge_header_values_get_431_and_cost_no_memory(gateways: Any) -> None:
    """Eight unfinished 16 MB header values (the gateway runs in this process: its memory is ours)."""
    url = gateways("openai")  # the default bound
    piece = b"a" * (1024 * 1024)
    before = _rss_bytes()
    for _ in range(8):
        with connect(url) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\nX-Huge: ")
            try:
                for _ in range(16):
                    sock.sendall(piece)
                sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the gateway stopped reading: the answer may already be there
            error = official_refusal(read_answer(sock), 431)
    grown = _rss_bytes() - before
    assert grown < 32 * 1024 * 1024, f"the gateway's memory grew by {grown / 2**20:.0f} MiB"
    assert "65536 bytes" in error["message"]


def test_a_declared_body_over_the_limit_is_refused_at_once(backend: Replayer, gateways: Any) -> None:
    url = gateways("openai", max_body_bytes=1000)
    for path in (b"/v1/chat/completions", b"/tokenize"):
        with connect(url) as sock:
            started = time.monotonic()
            sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: gateway\r\nContent-Length: 1000000000000\r\n\r\n")
            error = official_refusal(read_answer(sock, wait=2), 413)
            assert time.monotonic() - started < 1  # answered without waiting for a byte of the body
        assert error["code"] == "request_too_large" and "1000 bytes" in error["message"]
    assert backend.seen == []


def test_malformed_http_gets_an_official_400(gateways: Any) -> None:
    url = gateways("openai")
    for garbage in (
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n",
    ):
        with connect(url) as sock:
            sock.sendall(garbage)
            error = official_refusal(read_answer(sock), 400)
        assert error["type"] == "invalid_request_error"


def test_at_the_connection_bound_a_busy_gateway_answers_503(backend: Replayer, gateways: Any) -> None:
    """Three requests held by a slow backend fill a bound of three: the fourth connection is refused."""
    url = gateways("openai", max_connections=3)
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = CHAT_HEAD + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    reply = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "x", "choices": []})
    busy_until = threading.Event()
    backend.push(*[Canned(reply.encode(), hold=busy_until) for _ in range(3)])
    with ExitStack() as stack:
        stack.callback(busy_until.set)
        busy = [stack.enter_context(connect(url)) for _ in range(3)]
        for sock in busy:
            sock.sendall(request)
        deadline = time.monotonic() + 3
        while len(backend.seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        with connect(url) as extra:
            error = official_refusal(read_answer(extra, wait=2), 503)
        assert error["type"] == "server_error"
        busy_until.set()
        for sock in busy:  # the requests in progress were not disturbed
            assert read_answer(sock)[0] == 200


@contextmanager
def gateway_process(upstream: str, open_files: int) -> Iterator[str]:
    """``oaishim serve`` in a child process whose open-file limit is ``open_files`` (soft and hard)."""
    port = free_port()
    # a first interpreter sets the limit and becomes the gateway (preexec_fn is unsafe with threads)
    limited = (
        "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
        "os.execv(sys.executable, [sys.executable, '-m', 'oaishim', *sys.argv[2:]])"
    )
    serve = ["serve", "--upstream", upstream, "--profile", "openai", "--port", str(port), "--log-level", "warning"]
    child = subprocess.Popen(
        [sys.executable, "-c", limited, str(open_files), *serve],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while not _health(url, 0.5):
            assert child.poll() is None and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.1)
        yield url
    finally:
        child.terminate()
        child.wait(timeout=10)


def _health(url: str, wait: float) -> bool:
    try:
        with connect(url) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
            return read_answer(sock, wait)[0] == 200
    except (OSError, AssertionError):
        return False


def test_a_flood_of_half_open_connections_does_not_stop_health(backend: Replayer) -> None:
    """300 connections, half of them with half a request line, against a gateway allowed 256 files
    and default settings: it still answers /health at once (before the bound, it ran out of
    descriptors and answered nothing until the clients left)."""
    with gateway_process(backend.url, open_files=256) as url, ExitStack() as stack:
        for i in range(300):
            sock = stack.enter_context(connect(url))
            if i % 2:
                sock.sendall(b"POST /v1/chat/comp")
        started = time.monotonic()
        assert _health(url, 3), "/health did not answer"
        assert time.monotonic() - started < 2


def test_refused_requests_with_a_large_declared_body_cannot_hold_the_slots(backend: Replayer, gateways: Any) -> None:
    """Without a key, a head declaring a big body plus one byte of it got its 401 at once but kept
    its slot for the body timeout: four of them filled a bound of four and /health got a 503."""
    url = gateways("openai", api_keys=("sk-client-key-for-slots",), max_connections=4)
    head = CHAT_HEAD + b"Content-Length: 100000\r\n\r\n{"
    with ExitStack() as stack:
        hogs = [stack.enter_context(connect(url)) for _ in range(4)]
        for sock in hogs:
            sock.sendall(head)
        for sock in hogs:
            assert read_answer(sock, wait=0.5)[0] == 401
        with connect(url) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
            assert read_answer(sock, wait=2)[0] == 200


def test_empty_connects_replace_each_other_not_a_served_keep_alive_connection(gateways: Any) -> None:
    """At the bound, connections that never sent a request are closed before a client's pooled one."""
    url = gateways("openai", max_connections=4)
    with connect(url) as client, ExitStack() as stack:
        client.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n")
        assert read_answer(client, wait=2)[0] == 200
        for _ in range(6):
            stack.enter_context(connect(url))
            time.sleep(0.05)
        client.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
        assert read_answer(client, wait=2)[0] == 200


def _long_stream(events: int) -> bytes:
    """A streamed chat answer of ``events`` content chunks of ~2 KB each, then its finish and [DONE]."""
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = []
    for i in range(events):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": f"{i:06d}" + "x" * 2000}
        event = {**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        out.append(b"data: " + json.dumps(event).encode() + b"\n\n")
    finish = {**chunk, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}
    out.append(b"data: " + json.dumps(finish).encode() + b"\n\ndata: [DONE]\n\n")
    return b"".join(out)


STREAM_CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()


def _ask_a_stream_through_a_small_window(sock: socket.socket) -> None:
    """A stream asked for on a socket whose receive buffer is small, so the gateway's writes back up soon."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.sendall(CHAT_HEAD + b"Content-Length: %d\r\n\r\n" % len(STREAM_CHAT) + STREAM_CHAT)


def test_a_client_that_stops_reading_is_dropped_after_send_timeout_and_the_backend_freed(
    backend: Replayer, gateways: Any
) -> None:
    """A client that takes none of its stream (its socket's buffers full, the gateway's writes
    backed up) is dropped send_timeout later, and the upstream request closed with it: a client
    that never reads cannot hold a backend for good."""
    url = gateways("openai", send_timeout=0.5)
    backend.push(Canned(_long_stream(6000), content_type="text/event-stream", piece=65536))  # ~12 MB
    with connect(url) as sock:
        _ask_a_stream_through_a_small_window(sock)
        started = time.monotonic()
        assert backend.closed_early.wait(10), "the upstream request was still open"
        took = time.monotonic() - started
        sock.settimeout(5)
        data = b""
        try:
            while piece := sock.recv(1 << 20):
                data += piece
        except ConnectionResetError:
            pass  # (the drop is an abort: what the kernel held may be lost)
    assert 0.5 < took < 8
    assert not data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # dropped, not answered


def test_a_slow_steady_reader_is_not_dropped(backend: Replayer, gateways: Any) -> None:
    """Taking its answer slowly, a pause never as long as send_timeout, a client gets all of it."""
    url = gateways("openai", send_timeout=0.5)
    backend.push(Canned(_long_stream(1500), content_type="text/event-stream", piece=65536))  # ~3 MB
    with connect(url) as sock:
        _ask_a_stream_through_a_small_window(sock)
        started = time.monotonic()
        data = b""
        sock.settimeout(5)
        while not data.endswith(b"\r\n0\r\n\r\n"):
            piece = sock.recv(128 * 1024)
            assert piece, "the gateway closed the connection"
            data += piece
            time.sleep(0.05)
    assert time.monotonic() - started > 1.0  # slower than send_timeout, all along
    assert data.count(b"data: {") == 1501 and b"data: [DONE]" in data
    assert not backend.closed_early.is_set()
