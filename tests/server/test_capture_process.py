"""The serving side of the capture process (``server.capture_feed.RemoteWriter``): what it sends
over a real Unix socket, from an event loop as the gateway runs it (frames held until the timer,
a kernel buffer that takes part of a write), and that an exchange it cannot hand over is counted
and logged, never lost silently. The whole path, workers and capture process, is in ``test_workers``."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _capture_link import fields, readframes, sent_all

from oaishim.capture.raw import RawExchange, RawRequest, RawResponse, from_tuple, to_tuple
from oaishim.server.capture_feed import RemoteWriter
from oaishim.server.capture_frame import decode, encode, frames
from oaishim.server.exchange import StreamCount
from oaishim.server.metrics import Metrics


def exchange(i: int, size: int = 0) -> RawExchange:
    raw = RawExchange(i, 1.5, "gateway")
    raw.client_request = RawRequest(i + 1, "POST", "/v1/chat/completions", [(b"host", b"x")], [b'{"a":', b"1}"])
    piece = b"data: " + bytes([65 + i % 26]) * size + b"x\n\n"
    raw.client_response = RawResponse(i + 2, 200, [(b"content-type", b"text/event-stream")], [(i + 3, piece)])
    raw.client_response.complete = True
    raw.end_ns = i + 4
    return raw


def test_exchanges_cross_whole_and_in_order_once_the_timer_fires(tmp_path: Path, capture_socket: socket.socket) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.01).start()
    conn, _ = capture_socket.accept()
    sent = [exchange(i) for i in range(5)]

    async def serve() -> tuple[int, int]:
        for raw in sent:
            assert writer.submit(raw)
        before = writer.sent, writer.held  # in the loop: framed, not sent (one send per interval)
        await asyncio.sleep(0.1)
        return before

    assert asyncio.run(serve()) == (0, 5)
    assert (writer.sent, writer.held) == (5, 0)
    got = readframes(conn, 5)
    writer.close()
    assert [fields(e) for _, e in got] == [fields(e) for e in sent]
    assert all(dropped == 0 for dropped, _ in got)


def test_the_tuple_form_keeps_every_field() -> None:
    raw = exchange(7)
    t = time.perf_counter_ns()  # real readings: past what a 32-bit integer holds
    raw.upstream_request = RawRequest(t, "POST", "http://u/v1/caf\u00e9?q=\udcff", [("host", "u")], [b"{}"])
    raw.upstream_response = RawResponse(t + 1, 502, [("x-note", "\u00fcber \U0001f600")], [(t + 2, b"\xff")], False)
    raw.profile, raw.error, raw.end_ns = "vllm", "broke", t + 3
    assert fields(from_tuple(to_tuple(raw))) == fields(raw)
    payload = encode(raw)
    assert payload[:1] != b"\x80"  # marshalled, not pickled
    assert fields(decode(payload)) == fields(raw)


def test_the_tuple_form_keeps_the_wire_forms_and_the_mode() -> None:
    """A client request noted as its read, an upstream request as its head (its method the head's
    first word), an answer as its reads, and a proxy's mode, each come back as they went."""
    raw = exchange(9)
    t = time.perf_counter_ns()
    raw.mode = "proxy"
    raw.client_request = RawRequest(t, "", "", b"PUT /x HTTP/1.1\r\nhost: a\r\n\r\n", wire=True)
    head = b"DELETE /v1/x HTTP/1.1\r\nhost: u\r\n\r\n"
    raw.upstream_request = RawRequest(t + 1, "DELETE", "http://u/v1/x", head, [b""])
    raw.upstream_response = RawResponse(t + 2, 200, (), [(t + 3, b"HTTP/1.1 200 OK\r\n\r\n"), (t + 4, b"")], wire=True)
    back = decode(encode(raw))
    assert fields(back) == fields(raw)
    assert back.upstream_request is not None and back.upstream_request.method == "DELETE"


def plain(t: int) -> RawExchange:
    """A plain exchange as the gateway notes it: the request as its read, the answer as written
    whole, the upstream request as its head and body, its answer as the connection's reads."""
    raw = RawExchange(t, 1.5, "gateway", profile="vllm")
    raw.client_request = RawRequest(t, "", "", b"POST /v1/chat/completions HTTP/1.1\r\n\r\n{}", wire=True)
    raw.client_response = RawResponse(t + 8, 200, (), [(t + 8, b"HTTP/1.1 200 OK\r\n\r\n{}")], True, True)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: u\r\n\r\n"
    raw.upstream_request = RawRequest(t + 1, "POST", "http://u/v1/chat/completions", head, [b"{}"])
    reads = [(t + 5, b"HTTP/1.1 200 OK\r\n\r\n"), (t + 6, b"{}"), (t + 7, b"")]
    raw.upstream_response = RawResponse(t + 1, 200, (), reads, wire=True)
    raw.end_ns = t + 9
    return raw


