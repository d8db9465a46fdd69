"""Network helpers several test folders share."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener that must receive nothing: it notes every connection and what came on it."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(1)
                try:
                    got.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\nsecret stuff")
                except OSError:
                    got.append(b"")

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], got
    finally:
        server.close()
