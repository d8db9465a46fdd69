"""The gateway's own HTTP/1.1 server (server.serving, server.http, server.h1cycle), over real sockets
with a small ASGI app: what any client may rely on from an HTTP/1.1 server (requests split
anywhere, chunked bodies, pipelining, ``Expect: 100-continue``, HTTP/1.0, HEAD, keep-alive and its
end, backpressure both ways), what an app gets when it breaks its framing, and a graceful stop.
The gateway's limits (deadlines, size bounds, the connection bound) are test_client_limits.py."""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httptools
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_client_limits import official_refusal, read_answer

from _props import examples
from _threadserver import ThreadServer
from oaishim.server import http
from oaishim.server.http import LINGER_SECONDS, PIPELINE_MAX, HttpLimits, ServerState, protocol_factory, split_target
from oaishim.server.serving import Server


class Echo:
    """Answers each request with what it saw, as JSON; a few paths behave otherwise (see __call__)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.release = threading.Event()
        self.lifespan: list[str] = []
        self.sent_pieces = 0
        self.paths: list[str] = []  # the requests the app was given

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        path = scope["path"]
        self.paths.append(path)
        if path == "/early":  # answers at once, without reading the body (as a refused key is)
            head = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.errors.append("disconnect")
                return
            body += message["body"]
            more = message["more_body"]
        if path == "/slow":
            await asyncio.sleep(0.2)
        if path == "/hold":
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        if path == "/boom":
            raise ValueError("the app failed")
        if path == "/big":  # 8 MiB in 64 KiB pieces, to a client that may not read
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            for i in range(128):
                await send({"type": "http.response.body", "body": bytes([65 + i % 26]) * 65536, "more_body": True})
                self.sent_pieces = i + 1
            await send({"type": "http.response.body", "body": b""})
            return
        if path == "/broken":  # starts a stream, then fails
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise ValueError("broke off")
        if path == "/cased":  # the framing headers in another case: still the framing, not copied
            head = [(b"Content-Length", b"3"), (b"Transfer-Encoding", b"chunked"), (b"CONNECTION", b"Close")]
            await send({"type": "http.response.start", "status": 200, "headers": [*head, (b"X-Kept", b"1")]})
            await send({"type": "http.response.body", "body": b"abc"})
            return
        if path in ("/long", "/short", "/split", "/cr", "/lf", "/colon"):
            splits = {"/split": b"x\r\nx-injected: 1", "/cr": b"x\rx-injected: 1", "/lf": b"x\nx-injected: 1"}
            value = splits.get(path, b"x")
            name = b"x-injected: 1\r\nx-value" if path == "/colon" else b"x-value"
            head = [(b"content-length", b"4"), (name, value)]
            try:
                await send({"type": "http.response.start", "status": 200, "headers": head})
                await send({"type": "http.response.body", "body": b"12345" if path == "/long" else b"123"})
            except RuntimeError as exc:
                self.errors.append(str(exc))
                raise
            return
        seen = {
            "method": scope["method"],
            "path": path,
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "body": body.decode("latin-1"),
            "http_version": scope["http_version"],
        }
        answer = json.dumps(seen).encode()
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": answer})


@contextmanager
def serving(app: Any, **limits: Any) -> Iterator[tuple[str, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadServer(Server(app, "127.0.0.1", port, HttpLimits(**limits)))
    server.start()
    try:
        yield "127.0.0.1", port
    finally:
        server.stop()


def connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=5)


def recv_all(sock: socket.socket, wait: float = 5.0) -> bytes:
    """Everything up to the server's close."""
    sock.settimeout(wait)
    data = b""
    while piece := sock.recv(65536):
        data += piece
    return data