def test_a_plain_exchange_goes_as_one_flat_tuple_and_comes_back_whole() -> None:
    raw = plain(time.perf_counter_ns())
    assert len(to_tuple(raw)) == 16
    assert fields(from_tuple(to_tuple(raw))) == fields(raw)
    assert fields(decode(encode(raw))) == fields(raw)


def _late_request(raw: RawExchange) -> None:
    assert raw.client_request is not None
    raw.client_request.t_ns += 1


def _two_writes(raw: RawExchange) -> None:
    assert raw.client_response is not None
    raw.client_response.reads.append((raw.end_ns, b"more"))


def _incomplete(raw: RawExchange) -> None:
    assert raw.client_response is not None
    raw.client_response.complete = False


def _answer_pairs(raw: RawExchange) -> None:
    assert raw.client_response is not None
    raw.client_response.headers = [(b"content-type", b"application/json")]


def _late_write(raw: RawExchange) -> None:
    assert raw.client_response is not None
    raw.client_response.reads = [(raw.end_ns, b"{}")]


def _body_in_pieces(raw: RawExchange) -> None:
    assert raw.upstream_request is not None
    raw.upstream_request.body.append(b"!")


def _upstream_pairs(raw: RawExchange) -> None:
    assert raw.upstream_request is not None
    raw.upstream_request.headers = [("host", "u")]


def _ended(raw: RawExchange) -> None:
    assert raw.upstream_response is not None
    raw.upstream_response.complete = True


def _opened_later(raw: RawExchange) -> None:
    assert raw.upstream_response is not None
    raw.upstream_response.t_ns += 1


def _no_upstream(raw: RawExchange) -> None:
    raw.upstream_request = raw.upstream_response = None


def _request_in_pieces(raw: RawExchange) -> None:
    t0 = raw.t0_ns
    raw.client_request = RawRequest(t0, "POST", "/v1/chat/completions", [(b"host", b"a")], [b"{", b"}"])


def _no_request(raw: RawExchange) -> None:
    raw.client_request = None


def _answer_as_messages(raw: RawExchange) -> None:
    assert raw.client_response is not None
    raw.client_response.wire = False


def _no_answer(raw: RawExchange) -> None:
    raw.client_response = None


def _upstream_request_as_read(raw: RawExchange) -> None:
    """(As a read, a request's method, target and body are in its bytes, and its fields empty.)"""
    sent = raw.upstream_request
    assert sent is not None and isinstance(sent.headers, bytes)
    raw.upstream_request = RawRequest(sent.t_ns, "", "", sent.headers + b"".join(sent.body), wire=True)


def _upstream_answer_in_pieces(raw: RawExchange) -> None:
    assert raw.upstream_response is not None
    raw.upstream_response.wire = False


def _upstream_answer_pairs(raw: RawExchange) -> None:
    assert raw.upstream_response is not None
    raw.upstream_response.headers = [("content-type", "application/json")]


@pytest.mark.parametrize(
    "change",
    [
        _late_request, _request_in_pieces, _no_request, _two_writes, _incomplete, _answer_pairs, _late_write,
        _answer_as_messages, _no_answer, _body_in_pieces, _upstream_pairs, _upstream_request_as_read, _ended,
        _opened_later, _upstream_answer_in_pieces, _upstream_answer_pairs, _no_upstream,
    ],
)  # fmt: skip
def test_an_exchange_of_another_shape_goes_nested_and_comes_back_whole(change: Any) -> None:
    """Each thing the flat tuple leaves out as implied, made untrue: the nested form carries it."""
    raw = plain(time.perf_counter_ns())
    change(raw)
    assert len(to_tuple(raw)) == 10
    assert fields(from_tuple(to_tuple(raw))) == fields(raw)
    assert fields(decode(encode(raw))) == fields(raw)


class Name(str):
    """A header name of a type marshal refuses (a str subclass)."""


