"""An upstream answer recorded as its network reads (``server.capture_wire``), read back: the final head's
status and headers, each body piece at the time of the read that carried it, complete only when
the client noted the end, the head at the time of the read that completed it; the same at every
split of the bytes into reads."""

from __future__ import annotations

import pytest

from oaishim.capture.raw import RawResponse
from oaishim.server.capture_wire import read_wire

SIZED = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"a": true}'
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n3\r\n x\n\r\n0\r\n\r\n"
INTERIM = b"HTTP/1.1 100 Continue\r\nx-interim: 1\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok"
CASES = [
    (SIZED, 200, [(b"content-type", b"application/json"), (b"content-length", b"11")], b'{"a": true}'),
    (CHUNKED, 200, [(b"Transfer-Encoding", b"chunked")], b"data: x\n"),
    (INTERIM, 201, [(b"content-length", b"2")], b"ok"),
]


def _wire(*reads: bytes, ended: bool = True) -> RawResponse:
    timed = [(10 * (i + 1), piece) for i, piece in enumerate(reads)]
    return RawResponse(5, 0, (), [*timed, (99, b"")] if ended else timed, wire=True)


@pytest.mark.parametrize(("answer", "status", "headers", "body"), CASES)
def test_every_split_into_two_and_three_reads_reads_back_alike(
    answer: bytes, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    splits = [(answer[:i], answer[i:]) for i in range(1, len(answer))]
    splits += [
        (answer[:i], answer[i:j], answer[j:]) for i in range(1, len(answer), 5) for j in range(i + 1, len(answer))
    ]
    for reads in [(answer,), *splits]:
        read = read_wire(_wire(*reads))
        assert read is not None and not read.wire
        # the head's time is that of the read holding its last byte (the final head's, past an interim)
        head_end, ends = answer.index(b"\r\n\r\n", answer.rindex(b"HTTP/1.1 ")) + 4, 0
        for i, piece in enumerate(reads):
            ends += len(piece)
            if ends >= head_end:
                head_t = 10 * (i + 1)
                break
        assert (read.t_ns, read.status, read.headers, read.complete) == (head_t, status, headers, True), reads
        assert b"".join(piece for _, piece in read.reads) == body, reads
        # each piece carries the time of the read it came in: a read holding only head bytes has none
        times = {10 * (i + 1) for i, piece in enumerate(reads) if piece}
        assert {t for t, _ in read.reads} <= times and all(piece for _, piece in read.reads)


def test_without_the_end_noted_an_answer_is_not_complete_and_what_came_is_kept() -> None:
    read = read_wire(_wire(SIZED[:-4], ended=False))
    assert read is not None and (read.status, read.complete) == (200, False)
    assert b"".join(piece for _, piece in read.reads) == b'{"a": t'
    read = read_wire(_wire(SIZED[:20], ended=False))  # not even the head: the status and time noted
    assert read is not None and (read.t_ns, read.status, read.headers, read.reads, read.complete) == (
        5,
        0,
        [],
        [],
        False,
    )


def test_a_read_the_parser_refuses_ends_the_reading() -> None:
    first = CHUNKED[: CHUNKED.index(b"data:\r\n") + 7]  # the head and the first chunk
    read = read_wire(_wire(first, b"zz\r\nnot a chunk\r\n", b"3\r\nabc\r\n"))
    assert read is not None and read.status == 200 and not read.complete
    assert b"".join(piece for _, piece in read.reads) == b"data:"


def test_the_answer_to_head_is_its_head_whatever_length_it_declares() -> None:
    head = SIZED[: SIZED.index(b"\r\n\r\n") + 4]
    read = read_wire(_wire(head), head_only=True)
    assert read is not None and (read.status, read.reads, read.complete) == (200, [], True)
    read = read_wire(_wire(head))  # not told: the declared body never came
    assert read is not None and (read.status, read.complete) == (200, True) and read.reads == []


def test_a_response_not_recorded_as_reads_is_returned_as_it_is() -> None:
    response = RawResponse(1, 200, [(b"a", b"b")], [(2, b"x")], True)
    assert read_wire(response) is response and read_wire(None) is None