def answers(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """The responses in ``data``, each sized by its content-length."""
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        size = int(headers["content-length"])
        found.append((status, headers, rest[:size]))
        data = rest[size:]
    return found


CHAT = b"POST /v1/chat/completions?x=1&y=%41 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"


def test_requests_split_anywhere_are_read_the_same() -> None:
    """A request fed to the connection in two pieces, cut at every byte: the app sees the same
    request each time (and the same for a chunked body)."""
    whole = CHAT + b'Content-Length: 11\r\n\r\n{"a": "b"}\n'
    chunked = CHAT + b'Transfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n7\r\n: "b"}\n\r\n0\r\n\r\n'

    async def run(request: bytes) -> list[dict[str, Any]]:
        app = Echo()
        loop = asyncio.get_running_loop()
        seen = []
        for cut in range(1, len(request)):
            ours, theirs = socket.socketpair()
            with ours, theirs:
                theirs.setblocking(False)
                _, conn = await loop.connect_accepted_socket(
                    protocol_factory(ServerState(app, HttpLimits()), loop), ours
                )
                conn.data_received(request[:cut])
                conn.data_received(request[cut:])
                data = b""
                while b"}" not in data:
                    await asyncio.sleep(0.001)
                    with suppress(BlockingIOError):
                        data += theirs.recv(65536)
                answer = json.loads(data.partition(b"\r\n\r\n")[2])
                answer["headers"] = [
                    h for h in answer["headers"] if h[0] not in ("content-length", "transfer-encoding")
                ]
                seen.append(answer)
                conn.transport.close()
        return seen

    for request in (whole, chunked):
        seen = asyncio.run(run(request))
        assert len(seen) == len(request) - 1
        first = seen[0]
        assert first["method"] == "POST" and first["raw_path"] == "/v1/chat/completions"
        assert first["query"] == "x=1&y=%41" and first["body"] == '{"a": "b"}\n'
        assert first["headers"] == [["host", "a"], ["content-type", "application/json"]]  # names lower-case
        assert all(s == first for s in seen), [i for i, s in enumerate(seen) if s != first][:5]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_pipelined_requests_are_answered_in_order(loop: str) -> None:
    app = Echo()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadServer(Server(app, "127.0.0.1", port), loop=loop)
    server.start()
    try:
        with connect(("127.0.0.1", port)) as sock:
            requests = [b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n", b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n"]
            requests.append(b"POST /third HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
            sock.sendall(b"".join(requests))  # all three in one write, before any answer
            got = answers(recv_all(sock))
    finally:
        server.stop()
    assert [json.loads(body)["path"] for _, _, body in got] == ["/slow", "/second", "/third"]
    assert json.loads(got[2][2])["body"] == "abc"
    assert got[2][1]["connection"] == "close" and "connection" not in got[0][1]


def test_expect_100_continue_is_answered_before_the_body() -> None:
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(CHAT + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        sock.settimeout(2)
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        status, _, body = read_answer(sock)
    assert status == 200 and json.loads(body)["body"] == "hello"


@pytest.mark.parametrize(
    ("request_bytes", "seen"),
    [
        (b"GET /old HTTP/1.0\r\n\r\n", {"http_version": "1.0"}),  # HTTP/1.0: not kept alive
        # an Upgrade (h2c) is not taken: answered as HTTP/1.1, then closed before the other protocol
        (
            b"GET /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nPRI * HTTP/2.0\r\n",
            {"path": "/up"},
        ),
    ],
)
def test_answered_and_the_connection_closed(request_bytes: bytes, seen: dict[str, str]) -> None:
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(request_bytes)
        data = recv_all(sock)  # returns: the server closed
    ((status, headers, body),) = answers(data)
    assert status.startswith("HTTP/1.1 200") and headers["connection"] == "close"
    assert seen.items() <= json.loads(body).items()


@pytest.mark.parametrize("connection", [b"", b"Connection: keep-alive\r\n"])
def test_an_http_1_0_client_gets_a_body_of_unknown_length_unchunked_ended_by_the_close(connection: bytes) -> None:
    """HTTP/1.0 has no chunked coding (RFC 9112, 6.1): a body the app sends without a length
    goes as it is and the close ends it, even when the client asked to keep the connection."""
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"GET /big HTTP/1.0\r\n" + connection + b"\r\n")
        data = recv_all(sock)  # returns: the server closed
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").lower().split("\r\n")
    assert lines[0].startswith("http/1.1 200")
    assert not any(line.startswith(("transfer-encoding", "content-length")) for line in lines)
    assert "connection: close" in lines
    assert body == b"".join(bytes([65 + i % 26]) * 65536 for i in range(128))


def test_an_http_1_0_clients_broken_answer_is_cut_where_it_broke() -> None:
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"GET /broken HTTP/1.0\r\n\r\n")
        data = recv_all(sock)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding" not in data
    assert data.endswith(b"\r\n\r\npart")


def test_head_gets_the_length_and_no_body() -> None:
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\nGET /after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        data = recv_all(sock)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert int(dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])["content-length"]) > 0
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n")  # no body between: the next answer follows at once
    assert json.loads(answers(rest)[0][2])["path"] == "/after"


