"""A busy worker holds its frames (``server.capture_feed``, ``RemoteWriter.hold_bytes`` and
``hold_age``): nothing reaches the capture process's socket while exchanges keep being framed, and
everything does, whole and in order, a tick after they stop, once the frames held reach their
bound in bytes, or once they have been held their time. Over a real Unix socket, from an event loop."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from _capture_link import fields, readframes
from test_capture_process import exchange

from oaishim.capture.raw import RawExchange
from oaishim.server.capture_busy import BusyBoard, board_path
from oaishim.server.capture_feed import QUEUE_BYTES, RemoteRecording, RemoteWriter, worker_bounds


def waiting(conn: socket.socket) -> int:
    """The bytes the socket has for its reader now (read and kept nowhere: a peek)."""
    try:
        return len(conn.recv(1 << 22, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return 0


async def submit_for(writer: RemoteWriter, sent: list[RawExchange], seconds: float, conn: socket.socket) -> list[int]:
    """Frame one of ``sent`` every 2 ms for ``seconds`` (the rest left out); the bytes waiting on
    ``conn`` after each, and how many were framed, in ``sent``'s place: ``sent`` is cut to them."""
    seen: list[int] = []
    deadline = time.monotonic() + seconds
    count = 0
    while time.monotonic() < deadline and count < len(sent):
        assert writer.submit(sent[count])
        count += 1
        await asyncio.sleep(0.002)
        seen.append(waiting(conn))
    del sent[count:]
    return seen


def test_a_busy_worker_sends_nothing_and_everything_a_tick_after_it_stops(
    tmp_path: Path, capture_socket: socket.socket
) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.01).start()
    conn, _ = capture_socket.accept()
    sent = [exchange(i, 500) for i in range(1000)]

    async def serve() -> tuple[list[int], float]:
        seen = await submit_for(writer, sent, 0.3, conn)
        stopped = time.monotonic()
        while writer.held and time.monotonic() - stopped < 5:
            await asyncio.sleep(0.001)
        return seen, time.monotonic() - stopped

    seen, after = asyncio.run(serve())
    assert len(sent) > 50 and set(seen) == {0}  # 0.3 s of exchanges, none on the socket meanwhile
    assert after < 0.1  # gone within a few ticks of the last (one tick still finds it busy)
    got = readframes(conn, len(sent))
    writer.close()
    assert [fields(e) for _, e in got] == [fields(e) for e in sent]
    assert (writer.sent, writer.dropped) == (len(sent), 0)


def run_writer(
    tmp_path: Path, capture_socket: socket.socket, sent: list[RawExchange], seconds: float, **options: float
) -> tuple[RemoteWriter, socket.socket, list[int]]:
    """A writer with ``options`` given ``sent`` as ``submit_for`` gives them; it, the capture
    side's connection, and what waited there after each submit."""
    writer = RemoteWriter(tmp_path / "capture.sock", **options).start()  # type: ignore[arg-type]
    conn, _ = capture_socket.accept()

    async def serve() -> list[int]:
        return await submit_for(writer, sent, seconds, conn)

    return writer, conn, asyncio.run(serve())


def arrive_whole(writer: RemoteWriter, conn: socket.socket, sent: list[RawExchange]) -> None:
    """Once ``writer`` is closed, every one of ``sent`` is on ``conn``, whole and in order."""
    writer.close()
    assert [fields(e) for _, e in readframes(conn, len(sent))] == [fields(e) for e in sent]


def test_the_frames_held_go_once_they_reach_hold_bytes(tmp_path: Path, capture_socket: socket.socket) -> None:
    """About 4 KB an exchange, a bound of 40 KB: the frames go every ten or so, while the worker is
    still busy, and arrive whole and in order."""
    sent = [exchange(i, 4000) for i in range(150)]
    writer, conn, seen = run_writer(tmp_path, capture_socket, sent, 10, interval=0.005, hold_bytes=40_000)
    assert len(sent) == 150
    assert max(seen) > 40_000  # they went while it was busy, a bound's worth or more at a time
    arrive_whole(writer, conn, sent)


def test_the_frames_held_go_once_held_hold_age(tmp_path: Path, capture_socket: socket.socket) -> None:
    sent = [exchange(i, 300) for i in range(1000)]
    writer, conn, seen = run_writer(tmp_path, capture_socket, sent, 0.6, interval=0.01, hold_age=0.1)
    first = next(i for i, n in enumerate(seen) if n)
    assert 30 <= first <= 90  # held about 0.1 s from the first hold (2 ms and more a submit)
    assert len(set(seen[first:])) > 2  # and again each 0.1 s after (the peeks grow by steps)
    arrive_whole(writer, conn, sent)


def test_frames_never_held_with_hold_age_zero(tmp_path: Path, capture_socket: socket.socket) -> None:
    sent = [exchange(i, 300) for i in range(40)]
    writer, conn, seen = run_writer(tmp_path, capture_socket, sent, 10, interval=0.005, hold_age=0)
    assert next(i for i, n in enumerate(seen) if n) <= 10  # the first tick's send (5 ms, 2 ms a submit)
    arrive_whole(writer, conn, sent)


def test_each_worker_may_hold_its_share_of_the_capture_backlog() -> None:
    mib = 1 << 20
    assert worker_bounds(1024 * mib, 2) == (512 * mib, 256 * mib)
    assert worker_bounds(1024 * mib, 0) == (1024 * mib, 512 * mib)  # (no workers counted: one)
    assert worker_bounds(256 * mib, 64) == (QUEUE_BYTES, QUEUE_BYTES // 2)  # never under the least
    writer = RemoteRecording(Path("unused.sock"), 768 * mib, 3).writer  # (not started: nothing connects)
    assert (writer.queue_bytes, writer.hold_bytes) == (256 * mib, 128 * mib)


def test_a_busy_worker_says_so_on_the_board_each_tick(tmp_path: Path, capture_socket: socket.socket) -> None:
    """The board the capture process reads (``capture_busy``), made as the serving parent makes it:
    the worker's ticks write their time there while it frames exchanges, and nothing once it stops."""
    board = BusyBoard(board_path(tmp_path / "capture.sock"), create=True)
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.01).start()
    conn, _ = capture_socket.accept()
    sent = [exchange(i, 100) for i in range(100)]
    lags: list[float] = []

    async def serve() -> float:
        assert board.last() == 0.0  # nothing said yet
        for raw in sent:
            writer.submit(raw)
            await asyncio.sleep(0.002)
            if len(lags) < 100 and board.last():
                lags.append(time.monotonic() - board.last())
        stopped = time.monotonic()
        await asyncio.sleep(0.1)
        return stopped

    stopped = asyncio.run(serve())
    writer.close()
    assert lags and max(lags) < 0.05  # a tick's time (10 ms), and the loop's lateness
    # its last word: the tick after the last exchange (the 2 ms after it, or the next 10), none since
    assert -0.005 < board.last() - stopped < 0.03
    assert [fields(e) for _, e in readframes(conn, len(sent))] == [fields(e) for e in sent]
    assert BusyBoard.open(tmp_path / "none.busy") is None
