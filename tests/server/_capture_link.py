"""What the tests of the capture process's link share (``test_capture_process``,
``test_capture_frame``): an exchange compared by its fields, and the frames read off the capture
process's end of the socket (``conftest.capture_socket``)."""

from __future__ import annotations

import asyncio
import socket
import time

from oaishim.capture.raw import RawExchange, RawRequest, RawResponse
from oaishim.server.capture_feed import RemoteWriter
from oaishim.server.capture_frame import decode, frames

FIELDS: dict[type, tuple[str, ...]] = {
    RawExchange: ("t0_ns", "started", "mode", "client_request", "client_response", "upstream_request",
                  "upstream_response", "profile", "end_ns", "error"),
    RawRequest: ("t_ns", "method", "target", "headers", "body", "wire"),
    RawResponse: ("t_ns", "status", "headers", "reads", "complete", "wire"),
}  # fmt: skip


def fields(x: object) -> dict[str, object]:
    """An exchange (or one of its parts) as its fields, by name, its parts' fields nested."""
    return {
        name: fields(value) if type(value) in FIELDS else value
        for name in FIELDS[type(x)]
        for value in [getattr(x, name)]
    }


def readframes(conn: socket.socket, want: int) -> list[tuple[int, RawExchange | None]]:
    """``want`` frames read off ``conn``: each one's drop count and exchange (None: a count alone)."""
    buffer = bytearray()
    got: list[tuple[int, RawExchange | None]] = []
    conn.settimeout(5)
    while len(got) < want:
        data = conn.recv(65536)
        assert data, "the sender closed early"
        buffer += data
        got += [(dropped, decode(payload) if payload else None) for dropped, payload in frames(buffer)]
    return got


async def sent_all(writer: RemoteWriter, seconds: float = 10, step: float = 0.01) -> None:
    """Wait (``seconds`` at most, looking every ``step``) until ``writer`` holds nothing unsent."""
    deadline = time.monotonic() + seconds
    while writer.held and time.monotonic() < deadline:
        await asyncio.sleep(step)
