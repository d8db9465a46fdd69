"""A request leaves nothing for Python's cyclic collector: what the gateway made for it is freed by
reference counting as soon as it is done, on every path (a plain answer, a stream, the Responses
API, a refusal, a stream the backend cuts, a client that leaves), for kept-alive and closed
connections alike.

Why it matters: an object caught in a reference cycle outlives its request until a collection
finds it, and the collections that find it walk every object the process holds. With one such cycle
a request (the request's cycle and its scope, which held the cycle's own methods) the collector
ran a full pass every couple of thousand requests and took a sixth of the gateway's CPU under load.

The real gateway serves in a thread of this process, in front of the replaying backend; the
collector is told to keep what it finds (``gc.DEBUG_SAVEALL``) and each test looks at what of the
gateway's is among it.
"""

from __future__ import annotations

import gc
import json
import socket
import time
import types
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from _fake import plain_body, stream_body
from _servers import Canned, Replayer, RunningGateway, free_port

from _threadserver import ThreadServer
from oaishim.server.config import ModelRoute, Settings

KEY = "sk-cycles-3f9a"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi."}]}
RESPONSES = {"model": "tiny", "input": "Hi."}


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer() as backend:
        yield backend


@pytest.fixture(scope="module")
def gateway(replayer: Replayer) -> Iterator[RunningGateway]:
    route = ModelRoute(name="*", upstreams=(replayer.url,), profile="vllm")
    running = RunningGateway(Settings(models=(route,), port=free_port(), api_keys=(KEY,)))
    running.server = ThreadServer(running.server.server, loop="uvloop")  # the loop `oaishim serve` runs
    with running:
        yield running


def answering(replayer: Replayer, canned: Canned | None) -> None:
    """The backend answers every chat request with ``canned`` (anything else: a 404)."""
    replayer.reset()
    missing = Canned(b'{"error": "not found"}', status=404)
    replayer.responder = lambda seen: canned if canned and seen.path.endswith("/chat/completions") else missing


def _ours(thing: object) -> str | None:
    """What ``thing`` is, if the gateway made it: an object of one of its classes, a method bound to
    one, or a frame or coroutine of its code."""
    kind = type(thing)
    if kind.__module__.startswith("oaishim."):
        return kind.__qualname__
    owner = getattr(thing, "__self__", None)
    bound = isinstance(thing, (types.MethodType, types.BuiltinMethodType)) and owner is not None
    if bound and type(owner).__module__.startswith("oaishim."):
        return f"a method of {type(owner).__qualname__}"
    code = getattr(thing, "f_code", None) or getattr(thing, "cr_code", None)
    if isinstance(code, types.CodeType) and "/oaishim/" in code.co_filename:
        return f"{kind.__name__} of {code.co_name}"
    return None


@contextmanager
def collected() -> Iterator[Counter[str]]:
    """What of the gateway's the collector found unreachable, over the ``with`` block."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.garbage.clear()
        yield found
        gc.collect()
        found.update(name for thing in gc.garbage if (name := _ours(thing)) is not None)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _idle(gateway: RunningGateway) -> None:
    """Until the gateway holds no connection and runs no request (its answer's tail included)."""
    state = gateway.server.server.state
    deadline = time.monotonic() + 10
    while state.connections or state.tasks:
        assert time.monotonic() < deadline, "the gateway did not go idle"
        time.sleep(0.01)
    time.sleep(0.05)  # the access log and the metrics run on the loop's next turns


def _request(path: str, body: dict[str, object], key: str = KEY, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
    head += f"authorization: Bearer {key}\r\n" + ("connection: close\r\n" if close else "")
    return head.encode() + b"\r\n" + data


def _answers(sock: socket.socket) -> bytes:
    """One answer, read to its end (a sized body, or a chunked one to its last chunk)."""
    data = b""
    sock.settimeout(10)
    while not data or not _ended(data):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def _ended(data: bytes) -> bool:
    last = data[data.rfind(b"HTTP/1.1 ") :]
    head, _, body = last.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), 0
    )
    return len(body) >= length


STREAM = stream_body([f"t{i} " for i in range(12)])
CASES = {  # path, body, what the backend answers, the status the client gets
    "plain chat": ("/v1/chat/completions", CHAT, Canned(plain_body("Hello there.")), b"200"),
    "streamed chat": (
        "/v1/chat/completions",
        {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
        Canned(STREAM, content_type="text/event-stream"),
        b"200",
    ),
    "plain Responses": ("/v1/responses", RESPONSES, Canned(plain_body("Hello there.")), b"200"),
    "streamed Responses": (
        "/v1/responses",
        {**RESPONSES, "stream": True},
        Canned(STREAM, content_type="text/event-stream"),
        b"200",
    ),
    "stream the backend cuts": (
        "/v1/chat/completions",
        {**CHAT, "stream": True},
        Canned(STREAM, content_type="text/event-stream", cut_after=len(STREAM) // 2),
        b"200",
    ),
    "invalid request": ("/v1/chat/completions", {"model": "tiny", "messages": "not a list"}, None, b"400"),
    "backend error": ("/v1/chat/completions", CHAT, Canned(b'{"error": "overloaded"}', status=503), b"503"),
}


@pytest.mark.parametrize("close", [False, True], ids=["kept alive", "a connection each"])
@pytest.mark.parametrize("case", list(CASES))
def test_requests_leave_no_cycles(gateway: RunningGateway, replayer: Replayer, case: str, close: bool) -> None:
    path, body, canned, status = CASES[case]
    answering(replayer, canned)
    port = gateway.server.server.port
    with collected() as found:
        sock = socket.create_connection(("127.0.0.1", port))
        for _ in range(3):
            sock.sendall(_request(path, body, close=close))
            answer = _answers(sock)
            assert answer[answer.rfind(b"HTTP/1.1 ") :].split(b" ", 2)[1] == status, answer[-500:]
            if close:
                sock.close()
                sock = socket.create_connection(("127.0.0.1", port))
        sock.close()
        _idle(gateway)
    assert not found, f"left to the collector: {dict(found)}"


def test_a_client_that_leaves_mid_stream_leaves_no_cycles(gateway: RunningGateway, replayer: Replayer) -> None:
    answering(replayer, Canned(STREAM, content_type="text/event-stream", piece=40, delay=0.05))
    port = gateway.server.server.port
    with collected() as found:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(_request("/v1/chat/completions", {**CHAT, "stream": True}))
                sock.settimeout(10)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        _idle(gateway)
        deadline = time.monotonic() + 10
        while not replayer.closed_early.is_set():  # the gateway let the backend go too
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert not found, f"left to the collector: {dict(found)}"
