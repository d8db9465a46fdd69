"""Under capture the HTTP server notes the one read that carried a whole request (``server.http``,
``READ`` in its scope), which the recorder keeps as the request instead of the scope's head and the
body's messages; ``server.capture_wire.read_request`` reads it back, off the request path, as the
server read it. Only a read that holds exactly one request, from its first byte to its last, is
noted: a request in pieces, or two in one read (pipelined), are recorded as before."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from oaishim.capture.raw import RawExchange, RawRequest, from_tuple, to_tuple
from oaishim.server.capture_wire import read_request
from oaishim.server.exchange import READ
from oaishim.server.http import HttpLimits, ServerState, protocol_factory

HEAD = (
    b"POST /v1/chat/completions?x=1&y=%41 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nX-Mixed-Case: V\r\n"
)
SIZED = HEAD + b'Content-Length: 11\r\n\r\n{"a": "b"}\n'
CHUNKED = HEAD + b'Transfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n7\r\n: "b"}\n\r\n0\r\n\r\n'
GET = b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"


class Seen:
    """Each request as the app got it: its scope's read (or None), method, target, headers, body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message["body"]
            more = message["more_body"]
        query = scope["query_string"]
        self.requests.append(
            {
                "read": scope.get(READ),
                "method": scope["method"],
                "target": (scope["raw_path"] + (b"?" + query if query else b"")).decode("latin-1"),
                "headers": list(scope["headers"]),
                "body": body,
            }
        )
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def feed(reads: list[bytes], *, note: bool = True, answers: int | None = None) -> list[dict[str, Any]]:
    """The requests the app saw when the connection was given ``reads``, one ``data_received`` each,
    every answer awaited before the next read (a pipelined read waits for all of its own)."""

    async def run() -> list[dict[str, Any]]:
        app = Seen()
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            theirs.setblocking(False)
            state = ServerState(app, HttpLimits())
            state.note_reads = note
            _, conn = await loop.connect_accepted_socket(protocol_factory(state, loop), ours)
            for data in reads:
                conn.data_received(data)
                for _ in range(500):
                    await asyncio.sleep(0.001)
                    if conn.answering is None and not conn.queue:
                        break
            for _ in range(500):
                if len(app.requests) >= (answers if answers is not None else 0):
                    break
                await asyncio.sleep(0.001)
            conn.transport.close()
        return app.requests

    return asyncio.run(run())


def parsed(request: dict[str, Any]) -> dict[str, Any]:
    return {k: request[k] for k in ("method", "target", "headers", "body")}


def read_back(read: tuple[int, bytes]) -> dict[str, Any]:
    """A noted read as a record gets it: through the capture process's frame form, then read back."""
    t_ns, data = read
    raw = from_tuple(to_tuple_of(RawRequest(t_ns, "", "", data, wire=True)))
    assert raw.client_request is not None and raw.client_request.wire
    request = read_request(raw.client_request)
    assert request is not None and not request.wire and request.t_ns == t_ns
    return as_seen(request)


def as_seen(request: RawRequest) -> dict[str, Any]:
    """A request read back, in the form of :func:`parsed` (its body's pieces joined)."""
    return {
        "method": request.method,
        "target": request.target,
        "headers": request.headers,
        "body": b"".join(request.body),
    }


def to_tuple_of(request: RawRequest) -> tuple[Any, ...]:
    exchange = RawExchange(1, 0.0, "gateway")
    exchange.client_request = request
    return to_tuple(exchange)


@pytest.mark.parametrize("request_bytes", [SIZED, CHUNKED, GET], ids=["sized", "chunked", "no-body"])
def test_a_request_whole_in_one_read_is_noted_and_reads_back_as_the_app_got_it(request_bytes: bytes) -> None:
    before = time.perf_counter_ns()
    (seen,) = feed([request_bytes], answers=1)
    assert seen["read"] is not None
    t_ns, data = seen["read"]
    assert data == request_bytes and before <= t_ns <= time.perf_counter_ns()
    assert read_back(seen["read"]) == parsed(seen)
    assert ("x-mixed-case", "V") in [(k.decode(), v.decode()) for k, v in seen["headers"]] or request_bytes is GET


@pytest.mark.parametrize("request_bytes", [SIZED, CHUNKED], ids=["sized", "chunked"])
def test_a_request_in_two_reads_is_not_noted_wherever_it_is_cut(request_bytes: bytes) -> None:
    for cut in range(1, len(request_bytes)):
        (seen,) = feed([request_bytes[:cut], request_bytes[cut:]], answers=1)
        assert seen["read"] is None, cut
        assert seen["body"] == b'{"a": "b"}\n'


def test_each_request_of_a_kept_alive_connection_in_its_own_read_is_noted() -> None:
    seen = feed([SIZED, GET, CHUNKED], answers=3)
    assert [s["read"][1] if s["read"] else None for s in seen] == [SIZED, GET, CHUNKED]
    assert [read_back(s["read"]) for s in seen] == [parsed(s) for s in seen]


def test_pipelined_requests_in_one_read_are_not_noted() -> None:
    seen = feed([SIZED + GET], answers=2)
    assert [s["read"] for s in seen] == [None, None]
    assert [s["method"] for s in seen] == ["POST", "GET"]


def test_a_read_holding_a_request_and_the_start_of_the_next_notes_neither() -> None:
    for cut in (1, 10, len(GET) - 1):
        seen = feed([SIZED + GET[:cut], GET[cut:]], answers=2)
        assert [s["read"] for s in seen] == [None, None], cut


def test_a_read_that_ends_a_request_begun_before_it_is_not_noted_nor_is_the_next() -> None:
    seen = feed([SIZED[:30], SIZED[30:] + GET], answers=2)
    assert [s["read"] for s in seen] == [None, None]


def test_nothing_is_noted_unless_the_app_records() -> None:
    (seen,) = feed([SIZED], note=False, answers=1)
    assert seen["read"] is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (  # an absolute-form target: the server's path and query, as the app got them
            b"GET http://example.test/v1/models?a=b HTTP/1.1\r\nHost: example.test\r\n\r\n",
            {"method": "GET", "target": "/v1/models?a=b", "headers": [(b"host", b"example.test")], "body": b""},
        ),
        (  # a percent-encoded path stays as it came
            b"GET /v1/%6Dodels HTTP/1.1\r\nHOST: a\r\n\r\n",
            {"method": "GET", "target": "/v1/%6Dodels", "headers": [(b"host", b"a")], "body": b""},
        ),
        (  # bytes the parser refuses: what came before them is kept
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\nzz\r\n",
            {"method": "POST", "target": "/x", "headers": [(b"transfer-encoding", b"chunked")], "body": b"ab"},
        ),
    ],
    ids=["absolute-form", "percent-encoded", "refused"],
)
def test_a_read_reads_back_as_the_server_reads_it(data: bytes, expected: dict[str, Any]) -> None:
    request = read_request(RawRequest(7, "", "", data, wire=True))
    assert request is not None
    assert as_seen(request) == expected


def test_a_request_that_is_not_a_read_passes_through() -> None:
    request = RawRequest(7, "POST", "/x", [(b"a", b"1")], [b"{}"])
    assert read_request(request) is request
    assert read_request(None) is None