def test_an_exchange_marshal_refuses_goes_pickled_and_comes_back_whole() -> None:
    raw = exchange(3)
    raw.upstream_request = RawRequest(5, "POST", "http://u/v1/chat/completions", [(Name("x-tag"), "a")], [b"{}"])
    payload = encode(raw)
    assert payload[:1] == b"\x80"
    back = decode(payload)
    assert fields(back) == fields(raw)
    assert back.upstream_request is not None and back.upstream_request.headers == [("x-tag", "a")]


def test_a_full_queue_drops_counts_logs_and_tells_the_capture_process(
    tmp_path: Path, capture_socket: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=2, interval=0.05).start()
    conn, _ = capture_socket.accept()
    metrics = Metrics(StreamCount(), writer)

    async def serve() -> list[bool]:
        results = [writer.submit(exchange(i)) for i in range(5)]  # all before the first send
        await asyncio.sleep(0.2)
        return results

    with caplog.at_level(logging.WARNING, "oaishim.capture"):
        results = asyncio.run(serve())
    assert results == [True, True, False, False, False]
    assert writer.dropped == 3
    assert b"oaishim_capture_dropped_total 3.0" in metrics.render()
    assert [r.message for r in caplog.records] == [
        "capture queue full: 1 exchange(s) dropped so far",
        "capture queue full: 2 exchange(s) dropped so far",
    ]  # 1, 2, 4, …: not one line per request
    got = readframes(conn, 3)  # the two exchanges (framed before the drops), then the count alone
    writer.close()
    assert [e and fields(e) for _, e in got] == [fields(exchange(0)), fields(exchange(1)), None]
    assert [dropped for dropped, _ in got] == [0, 0, 3]


def test_the_queue_is_bounded_in_bytes_too_and_a_lone_frame_of_any_size_is_taken(
    tmp_path: Path, capture_socket: socket.socket
) -> None:
    """Long streams' frames: the bytes held bound the queue before the count does; a frame larger
    than the bound is still taken when nothing waits (else such an exchange could never be
    captured), and what was held goes out whole, in order, with the count of what was not."""
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=100, queue_bytes=250_000, interval=0.05).start()
    conn, _ = capture_socket.accept()
    big = [exchange(0, 400_000), exchange(1, 100_000), exchange(2, 100_000), exchange(3, 100_000)]

    async def serve() -> tuple[list[bool], int]:
        first = writer.submit(big[0])  # alone, over the bound: taken
        held = writer.held_bytes
        await asyncio.sleep(0.2)  # handed to the reader's side: nothing held
        results = [first, *(writer.submit(raw) for raw in big[1:])]  # 100 kB each against 250 kB
        await asyncio.sleep(0.2)
        return results, held

    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, 4)))
    reader.start()
    results, held = asyncio.run(serve())
    reader.join(10)
    writer.close()
    assert held > 400_000
    assert results == [True, True, True, False]
    assert writer.dropped == 1 and writer.held == writer.held_bytes == 0
    assert [e and fields(e) for _, e in got] == [fields(big[0]), fields(big[1]), fields(big[2]), None]
    assert [dropped for dropped, _ in got] == [0, 0, 0, 1]


def test_a_kernel_buffer_that_takes_part_of_a_write_loses_nothing(
    tmp_path: Path, capture_socket: socket.socket
) -> None:
    """The capture process behind: the socket takes part of a frame; the rest waits in the worker and
    goes out as the reader makes room, in order, while the event loop is never blocked."""
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.005, send_buffer=262_144).start()
    conn, _ = capture_socket.accept()
    sent = [exchange(i, 200_000) for i in range(40)]  # 8 MB: many times the socket's buffer
    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, len(sent))))

    async def serve() -> int:
        for raw in sent:
            assert writer.submit(raw)
        await asyncio.sleep(0.05)  # several ticks with nobody reading: the socket's buffer is full
        waiting = writer.held
        reader.start()
        await sent_all(writer)
        return waiting

    waiting = asyncio.run(serve())
    reader.join(10)
    writer.close()
    assert 0 < waiting < len(sent)  # part went out at once, the rest waited for the reader
    assert (writer.sent, writer.dropped) == (len(sent), 0)
    assert [fields(e) for _, e in got] == [fields(e) for e in sent]


