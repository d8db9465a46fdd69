"""Servers the gateway tests start: a backend that replays raw recorded bytes, and the gateway.

The replaying backend is a test double for a real engine: it answers with the exact bytes of a
recording (status, content type, body), optionally in pieces, and can cut the connection in the
middle of a body — a server killed mid-stream, a fault that cannot be provoked on demand with a
real engine. Real engines are exercised in the engine integration tests. Both servers listen on
127.0.0.1 only and are stopped by the fixtures that start them.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from _threadserver import ThreadServer
from oaishim.server.app import Gateway
from oaishim.server.config import Settings
from oaishim.server.main import limits_for
from oaishim.server.serving import Server


@dataclass
class Canned:
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    piece: int = 0  # send the body in pieces of this many bytes (0: at once)
    delay: float = 0.0  # seconds between pieces
    cut_after: int | None = None  # close the connection after this many body bytes
    headers: dict[str, str] = field(default_factory=dict)
    head_delay: float = 0.0  # seconds to wait before sending the status line (a slow first byte)
    hold: threading.Event | None = None  # wait for this (at most 10 s) before the status line: busy until released


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class Replayer:
    """Answers each request with the next queued Canned response (or a 599 when none is queued).

    When ``responder`` is set, it answers instead of the queue: it is called with each request as
    seen and returns the Canned answer (a simulated backend, e.g. ``_trt.TrtSim``).
    """

    def __init__(self, port: int = 0) -> None:
        self.queue: deque[Canned] = deque()
        self.responder: Callable[[Seen], Canned] | None = None
        self.seen: list[Seen] = []
        self.closed_early = threading.Event()  # the client closed while we were still sending
        self.closed_at: float | None = None  # time.monotonic() when that was first noticed
        # Bumped by reset(): a handler still sending an earlier test's answer (its thread outlives the
        # test) must not mark this test's exchange as closed early.
        self.generation = 0
        replayer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                replayer.seen.append(seen)
                generation = replayer.generation
                if replayer.responder is not None:
                    canned = replayer.responder(seen)
                elif replayer.queue:
                    canned = replayer.queue.popleft()
                else:
                    canned = Canned(b'{"error": "nothing queued"}', 599)
                data = canned.body if canned.cut_after is None else canned.body[: canned.cut_after]
                step = canned.piece or len(data) or 1
                try:
                    if canned.head_delay:
                        time.sleep(canned.head_delay)
                    if canned.hold is not None:
                        canned.hold.wait(10)
                    self.send_response(canned.status)
                    self.send_header("content-type", canned.content_type)
                    for key, value in canned.headers.items():
                        self.send_header(key, value)
                    self.send_header("connection", "close")
                    self.end_headers()
                    for start in range(0, len(data), step):
                        self.wfile.write(data[start : start + step])
                        self.wfile.flush()
                        if canned.delay:
                            self._pause(canned.delay)
                except (BrokenPipeError, ConnectionResetError):
                    replayer.mark_closed(generation)
                self.close_connection = True

            def _pause(self, seconds: float) -> None:
                """Wait between pieces, but notice at once when the client closes its end (a write to
                a closed socket fails only a write or two later, too late to time the close)."""
                started = time.monotonic()
                readable, _, _ = select.select([self.connection], [], [], seconds)
                if readable:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        raise ConnectionResetError("the client closed the connection")
                    time.sleep(max(0.0, seconds - (time.monotonic() - started)))

            do_GET = _serve
            do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self) -> Replayer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def push(self, *canned: Canned) -> None:
        self.queue.extend(canned)

    def reset(self) -> None:
        """Forget the queue, what was seen and any early close: a fresh backend for the next test."""
        self.generation += 1
        self.queue.clear()
        self.seen.clear()
        self.closed_early.clear()
        self.closed_at = None

    def mark_closed(self, generation: int) -> None:
        if generation == self.generation and not self.closed_early.is_set():
            self.closed_at = time.monotonic()
            self.closed_early.set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RunningGateway:
    """The real gateway app under its HTTP server, in a thread of this process."""

    def __init__(self, settings: Settings, loop: str = "asyncio") -> None:
        self.app = Gateway(settings)
        # as `oaishim serve` configures it (the limits of its connections); ``loop``: asyncio's or
        # uvloop's, which `oaishim serve` runs on
        self.server = ThreadServer(Server(self.app, "127.0.0.1", settings.port, limits_for(settings)), loop=loop)
        self.url = f"http://127.0.0.1:{settings.port}"

    def __enter__(self) -> RunningGateway:
        self.server.start("the gateway")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
