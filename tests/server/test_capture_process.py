"""The serving side of the capture process (``server.capture_process.RemoteWriter``): what it sends
over a real Unix socket, and that an exchange it cannot hand over is counted and logged, never
lost silently. The whole path, workers and capture process, is in ``test_workers``."""

from __future__ import annotations

import logging
import pickle
import socket
import time
from pathlib import Path

import pytest

from oaishim.capture.raw import RawExchange, RawRequest, RawResponse, from_tuple, to_tuple
from oaishim.server.capture_process import RemoteWriter, _frames
from oaishim.server.exchange import StreamCount
from oaishim.server.metrics import Metrics


def exchange(i: int) -> RawExchange:
    raw = RawExchange(i, 1.5, "gateway")
    raw.client_request = RawRequest(i + 1, "POST", "/v1/chat/completions", [(b"host", b"x")], [b'{"a":', b"1}"])
    raw.client_response = RawResponse(i + 2, 200, [(b"content-type", b"text/event-stream")], [(i + 3, b"data: x\n\n")])
    raw.client_response.complete = True
    raw.end_ns = i + 4
    return raw


@pytest.fixture
def sink(tmp_path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "capture.sock"))
    server.listen(4)
    return server


def read_frames(conn: socket.socket, want: int) -> list[tuple[int, RawExchange | None]]:
    buffer = bytearray()
    got: list[tuple[int, RawExchange | None]] = []
    conn.settimeout(5)
    while len(got) < want:
        data = conn.recv(65536)
        assert data, "the sender closed early"
        buffer += data
        got += _frames(buffer)
    return got


def test_exchanges_cross_whole_and_in_order(tmp_path: Path, sink: socket.socket) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.005).start()
    conn, _ = sink.accept()
    sent = [exchange(i) for i in range(5)]
    for raw in sent:
        assert writer.submit(raw)
    got = read_frames(conn, 5)
    writer.close()
    assert [e for _, e in got] == sent
    assert all(dropped == 0 for dropped, _ in got)


def test_the_tuple_form_keeps_every_field() -> None:
    raw = exchange(7)
    raw.upstream_request = RawRequest(9, "POST", "http://u/v1/chat/completions", [("host", "u")], [b"{}"])
    raw.upstream_response = RawResponse(10, 502, [], [], False)
    raw.profile, raw.error = "vllm", "broke"
    assert from_tuple(pickle.loads(pickle.dumps(to_tuple(raw)))) == raw


def test_a_full_queue_drops_counts_and_logs(
    tmp_path: Path, sink: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=2)  # not started: nothing drains it
    metrics = Metrics(StreamCount(), writer)
    with caplog.at_level(logging.WARNING, "oaishim.capture"):
        results = [writer.submit(exchange(i)) for i in range(5)]
    assert results == [True, True, False, False, False]
    assert writer.dropped == 3
    assert b"oaishim_capture_dropped_total 3.0" in metrics.render()
    assert [r.message for r in caplog.records] == [
        "capture queue full: 1 exchange(s) dropped so far",
        "capture queue full: 2 exchange(s) dropped so far",
    ]  # 1, 2, 4, …: not one line per request


def test_drops_reach_the_capture_process_even_with_nothing_else_to_send(tmp_path: Path, sink: socket.socket) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=1, interval=0.005)
    writer.queue.extend([exchange(0)])  # full before the thread starts
    writer.submit(exchange(1))
    writer.start()
    conn, _ = sink.accept()
    got = read_frames(conn, 1)
    if got[-1][0] != 1:  # the drop count may come in the frame after the first
        got += read_frames(conn, 1)
    writer.close()
    assert got[-1][0] == 1


def test_a_capture_process_gone_counts_what_it_did_not_get(
    tmp_path: Path, sink: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.005).start()
    conn, _ = sink.accept()
    conn.close()
    sink.close()
    (tmp_path / "capture.sock").unlink()
    with caplog.at_level(logging.WARNING, "oaishim.capture"):
        deadline = time.monotonic() + 5
        while writer.dropped == 0:  # the first write after the close may still be accepted by the kernel
            writer.submit(exchange(0))
            time.sleep(0.02)
            assert time.monotonic() < deadline
    writer.close()
    assert writer.dropped >= 1
    assert any("capture process unreachable" in r.message for r in caplog.records)