@pytest.mark.parametrize("send_buffer", [16_384, 4 << 20])
def test_frames_cross_as_fast_as_they_are_read_not_one_socket_buffer_a_tick(
    tmp_path: Path, capture_socket: socket.socket, send_buffer: int
) -> None:
    """A worker framing more a tick than the socket's buffer holds, with the capture process reading
    all the while: what a tick's send leaves goes as the reader makes room, so nothing waits long
    enough to fill the queue. Sent once a tick only (and the kernel's default buffer), 3,000
    exchanges offered in about 0.15 s overflowed a queue of 1,024. The frames are not held (``hold_age``
    0), as those of a worker past its hold bound are not (``test_capture_hold``)."""
    writer = RemoteWriter(
        tmp_path / "capture.sock", queue_size=1024, interval=0.02, send_buffer=send_buffer, hold_age=0
    )
    writer.start()
    conn, _ = capture_socket.accept()
    sent = [exchange(i, 4000) for i in range(3000)]  # 12 MB, ~4 KB each: a plain exchange's size
    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, len(sent))))
    reader.start()
    most: list[int] = []

    async def serve() -> None:
        for k in range(0, len(sent), 100):  # 100 every 5 ms: 20,000 a second
            for raw in sent[k : k + 100]:
                assert writer.submit(raw), f"dropped at {k} with {writer.held} held"
            most.append(writer.held)
            await asyncio.sleep(0.005)
        await sent_all(writer, step=0.005)

    asyncio.run(serve())
    reader.join(10)
    writer.close()
    assert (writer.sent, writer.dropped, writer.held) == (len(sent), 0, 0)
    assert [fields(e) for _, e in got] == [fields(e) for e in sent]
    assert max(most) < 1024


def test_a_backlog_of_thousands_of_frames_goes_out_whole_and_in_order(
    tmp_path: Path, capture_socket: socket.socket
) -> None:
    """Thousands of small frames behind a slow reader: each send takes what the socket's buffer
    holds (often ending inside a frame's head or payload); the frames sent are let go while the rest
    still wait (what a worker holds stays bounded by what is unsent), and every exchange arrives
    whole, in order."""
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=10_000, interval=0.002).start()
    conn, _ = capture_socket.accept()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sent = [exchange(i, 1500 + i % 700) for i in range(3000)]
    got: list[tuple[int, RawExchange | None]] = []
    held: list[int] = []

    def read_slowly() -> None:
        buffer = bytearray()
        conn.settimeout(10)
        while len(got) < len(sent):
            data = conn.recv(7_001)  # an odd size: reads end anywhere in a frame
            assert data, "the sender closed early"
            buffer += data
            got.extend((dropped, decode(payload)) for dropped, payload in frames(buffer))
            time.sleep(0.0002)

    reader = threading.Thread(target=read_slowly)

    async def serve() -> None:
        for raw in sent:
            assert writer.submit(raw)
        reader.start()
        deadline = time.monotonic() + 30
        while writer.held and time.monotonic() < deadline:
            held.append(len(writer._buffers) - writer._first)  # the buffers still to send
            assert len(writer._buffers) <= held[-1] + 4 * 256 + 2  # the sent ones let go past a bound
            await asyncio.sleep(0.005)

    asyncio.run(serve())
    reader.join(30)
    writer.close()
    assert (writer.sent, writer.dropped, writer.held) == (len(sent), 0, 0)
    assert len(got) == len(sent) and all(dropped == 0 for dropped, _ in got)
    assert [fields(e) for _, e in got] == [fields(e) for e in sent]
    assert held[0] > 1000 and (writer._buffers, writer._first) == ([], 0)  # a backlog, then nothing held


def test_close_sends_what_is_still_held(tmp_path: Path, capture_socket: socket.socket) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=60).start()
    conn, _ = capture_socket.accept()

    async def serve() -> None:
        for i in range(3):
            writer.submit(exchange(i))
        writer.close()  # at shutdown, long before the timer

    asyncio.run(serve())
    assert [e and fields(e) for _, e in readframes(conn, 3)] == [fields(exchange(i)) for i in range(3)]


def test_a_capture_process_gone_counts_what_it_did_not_get(
    tmp_path: Path, capture_socket: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.005).start()
    conn, _ = capture_socket.accept()
    conn.close()
    capture_socket.close()
    (tmp_path / "capture.sock").unlink()
    with caplog.at_level(logging.WARNING, "oaishim.capture"):
        deadline = time.monotonic() + 5
        while writer.dropped == 0:  # outside a loop each submit sends; the first may still be accepted
            writer.submit(exchange(0))
            time.sleep(0.02)
            assert time.monotonic() < deadline
    writer.close()
    assert writer.dropped >= 1
    assert any("capture process unreachable" in r.message for r in caplog.records)