def test_an_idle_kept_alive_connection_is_closed_after_its_time() -> None:
    with serving(Echo(), keep_alive=0.4) as address, connect(address) as sock:
        for _ in range(3):  # in use: kept open past the idle time
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            assert read_answer(sock)[0] == 200
            time.sleep(0.25)
        started = time.monotonic()
        assert recv_all(sock, wait=3) == b""
        assert 0.1 < time.monotonic() - started < 1.5


def test_an_app_that_fails_before_answering_gets_an_official_500() -> None:
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\n")
        error = official_refusal(read_answer(sock), 500)
    assert error["type"] == "server_error"


def test_an_answer_that_breaks_off_is_not_ended() -> None:
    """The client sees a broken chunked body (no last chunk), never a short one that looks whole."""
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"GET /broken HTTP/1.1\r\nHost: a\r\n\r\n")
        data = recv_all(sock)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in data
    assert data.endswith(b"4\r\npart\r\n")  # and then the close: no 0\r\n\r\n


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/long", "Response content longer than Content-Length"),
        ("/short", "Response content shorter than Content-Length"),
        ("/split", "a line end in a name or a value"),
        ("/cr", "a line end in a name or a value"),
        ("/lf", "a line end in a name or a value"),
        ("/colon", "Invalid HTTP header name"),
    ],
)
def test_an_answer_that_breaks_its_framing_raises_in_the_app(path: str, error: str) -> None:
    app = Echo()
    with serving(app) as address, connect(address) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        data = recv_all(sock)
    assert len(app.errors) == 1 and error in app.errors[0]
    assert b"x-injected" not in data
    if path in ("/split", "/cr", "/lf", "/colon"):  # nothing was sent before the refusal: the client gets the 500
        assert data.startswith(b"HTTP/1.1 500 ")


def test_an_apps_framing_headers_count_in_any_case() -> None:
    """Content-Length, Transfer-Encoding and Connection are the framing's whatever their case: the
    length is written once, the app's transfer coding dropped, a close honoured; other names are
    written as the app gave them."""
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"GET /cased HTTP/1.1\r\nHost: a\r\n\r\n")
        data = recv_all(sock)  # (the server closes: the app asked for it)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")[1:]
    assert body == b"abc" and b"X-Kept: 1" in lines
    assert [line for line in lines if line.lower().startswith((b"content-length", b"transfer-encoding"))] == [
        b"content-length: 3"
    ]
    assert b"connection: close" in lines


def test_a_slow_reader_holds_the_app_back_and_loses_nothing() -> None:
    app = Echo()
    with serving(app) as address, connect(address) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        time.sleep(0.5)
        assert 0 < app.sent_pieces < 128  # the app waits for the client, it does not buffer 8 MiB
        data = recv_all(sock, wait=10)
    body = data.partition(b"\r\n\r\n")[2]
    pieces, rest = [], body
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        pieces.append(rest[:n])
        rest = rest[n + 2 :]
    assert pieces[-1] == b"" and len(pieces) == 129
    assert all(p == bytes([65 + i % 26]) * 65536 for i, p in enumerate(pieces[:-1]))


