"""A plain exchange's frame (``server.capture_frame``): made from the recorder's fields, read back
by the capture process as the exchange a recorder of parts would have made, whatever the reads
that carry it; and the worker's writer sending such frames among the others, bounded and counted
as they are."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
from _capture_link import fields, readframes, sent_all
from librt.strings import BytesWriter

from oaishim.capture.raw import PlainExchange, RawExchange, RawRequest
from oaishim.server import capture_frame
from oaishim.server.capture_feed import RemoteWriter
from oaishim.server.capture_frame import FRAME, PLAIN, decode, encode, frames, plain_frame


def plain(t: int, size: int = 0) -> PlainExchange:
    """A plain exchange as the gateway's recorder notes it (``size``: bytes added to the answer)."""
    p = PlainExchange(t, 1796647670.25, "gateway", b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
    p.answer_ns, p.status = t + 8, 200
    p.written = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n{}" % (2 + size) + b" " * size
    p.sent_ns, p.method, p.url = t + 1, "POST", "http://127.0.0.1:8000/v1/chat/completions"
    p.head, p.body = b"POST /v1/chat/completions HTTP/1.1\r\nhost: u\r\n\r\n", b"{}"
    p.up_status, p.reads = 200, [(t + 5, b"HTTP/1.1 200 OK\r\n\r\n"), (t + 6, b"{}"), (t + 7, b"")]
    p.end_ns, p.profile = t + 9, "vllm"
    return p


def whole(p: PlainExchange, dropped: int = 0) -> bytes:
    data = plain_frame(p, dropped)
    size, count = FRAME.unpack_from(data)
    assert (size, count) == (len(data) - FRAME.size, dropped)
    return data


def _no_upstream(p: PlainExchange) -> None:
    p.sent_ns, p.method, p.url, p.head, p.body, p.up_status, p.reads = 0, "", "", b"", b"", 0, None


def _no_answer(p: PlainExchange) -> None:
    p.answer_ns, p.status, p.written, p.error = 0, 0, b"", "no response was sent: the client went away first"


def _no_reads_yet(p: PlainExchange) -> None:
    p.reads = []


def _text_of_every_kind(p: PlainExchange) -> None:
    p.profile, p.error = None, "broke: \u00fcber \U0001f600 \udcff"
    p.url = "http://u/v1/caf\u00e9?q=\udcff"


def _proxy(p: PlainExchange) -> None:
    p.mode = "proxy"


def _empty_body(p: PlainExchange) -> None:
    p.method, p.head, p.body = "GET", b"GET /v1/models HTTP/1.1\r\n\r\n", b""


CHANGES = [None, _no_upstream, _no_answer, _no_reads_yet, _text_of_every_kind, _proxy, _empty_body]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: "as is" if c is None else c.__name__.strip("_"))
def test_a_plain_frame_comes_back_as_the_exchange_its_fields_are(change: object) -> None:
    p = plain(time.perf_counter_ns())  # real readings: past what a 32-bit integer holds
    if callable(change):
        change(p)
    buffer = bytearray(whole(p, dropped=3))
    ((dropped, payload),) = frames(buffer)
    assert dropped == 3 and not buffer
    assert fields(decode(payload)) == fields(p.exchange())


def test_the_fields_as_parts_are_what_a_recorder_of_parts_made() -> None:
    """``PlainExchange.exchange``: the parts the recorder made before it kept fields, the wire forms
    (the request as its read, the answer as written, the upstream answer as its reads) kept."""
    t = time.perf_counter_ns()
    p = plain(t)
    x = p.exchange()
    cq, cr, uq, ur = x.client_request, x.client_response, x.upstream_request, x.upstream_response
    assert cq is not None and (cq.t_ns, cq.headers, cq.wire) == (t, p.read, True)
    assert cr is not None and (cr.t_ns, cr.status, cr.reads, cr.complete, cr.wire) == (
        t + 8,
        200,
        [(t + 8, p.written)],
        True,
        True,
    )
    assert uq is not None and (uq.t_ns, uq.method, uq.target, uq.headers, uq.body) == (
        t + 1,
        "POST",
        p.url,
        p.head,
        [b"{}"],
    )
    assert ur is not None and (ur.t_ns, ur.status, ur.reads, ur.complete, ur.wire) == (t + 1, 200, p.reads, False, True)
    assert (x.profile, x.end_ns, x.error, x.mode, x.started) == ("vllm", t + 9, None, "gateway", p.started)


def test_a_run_of_frames_read_in_pieces_of_any_size_comes_back_whole_and_in_order() -> None:
    """Every split point: the capture process reads what the socket holds, a frame cut anywhere."""
    t = time.perf_counter_ns()
    exchanges: list[object] = [plain(t), plain(t + 100, size=300), plain(t + 200)]
    _no_upstream(exchanges[2])  # type: ignore[arg-type]
    nested = RawExchange(t + 300, 1.0, "gateway", RawRequest(t + 300, "GET", "/health", [(b"host", b"x")]))
    stream = b"".join(whole(e) for e in exchanges)  # type: ignore[arg-type]
    payload = encode(nested)
    stream += FRAME.pack(len(payload), 0) + payload  # an exchange of another shape among them
    want = [fields(e.exchange()) for e in exchanges] + [fields(nested)]  # type: ignore[attr-defined]
    for cut in range(1, len(stream)):
        buffer = bytearray()
        got = []
        for piece in (stream[:cut], stream[cut:]):
            buffer += piece
            got += [fields(decode(payload)) for _, payload in frames(buffer)]
        assert got == want, cut
        assert not buffer


