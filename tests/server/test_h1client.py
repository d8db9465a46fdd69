"""The upstream client's HTTP framing against a raw socket server (this is about bytes on a socket):
an answer to HEAD ends with its head, whatever length it declares, and the next request is not
read as its body."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from oaishim.capture.raw import RawResponse
from oaishim.server import relay
from oaishim.server.capture_wire import read_wire
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.h1client import Origin, Pool
from oaishim.server.upstream import Upstreams
from oaishim.wire.errors import OpenAIError

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n"
GET_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def _next_request(reader: asyncio.StreamReader) -> bytes:
    """The next request's line, its headers read past (b"" once the client has closed)."""
    line = await reader.readline()
    if line:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
    return line


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request by its method, on one kept-alive connection (no body is ever sent)."""
    try:
        while line := await _next_request(reader):
            writer.write(HEAD_ANSWER if line.startswith(b"HEAD ") else GET_ANSWER)
            await writer.drain()
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def _upstreams(serve: Serve, **settings: Any) -> AsyncIterator[tuple[Upstreams, ModelRoute]]:
    """The gateway's upstream client in front of ``serve`` (a raw socket server on a free port)."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    route = ModelRoute("m", (f"http://127.0.0.1:{port}",), profile="vllm@0.32")
    upstreams = Upstreams(Settings(models=(route,), **settings))
    await upstreams.start()
    try:
        yield upstreams, route
    finally:
        await upstreams.close()
        server.close()


async def _exchange() -> tuple[int, bytes, int, bytes]:
    async with _upstreams(_serve, idle_timeout=1.0) as (upstreams, route):
        head = await upstreams.open(route, "HEAD", "/version", None, None)
        head_body = await asyncio.wait_for(relay.read_all(head), 5)
        head.close()
        got = await upstreams.open(route, "GET", "/version", None, None)
        body = await asyncio.wait_for(relay.read_all(got), 5)
        got.close()
        return head.status, head_body, got.status, body


def test_an_answer_to_head_ends_with_its_head() -> None:
    assert asyncio.run(_exchange()) == (200, b"", 200, b"{}")


def test_a_pooled_connections_late_head_is_504_at_first_byte_and_the_connection_is_not_reused() -> None:
    """The wait for the head on a kept-alive connection is a timer on the head's future
    (``Connection.head_within``), not ``asyncio.timeout``: it must fire at first_byte_timeout with
    its message, and the connection it fired on (whose late answer may still come) is closed, so
    the next request neither reuses it nor reads that answer as its own."""

    async def scenario() -> tuple[int, list[object], float, int, bytes, int]:
        connections: list[asyncio.StreamWriter] = []
        answered = 0

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal answered
            connections.append(writer)
            try:
                while await _next_request(reader):
                    answered += 1
                    if answered == 2:
                        await asyncio.sleep(1.5)  # the second request's head comes late
                    writer.write(
                        b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 3\r\n\r\n"'
                        + str(answered).encode()
                        + b'"'
                    )
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        async with _upstreams(serve, first_byte_timeout=0.3) as (upstreams, route):
            first = await upstreams.open(route, "GET", "/v1/models", None, None)
            await asyncio.wait_for(relay.read_all(first), 5)
            first.close()
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                await upstreams.open(route, "GET", "/v1/models", None, None)
            except OpenAIError as err:
                failure: list[object] = [err.status, err.code, err.message]
            took = loop.time() - started
            used_by_second = len(connections)
            third = await upstreams.open(route, "GET", "/v1/models", None, None)
            body = await asyncio.wait_for(relay.read_all(third), 5)
            third.close()
            return used_by_second, failure, took, third.status, body, len(connections)

    used_by_second, failure, took, status, body, connections = asyncio.run(scenario())
    assert used_by_second == 1  # the second request went out on the first one's connection
    assert failure[:2] == [504, "upstream_timeout"] and "0.3 s (first_byte_timeout)" in str(failure[2])
    assert 0.25 < took < 1.0
    assert (status, body, connections) == (200, b'"3"', 2)  # a new connection, and its own answer


BODY = b'{"id":"x","object":"chat.completion","choices":[]}'
CONNECTIONS: list[asyncio.StreamWriter] = []