def test_a_large_request_body_arrives_whole() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB, more than the connection holds before it pauses
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        status, _, answer = read_answer(sock, wait=10)
    assert status == 200 and json.loads(answer)["body"].encode("latin-1") == body


def test_a_client_that_leaves_is_seen_by_the_app() -> None:
    app = Echo()
    with serving(app) as address:
        with connect(address) as sock:
            sock.sendall(CHAT + b"Content-Length: 100\r\n\r\n{")
            time.sleep(0.1)
        deadline = time.monotonic() + 3
        while not app.errors and time.monotonic() < deadline:
            time.sleep(0.01)
    assert app.errors == ["disconnect"]


def test_a_stop_finishes_the_answers_under_way_then_the_lifespan() -> None:
    app = Echo()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadServer(Server(app, "127.0.0.1", port))
    server.start()
    assert app.lifespan == ["lifespan.startup"]
    with connect(("127.0.0.1", port)) as busy, connect(("127.0.0.1", port)) as idle:
        busy.sendall(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
        time.sleep(0.1)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        assert recv_all(idle, wait=2) == b""  # an idle connection is closed at once
        time.sleep(0.1)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()  # no longer listening
        assert app.lifespan == ["lifespan.startup"]  # not before the answer under way
        app.release.set()
        ((status, headers, body),) = answers(recv_all(busy))
        stopping.join(5)
    assert status.startswith("HTTP/1.1 200") and headers["connection"] == "close"
    assert json.loads(body)["path"] == "/hold"
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]


HANGING_STARTUP = """
import asyncio
from oaishim.server.serving import Server

class App:
    async def __call__(self, scope, receive, send):
        assert scope["type"] == "lifespan"
        await receive()
        print("startup begun", flush=True)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print("startup cancelled", flush=True)
            raise

print("started:", Server(App(), "127.0.0.1", 0).run(), flush=True)
"""


