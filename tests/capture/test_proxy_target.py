"""The logging proxy forwards targets as they came, but only paths: a request line such as
``POST *@127.0.0.1:9999/x`` would otherwise make it send the body to that host and return the answer."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from _apps import EchoBackend, RunningApp, post

from _net import listener
from oaishim.capture_tools.proxy import CaptureProxy
from oaishim.server.recording import Recording


def send_line(port: int, line: bytes) -> tuple[int, bytes]:
    body = b'{"model": "tiny"}'
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(line + b"\r\nHost: px\r\nConnection: close\r\ncontent-length: 17\r\n\r\n" + body)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def test_proxy_refuses_targets_that_are_not_paths(tmp_path: Path) -> None:
    backend = EchoBackend()
    with RunningApp(backend) as upstream:
        proxy = CaptureProxy(upstream.url, Recording(tmp_path / "px", mode="proxy"))
        with RunningApp(proxy) as px, listener() as (port, got):
            for line in (f"POST *@127.0.0.1:{port}/x HTTP/1.1".encode(), b"OPTIONS * HTTP/1.1"):
                status, body = send_line(px.port, line)
                assert status == 400 and b"secret stuff" not in body
                assert json.loads(body)["error"]["type"] == "invalid_request_error"
            time.sleep(0.2)
            assert got == []
            assert backend.seen == []
            assert post(px.url + "/v1/chat/completions", {"model": "tiny", "messages": []})[0] == 200  # paths pass
    assert len(backend.seen) == 1