def test_frames_written_one_after_another_into_one_writer_are_each_whole_and_stay_as_made() -> None:
    """The worker's writer keeps one ``BytesWriter`` for every plain frame: each frame is its own
    exchange whether the one before was longer or shorter, and a frame handed out is not changed
    by the next one written."""
    t = time.perf_counter_ns()
    out = BytesWriter()
    exchanges = [plain(t, size=9_000), plain(t + 100), plain(t + 200, size=40_000), plain(t + 300, size=3)]
    _text_of_every_kind(exchanges[1])
    made = [plain_frame(p, dropped, out) for dropped, p in enumerate(exchanges)]
    assert made == [whole(p, dropped) for dropped, p in enumerate(exchanges)]
    buffer = bytearray(b"".join(made))
    assert [(n, fields(decode(payload))) for n, payload in frames(buffer)] == [
        (n, fields(p.exchange())) for n, p in enumerate(exchanges)
    ]


@pytest.mark.patches_internals
def test_a_plain_exchange_too_large_for_its_frame_goes_as_parts(
    tmp_path: Path, capture_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain payload's lengths are 32-bit: one past the bound (2 GiB, lowered here to 1 KB, as
    a 2 GiB exchange is more memory than a test should take) is framed as parts, and arrives as
    the same exchange, between the plain ones around it."""
    monkeypatch.setattr(capture_frame, "MAX_PLAIN", 1_000)
    t = time.perf_counter_ns()
    small, large = plain(t), plain(t + 100, size=2_000)
    small.written = small.written[:40]  # under the lowered bound
    with pytest.raises(ValueError, match="framed as parts"):
        plain_frame(large, 0)
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.01).start()
    conn, _ = capture_socket.accept()

    async def serve() -> list[bool]:
        results = [writer.submit_plain(p) for p in (small, large, small)]
        await asyncio.sleep(0.1)
        return results

    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, 3)))
    reader.start()
    assert asyncio.run(serve()) == [True, True, True]
    reader.join(10)
    writer.close()
    assert [e and fields(e) for _, e in got] == [fields(p.exchange()) for p in (small, large, small)]
    assert (writer.sent, writer.dropped) == (3, 0)


def test_a_plain_frame_whose_lengths_do_not_add_up_is_refused() -> None:
    data = whole(plain(time.perf_counter_ns()))
    ((_, payload),) = frames(bytearray(data))
    with pytest.raises(ValueError, match="do not add up"):
        decode(payload + b"x")
    with pytest.raises(ValueError):
        decode(payload[: PLAIN.size + 3])


def test_plain_frames_cross_among_the_others_in_order_with_a_socket_that_takes_part_of_each_send(
    tmp_path: Path, capture_socket: socket.socket
) -> None:
    """A socket buffer far smaller than what is held takes part of a frame at a time, plain or
    not, and what arrives is every exchange, whole and in order."""
    writer = RemoteWriter(tmp_path / "capture.sock", interval=0.005, send_buffer=16_384).start()
    conn, _ = capture_socket.accept()
    t = time.perf_counter_ns()
    sent: list[PlainExchange | RawExchange] = []
    for i in range(300):
        sent.append(plain(t + 100 * i, size=i * 37 % 5000))
        if i % 50 == 7:
            sent.append(RawExchange(t + 100 * i + 1, 1.0, "gateway", RawRequest(t, "GET", "/x", [(b"a", b"b")])))
    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, len(sent))))
    reader.start()

    async def serve() -> None:
        for e in sent:
            assert writer.submit_plain(e) if isinstance(e, PlainExchange) else writer.submit(e)
        await sent_all(writer)

    asyncio.run(serve())
    reader.join(10)
    writer.close()
    assert (writer.sent, writer.dropped, writer.held, writer.held_bytes) == (len(sent), 0, 0, 0)
    want = [fields(e.exchange() if isinstance(e, PlainExchange) else e) for e in sent]
    assert [e and fields(e) for _, e in got] == want


@pytest.mark.parametrize(
    ("bound", "queue_size", "queue_bytes", "taken"), [("count", 3, 1 << 20, 3), ("bytes", 100, 12_000, 2)]
)
def test_plain_frames_are_bounded_and_counted_as_the_others_are(
    tmp_path: Path, capture_socket: socket.socket, bound: str, queue_size: int, queue_bytes: int, taken: int
) -> None:
    """The queue's count and bytes bound a plain exchange's frame too: one past them is dropped,
    counted and told to the capture process; a lone one over the bytes bound is still taken."""
    writer = RemoteWriter(tmp_path / "capture.sock", queue_size=queue_size, queue_bytes=queue_bytes, interval=0.05)
    writer.start()
    conn, _ = capture_socket.accept()
    t = time.perf_counter_ns()
    big = plain(t, size=30_000)
    small = [plain(t + 100 * i, size=4_000) for i in range(1, 6)]  # about 4.6 kB a frame

    async def serve() -> list[bool]:
        results = [writer.submit_plain(big)]  # alone: taken, whatever the bound
        await asyncio.sleep(0.2)
        results += [writer.submit_plain(p) for p in small]
        await asyncio.sleep(0.2)
        return results

    got: list[tuple[int, RawExchange | None]] = []
    reader = threading.Thread(target=lambda: got.extend(readframes(conn, taken + 2)))
    reader.start()
    results = asyncio.run(serve())
    reader.join(10)
    writer.close()
    dropped = len(small) - taken
    assert results == [True] + [True] * taken + [False] * dropped, bound
    assert writer.dropped == dropped and writer.held == writer.held_bytes == 0
    assert [e and fields(e) for _, e in got] == [fields(p.exchange()) for p in [big, *small[:taken]]] + [None]
    assert [n for n, _ in got] == [0] * (taken + 1) + [dropped]