def test_a_signal_while_the_startup_hangs_stops_the_server() -> None:
    """SIGTERM while the app's startup has not completed (a store or a backend that never answers):
    the startup is cancelled and the process ends, instead of waiting on it. The app here hangs on
    purpose: no part of the gateway can be made to hang there on demand."""
    proc = subprocess.Popen([sys.executable, "-c", HANGING_STARTUP], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "startup begun\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.splitlines() == ["startup cancelled", "started: False"]
    assert proc.returncode == 0


def test_a_connection_made_while_the_server_drains_is_shut_down_at_once() -> None:
    """One the listening socket accepted just before it closed, made after the drain's pass over
    the connections, closes as the idle ones then did; it does not hold the stop up."""

    async def run() -> tuple[bytes, bool]:
        loop = asyncio.get_running_loop()
        state = ServerState(Echo(), HttpLimits())
        state.stopping = True
        ours, theirs = socket.socketpair()
        with ours, theirs:
            theirs.setblocking(False)
            _, conn = await loop.connect_accepted_socket(protocol_factory(state, loop), ours)
            for _ in range(200):
                await asyncio.sleep(0.005)
                try:
                    return theirs.recv(100), conn in state.connections
                except BlockingIOError:
                    continue
        raise AssertionError("the connection stayed open")

    assert asyncio.run(run()) == (b"", False)  # closed, and no longer counted


def test_an_app_whose_startup_fails_is_not_served() -> None:
    async def failing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no store"})

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Server(failing, "127.0.0.1", port)
    assert server.run(loop="asyncio") is False
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_started_is_set_once_the_start_ups_collection_is_over() -> None:
    """The start-up's full collection and freeze run before ``started``: whoever waits on it (a
    test's thread, which then may turn the collector's debugging on) never runs beside that pass.
    The collector's own callbacks tell when the server thread began a full pass."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadServer(Server(Echo(), "127.0.0.1", port))
    seen: list[bool] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2 and threading.get_ident() == server._thread.ident:
            seen.append(server.started)

    gc.callbacks.append(watch)
    try:
        server.start()
    finally:
        gc.callbacks.remove(watch)
        server.stop()
    assert seen[:1] == [False], seen  # the server thread's first full pass came before started


def test_a_refusal_made_while_parsing_ends_the_connection_after_its_linger() -> None:
    """A CONNECT's target is no URL: a 400; what follows in the same read is never begun, and the
    server lets go of the connection once the refusal has lingered, even for a client that says
    nothing more (its socket closed, not only its sending ended)."""
    app = Echo()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Server(app, "127.0.0.1", port)
    running = ThreadServer(server)
    running.start()
    try:
        with connect(("127.0.0.1", port)) as sock:
            started = time.monotonic()
            sock.sendall(b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n")
            error = official_refusal(read_answer(sock), 400)
            while server.state.connections:
                assert time.monotonic() - started < LINGER_SECONDS + 2, "the refused connection was kept"
                time.sleep(0.05)
    finally:
        running.stop()
    assert error["type"] == "invalid_request_error" and app.paths == []


def test_after_an_early_answer_the_rest_of_the_body_and_the_next_request_are_read() -> None:
    """An answer given before the body was read (a refused key): the body's rest is read and
    dropped, and the kept-alive connection serves the next request."""
    with serving(Echo()) as address, connect(address) as sock:
        sock.sendall(b"POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: 400000\r\n\r\n" + b"x" * 200000)
        assert read_answer(sock)[0] == 200
        sock.sendall(b"x" * 200000 + b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, body = read_answer(sock)
    assert status == 200 and json.loads(body)["path"] == "/next"


def test_a_connection_idle_after_an_early_answer_still_closes() -> None:
    with serving(Echo(), keep_alive=0.4) as address, connect(address) as sock:
        sock.sendall(b"POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n12345")
        assert read_answer(sock)[0] == 200
        sock.sendall(b"67890")  # the body ends after its answer
        started = time.monotonic()
        assert recv_all(sock, wait=3) == b""
        assert time.monotonic() - started < 1.5


def test_a_connection_holds_a_bounded_pipeline() -> None:
    """Thousands of small requests in one read: the connection answers the one under way and the
    queue behind it, the last with connection: close; the rest are never begun."""
    app = Echo()
    with serving(app) as address, connect(address) as sock:
        sock.sendall(b"GET /p HTTP/1.1\r\nHost: a\r\n\r\n" * 5000)
        got = answers(recv_all(sock, wait=10))
    assert len(got) == 1 + PIPELINE_MAX == len(app.paths)
    assert got[-1][1]["connection"] == "close" and all("connection" not in h for _, h, _ in got[:-1])


class Whole:
    """Answers each request with the same sized response: at once through the ``respond`` extension
    when the path is /whole, else as its two messages. Also tries ``respond`` once more after that,
    which must refuse (the response has started)."""

    def __init__(self) -> None:
        self.again: list[bytes | None] = []
        self.written: list[bytes] = []  # what each whole write said it wrote

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b'{"answer": "' + scope["method"].encode() + b" " + scope["http_version"].encode() + b'"}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), (b"x-a", b"1")]
        respond = scope["extensions"]["oaishim.respond"]
        if scope["path"] == "/whole":
            written = respond(201, headers, body)
            assert written is not None
            self.written.append(written)
        else:
            await send({"type": "http.response.start", "status": 201, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        self.again.append(respond(201, headers, body))


@pytest.mark.parametrize("request_line", ["GET {} HTTP/1.1", "HEAD {} HTTP/1.1", "GET {} HTTP/1.0"])
def test_a_whole_response_at_once_is_the_same_bytes_as_its_two_messages(request_line: str) -> None:
    app = Whole()
    raw: dict[str, bytes] = {}
    with serving(app) as address:
        for path in ("/whole", "/messages"):
            with connect(address) as sock:
                sock.sendall(request_line.format(path).encode() + b"\r\nHost: a\r\nConnection: close\r\n\r\n")
                raw[path] = recv_all(sock)
    undated = {
        p: b"\r\n".join(x for x in r.split(b"\r\n") if not x.lower().startswith(b"date:")) for p, r in raw.items()
    }
    assert undated["/whole"] == undated["/messages"]
    assert undated["/whole"].startswith(b"HTTP/1.1 201 Created\r\n") and b"x-a: 1" in undated["/whole"]
    assert undated["/whole"].endswith(b"\r\n\r\n" if request_line.startswith("HEAD") else b'"}')
    assert app.again == [None, None]
    assert app.written == [raw["/whole"]]  # what the whole write returns is every byte the client got


class Named(Echo):
    """Echo, noting the name of the task each request runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            task = asyncio.current_task()
            assert task is not None
            self.names.append(task.get_name())
        await super().__call__(scope, receive, send)


def test_each_request_runs_in_a_named_task_the_server_forgets_once_it_ends() -> None:
    """The server's set of request tasks (what a stop waits for, what tells a lone request from
    many) is emptied as each request ends: answered, failed in the app, or left by its client."""
    from oaishim.server.http import TASK_NAME

    app = Named()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Server(app, "127.0.0.1", port, HttpLimits())
    running = ThreadServer(server)
    running.start()
    try:
        address = ("127.0.0.1", port)
        with connect(address) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
            assert read_answer(sock)[0] == 200
            sock.sendall(b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\n")
            assert read_answer(sock)[0] == 500
        with connect(address) as sock:
            sock.sendall(CHAT + b"Content-Length: 100\r\n\r\n{")  # then leaves
            deadline = time.monotonic() + 3
            while len(app.names) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        deadline = time.monotonic() + 3
        while (server.state.tasks or not app.errors) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert app.errors == ["disconnect"]
        assert not server.state.tasks
        assert app.names == [TASK_NAME] * 3
    finally:
        running.stop()


def test_a_chunk_is_its_size_in_hex_its_bytes_and_a_line_end_at_every_size() -> None:
    """The chunk framing (RFC 9112 7.1) on both sides of the table of size lines."""
    from oaishim.server.h1cycle import _chunk

    for size in (*range(1, 40), 255, 256, 1022, 1023, 1024, 1025, 4096, 70_000):
        data = bytes(65 + i % 26 for i in range(size))
        framed = _chunk(data)
        head, _, rest = framed.partition(b"\r\n")
        assert int(head, 16) == size and head == head.lower() and not head.startswith(b"0")
        assert rest == data + b"\r\n"


# -- the request target ---------------------------------------------------------------------------


def _parsed(url: bytes) -> tuple[bytes, bytes] | str:
    """What ``httptools.parse_url`` makes of a target: its path and query, or that it refuses it."""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return "refused"
    return parsed.path or b"/", parsed.query or b""


def _split(url: bytes) -> tuple[bytes, bytes] | str:
    try:
        return split_target(url)
    except httptools.HttpParserInvalidURLError:
        return "refused"


@given(
    st.binary(max_size=12)
    | st.lists(
        st.sampled_from([b"/", b"v1", b"?", b"#", b"%2F", b"a=1", b" ", b"\x7f", b"\xc3\xa9", b"http://h", b"*"]),
        max_size=6,
    ).map(b"".join)
)
@examples(600)
def test_a_target_is_split_as_httptools_splits_it(url: bytes) -> None:
    """A target found to be all path skips the parse from then on; every target, the first time and
    the next, comes out as the parse gives it (or is refused as the parse refuses it)."""
    assert _split(url) == _parsed(url)
    assert _split(url) == _parsed(url)


def test_each_byte_of_a_path_is_read_as_the_parse_reads_it() -> None:
    for byte in range(256):
        url = b"/a" + bytes([byte]) + b"b"
        assert _split(url) == _parsed(url) == _split(url), byte


def test_only_a_target_that_is_all_path_is_remembered() -> None:
    split_target(b"/v1/remembered")
    split_target(b"/v1/asked?x=1")
    assert b"/v1/remembered" in http._WHOLE_PATHS
    assert b"/v1/asked?x=1" not in http._WHOLE_PATHS