async def _cut_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Each connection is noted in CONNECTIONS. Answers ``GET /cut/N`` with BODY (content-length framed) in two writes, the first N bytes
    then the rest after a pause; ``GET /broken/N`` writes N bytes and closes; ``GET /chunked/N``
    the same two parts as chunks."""
    CONNECTIONS.append(writer)
    try:
        while line := await _next_request(reader):
            kind, cut = line.split()[1].decode().split("/")[1:]
            n = int(cut)
            if kind == "chunked":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                parts = [p for p in (BODY[:n], BODY[n:]) if p]
                for i, part in enumerate(parts):
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part) + (b"0\r\n\r\n" if i == len(parts) - 1 else b""))
                    await writer.drain()
                    await asyncio.sleep(0.01)
                continue
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY))
            writer.write(BODY[:n])
            await writer.drain()
            if kind == "broken":
                break
            await asyncio.sleep(0.01)
            writer.write(BODY[n:])
            await writer.drain()
    finally:
        writer.close()


def test_a_body_read_whole_is_the_body_at_every_split_and_each_read_is_handed_on() -> None:
    """``read`` (the plain answer's whole-body read, no iterator) returns the body whatever the
    split of the backend's writes, over content-length and chunked framing, on one kept-alive
    connection; ``each`` sees the reads in order, and they join to the body."""

    async def scenario() -> list[tuple[str, int, bytes, list[bytes]]]:
        out = []
        CONNECTIONS.clear()
        async with _upstreams(_cut_serve, idle_timeout=2.0) as (upstreams, route):
            for kind in ("cut", "chunked"):
                for n in range(len(BODY) + 1):
                    response = await upstreams.open(route, "GET", f"/{kind}/{n}", None, None)
                    reads: list[bytes] = []
                    body = await asyncio.wait_for(response.read(1 << 20, reads.append), 5)  # type: ignore[call-arg]
                    response.close()
                    assert body is not None
                    out.append((kind, n, body, reads))
        return out

    results = asyncio.run(scenario())
    assert len(results) == 2 * (len(BODY) + 1)
    for kind, n, body, reads in results:
        assert body == BODY, (kind, n)
        assert b"".join(reads) == BODY, (kind, n)
        if 0 < n < len(BODY):  # two writes a pause apart: two reads
            assert len(reads) == 2, (kind, n, reads)
    assert len(CONNECTIONS) == 1  # each body read to its end: the connection went back to the pool


def test_a_body_past_the_limit_is_refused_and_a_body_cut_off_is_the_upstreams_fault() -> None:
    """Past the limit, ``read`` gives None and ``relay.read_all`` the official error, whichever
    read crosses it; a connection that closes mid-body is a 502 ``upstream_disconnected``."""

    async def scenario() -> list[object]:
        out: list[object] = []
        async with _upstreams(_cut_serve, idle_timeout=2.0) as (upstreams, route):
            for limit in (len(BODY) - 1, 10, 0):
                response = await upstreams.open(route, "GET", "/cut/20", None, None)
                out.append(await asyncio.wait_for(response.read(limit), 5))
                response.close()
            response = await upstreams.open(route, "GET", "/cut/20", None, None)
            try:
                await relay.read_all(response, 30)
            except OpenAIError as err:
                out.append((err.status, err.code))
            response.close()
            response = await upstreams.open(route, "GET", "/broken/20", None, None)
            try:
                await asyncio.wait_for(response.read(1 << 20), 5)
            except OpenAIError as err:
                out.append((err.status, err.code))
            response.close()
        return out

    *refused, too_large, broken = asyncio.run(scenario())
    assert refused == [None, None, None]
    assert too_large[0] == 502 and broken == (502, "upstream_disconnected")


def test_a_request_given_up_before_its_head_leaves_no_error_when_its_connection_then_closes() -> None:
    """The opener stops waiting for the head (its client went away, the gateway is stopping): the
    head's future is cancelled with the waiting task. When the backend then closes the connection,
    ``connection_lost`` must not read that future's result (a CancelledError raised in uvloop's
    callback, printed as a traceback)."""

    async def scenario() -> tuple[list[dict[str, Any]], bool]:
        received, close = asyncio.Event(), asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            received.set()
            await close.wait()  # never answers; closes when told
            writer.close()

        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: errors.append(context))
        async with _upstreams(serve) as (upstreams, route):
            opening = asyncio.create_task(upstreams.open(route, "GET", "/v1/models", None, None))
            await asyncio.wait_for(received.wait(), 5)
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await opening
            close.set()
            await asyncio.sleep(0.2)  # the close reaches the client: connection_lost runs
        return errors, opening.cancelled()

    errors, cancelled = asyncio.run(scenario())
    assert cancelled
    assert errors == []


MIXED = [  # (path, the answer written, the status and body the client must read)
    ("/interim", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),
    ("/empty", b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
    ("/chunked", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 200, b"abc"),
    ("/sized", b"HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\nwxyz", 201, b"wxyz"),
    ("/error", b"HTTP/1.1 500 Oops\r\ncontent-length: 1\r\n\r\n!", 500, b"!"),
    # framing headers named in another case: found all the same
    ("/cased", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, b"ok"),
    ("/Cased", b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 3\r\nContent-Type: Text/Plain; a=b\r\n\r\nabc", 200, b"abc"),
]


def test_one_connections_answers_of_every_framing_are_read_in_turn_by_its_one_parser() -> None:
    """A kept-alive connection keeps its parser from answer to answer (llhttp starts the next
    message after one that completed): an interim head, a bodiless answer, chunked and sized
    bodies, an error status, each read as its own, all on one connection."""
    answers = {path.encode(): answer for path, answer, _, _ in MIXED}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        CONNECTIONS.append(writer)
        try:
            while line := await _next_request(reader):
                writer.write(answers[line.split()[1]])
                await writer.drain()
        finally:
            writer.close()

    async def scenario() -> list[tuple[int, bytes]]:
        got = []
        CONNECTIONS.clear()
        async with _upstreams(serve, idle_timeout=2.0) as (upstreams, route):
            for _ in range(2):
                for path, _, _, _ in MIXED:
                    response = await upstreams.open(route, "GET", path, None, None)
                    got.append((response.status, await asyncio.wait_for(relay.read_all(response), 5)))
                    response.close()
        return got

    assert asyncio.run(scenario()) == [(status, body) for _, _, status, body in MIXED] * 2
    assert len(CONNECTIONS) == 1


def test_a_kept_alive_connections_head_timer_is_moved_for_each_head_and_fails_only_a_late_one() -> None:
    """``head_within``'s timer outlives a head that came in time: the next head on the connection
    moves it earlier when its own wait is shorter, a timer that fires before the awaited head's
    time waits on for it, and one that fires while the connection idles in the pool fails nothing."""
    delays = {b"/fast": 0.0, b"/slow": 0.5, b"/never": 30.0}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await _next_request(reader):
                await asyncio.sleep(delays[line.split()[1]])
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def ask(pool: Pool, origin: Origin, path: str, wait: float) -> tuple[float, object]:
        conn = pool.take(origin)
        assert conn is not None  # the one connection, back in the pool each time
        loop = asyncio.get_running_loop()
        started = loop.time()
        conn.request(b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode(), None)
        try:
            head = await conn.head_within(wait)
        except TimeoutError:
            conn.done()
            return loop.time() - started, "late"
        body = b""
        with contextlib.suppress(StopAsyncIteration):
            while True:
                body += await conn.next_piece()
        conn.done()
        return loop.time() - started, (head.status, body)

    async def scenario() -> list[tuple[float, object]]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        origin: Origin = ("http", "127.0.0.1", server.sockets[0].getsockname()[1])
        pool = Pool(60.0)
        try:
            conn = await pool.connect(origin)
            conn.request(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n", None)
            await conn.head
            with contextlib.suppress(StopAsyncIteration):
                while True:
                    await conn.next_piece()
            conn.done()
            got = [await ask(pool, origin, "/fast", 0.2)]  # the timer, due in 0.2 s, left running
            await asyncio.sleep(0.4)  # it fires while the connection idles: nothing to fail
            got.append(await ask(pool, origin, "/fast", 0.3))
            got.append(await ask(pool, origin, "/slow", 2.0))  # fires at 0.3 s, before this head's time: waits on
            got.append(await ask(pool, origin, "/fast", 20.0))  # a timer 20 s away…
            got.append(await ask(pool, origin, "/never", 0.3))  # …moved to 0.3 s for this head
            return got
        finally:
            pool.close()
            server.close()

    got = asyncio.run(scenario())
    assert [outcome for _, outcome in got] == [(200, b"ok")] * 4 + ["late"]
    assert 0.45 < got[2][0] < 1.5  # the slow head, taken when it came
    assert 0.25 < got[4][0] < 1.5  # the late head, failed at its own wait, not the earlier timer's


def test_a_media_type_is_the_lower_case_type_without_parameters_each_time_it_is_seen() -> None:
    from oaishim.server.h1client import _media_type

    for _ in range(2):  # (the second time, as remembered)
        assert _media_type(b"Text/Event-Stream ; charset=utf-8") == "text/event-stream"
        assert _media_type(b"application/json") == "application/json"
        assert _media_type(None) == "application/octet-stream"


def test_under_capture_a_connection_notes_each_answers_reads_and_its_end_and_nothing_of_the_next() -> None:
    """``record_wire``: the list a request's ``SentRequest.wire`` names gets the reads that carried
    its answer, each with its time, then one empty read when the answer ended; read back
    (``server.capture_wire``) they give the status and body the gateway read. The connection is kept
    alive from answer to answer, and no answer's bytes reach another's list."""
    answers = {path.encode(): answer for path, answer, _, _ in MIXED}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        CONNECTIONS.append(writer)
        try:
            while line := await _next_request(reader):
                answer = answers[line.split()[1]]
                for i in range(0, len(answer), 7):  # in pieces, each its own read where the loop allows
                    writer.write(answer[i : i + 7])
                    await writer.drain()
                    await asyncio.sleep(0)
        finally:
            writer.close()

    async def scenario() -> list[tuple[list[tuple[int, bytes]] | None, int, bytes]]:
        got = []
        CONNECTIONS.clear()
        async with _upstreams(serve, idle_timeout=2.0) as (upstreams, route):
            for record in (True, False):
                upstreams.record_wire = record
                for path, _, _, _ in MIXED:
                    response = await upstreams.open(route, "GET", path, None, None)
                    body = await asyncio.wait_for(relay.read_all(response), 5)
                    got.append((response.request.wire, response.status, body))
                    response.close()
        return got

    got = asyncio.run(scenario())
    assert len(CONNECTIONS) == 1
    for (wire, status, body), (_, answer, want_status, want_body) in zip(got, MIXED * 2, strict=True):
        assert (status, body) == (want_status, want_body)
        if wire is None:
            continue  # the second pass: not recording
        assert b"".join(piece for _, piece in wire) == answer  # all of it, and none of the next
        assert wire[-1][1] == b"" and all(piece for _, piece in wire[:-1])  # the end, noted once
        assert [t for t, _ in wire] == sorted(t for t, _ in wire)
        read = read_wire(RawResponse(0, 0, (), wire, wire=True))
        assert read is not None and (read.status, read.complete) == (want_status, True)
        assert b"".join(piece for _, piece in read.reads) == want_body
    assert [wire is None for wire, _, _ in got] == [False] * len(MIXED) + [True] * len(MIXED)


def test_under_capture_an_answer_ended_by_the_close_is_complete_and_one_cut_off_is_not() -> None:
    """A body without framing ends with the connection (its end noted then); a sized body the
    backend cuts short gets no end, and the gateway's read of it fails."""

    def closing(answer: bytes) -> Serve:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _next_request(reader)
            writer.write(answer)
            await writer.drain()
            writer.close()

        return serve

    async def scenario(answer: bytes) -> tuple[list[tuple[int, bytes]] | None, bytes | None]:
        async with _upstreams(closing(answer), idle_timeout=2.0) as (upstreams, route):
            upstreams.record_wire = True
            response = await upstreams.open(route, "GET", "/x", None, None)
            try:
                body: bytes | None = await asyncio.wait_for(relay.read_all(response), 5)
            except OpenAIError:
                body = None
            response.close()
            return response.request.wire, body

    wire, body = asyncio.run(scenario(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nto the end"))
    read = read_wire(RawResponse(0, 0, (), wire or [], wire=True))
    assert body == b"to the end" and read is not None and read.complete
    assert b"".join(piece for _, piece in read.reads) == b"to the end"
    wire, body = asyncio.run(scenario(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"))
    read = read_wire(RawResponse(0, 0, (), wire or [], wire=True))
    assert body is None and wire and all(piece for _, piece in wire)  # no end noted
    assert read is not None and read.status == 200 and not read.complete
    assert b"".join(piece for _, piece in read.reads) == b"short"


def test_under_capture_the_answer_to_head_ends_with_its_head() -> None:
    async def scenario() -> list[tuple[int, bytes]] | None:
        async with _upstreams(_serve, idle_timeout=1.0) as (upstreams, route):
            upstreams.record_wire = True
            response = await upstreams.open(route, "HEAD", "/version", None, None)
            assert await asyncio.wait_for(relay.read_all(response), 5) == b""
            response.close()
            return response.request.wire

    wire = asyncio.run(scenario())
    assert wire is not None and b"".join(piece for _, piece in wire) == HEAD_ANSWER and wire[-1][1] == b""
    read = read_wire(RawResponse(0, 0, (), wire, wire=True), head_only=True)
    assert read is not None and (read.status, read.reads, read.complete) == (200, [], True)
    assert read.headers == [(b"content-type", b"application/json"), (b"content-length", b"42")]
