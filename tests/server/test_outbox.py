"""The writes of a loop turn (server.outbox), on real sockets: the turn's first write is on the wire
before the turn ends, the others reach it together at the turn's end, in order, and none is lost
to a close, an end of writing or a connection that holds more than HOLD_MAX bytes. What the peer
reads is read from its socket; both event loops the gateway can run on are tried.

The gateway's own behaviour with it (pipelined answers in order, streams, refusals) is what the
HTTP server's, the relay's and the gateway's tests check: they all pass through it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oaishim.server.h1client import Connection, Pool
from oaishim.server.http import HttpConnection, HttpLimits, ServerState
from oaishim.server.outbox import HOLD_MAX, Outbox
from oaishim.server.serving import event_loop_factory

LOOPS = ["asyncio", "uvloop"]


def _run(loop_name: str, test: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=event_loop_factory(loop_name)) as runner:
        runner.run(test())


def _readable(sock: socket.socket) -> bytes:
    """What the peer can read right now, without waiting."""
    sock.setblocking(False)
    out = b""
    while True:
        try:
            piece = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not piece:
            return out
        out += piece


async def _settle() -> None:
    """A few turns of the loop, and time for the bytes to cross the socket pair."""
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


def _busy(requests: int) -> ServerState:
    """A server's state with ``requests`` requests under way (tasks that wait, as an answer does)."""
    state = ServerState(app=None, limits=HttpLimits())
    loop = asyncio.get_running_loop()
    for _ in range(requests):
        state.tasks.add(loop.create_task(asyncio.sleep(30)))
    return state


def _done(state: ServerState) -> None:
    for task in state.tasks:
        task.cancel()


async def _client_connection(state: ServerState) -> tuple[HttpConnection, socket.socket]:
    ours, peer = socket.socketpair()
    loop = asyncio.get_running_loop()
    conn = HttpConnection(state, loop)
    await loop.connect_accepted_socket(lambda: conn, ours)
    return conn, peer


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_turns_first_write_goes_at_once_and_the_rest_together_at_its_end(loop_name: str) -> None:
    async def test() -> None:
        state = _busy(2)
        (a, peer_a), (b, peer_b) = await _client_connection(state), await _client_connection(state)
        await _settle()
        a.write(b"one ")  # the turn's first: on the wire now
        b.write(b"two ")
        a.write(b"three ")
        b.write(b"four")
        time.sleep(0.02)  # (the turn stays open: an await would end it)
        first_a, first_b = _readable(peer_a), _readable(peer_b)
        await _settle()
        assert (first_a, _readable(peer_a)) == (b"one ", b"three ")
        assert (first_b, _readable(peer_b)) == (b"", b"two four")
        _done(state)


@pytest.mark.parametrize("loop_name", LOOPS)
def test_with_a_single_request_under_way_nothing_is_held(loop_name: str) -> None:
    async def test() -> None:
        state = _busy(1)
        (a, peer_a), (b, peer_b) = await _client_connection(state), await _client_connection(state)
        await _settle()
        a.write(b"one ")
        b.write(b"two ")
        a.write(b"three")
        time.sleep(0.02)
        assert (_readable(peer_a), _readable(peer_b)) == (b"one three", b"two ")
        assert state.outbox.first(asyncio.get_running_loop())  # no turn was opened: no callback owed
        _done(state)

    _run(loop_name, test)


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_lone_write_in_each_turn_is_never_held(loop_name: str) -> None:
    async def test() -> None:
        state = _busy(2)
        conn, peer = await _client_connection(state)
        for i in range(5):
            await _settle()  # a new turn: its only write
            conn.write(b"piece %d;" % i)
            time.sleep(0.02)
            assert _readable(peer) == b"piece %d;" % i
        _done(state)

    _run(loop_name, test)


@pytest.mark.parametrize("loop_name", LOOPS)
@pytest.mark.parametrize("ending", ["close", "linger", "past HOLD_MAX"])
def test_what_a_connection_holds_goes_out_before_anything_else_reaches_its_socket(loop_name: str, ending: str) -> None:
    async def test() -> None:
        state = _busy(2)
        other, other_peer = await _client_connection(state)
        conn, peer = await _client_connection(state)
        await _settle()
        other.write(b"x")  # the turn's first write: this connection's are held
        conn.write(b"held, ")
        conn.write(b"then more")
        expected = b"held, then more"
        if ending == "close":
            conn._close()
        elif ending == "linger":
            conn._linger()  # the end of writing: the peer reads EOF after the held bytes
        else:
            big = b"z" * (HOLD_MAX + 1)
            conn.write(big)
            expected += big
        await asyncio.sleep(0)
        got = b""
        peer.settimeout(5)
        while len(got) < len(expected):
            piece = await asyncio.get_running_loop().run_in_executor(None, peer.recv, 1 << 20)
            assert piece, f"the connection ended after {len(got)} of {len(expected)} bytes"
            got += piece
        assert got == expected
        if ending != "past HOLD_MAX":
            assert peer.recv(10) == b""  # then its end
        _readable(other_peer)
        _done(state)

    _run(loop_name, test)


@pytest.mark.parametrize("loop_name", LOOPS)
def test_an_upstream_request_is_held_only_behind_others_of_its_turn(loop_name: str) -> None:
    async def test() -> None:
        loop = asyncio.get_running_loop()
        pool = Pool(keepalive=5.0)
        conns: list[tuple[Connection, socket.socket]] = []
        for _ in range(3):
            ours, peer = socket.socketpair()
            conn = Connection(pool, ("http", "127.0.0.1", 1))
            await loop.connect_accepted_socket(lambda c=conn: c, ours)  # type: ignore[misc]
            conns.append((conn, peer))
        await _settle()
        (one, one_peer), (two, two_peer), (three, three_peer) = conns
        one.request(b"GET /a HTTP/1.1\r\n\r\n", None)  # the only request under way: at once
        two.request(b"GET /b HTTP/1.1\r\n\r\n", None)  # two under way: the turn's first, at once
        three.request(b"POST /c HTTP/1.1\r\ncontent-length: 2\r\n\r\n", b"{}")  # held
        time.sleep(0.02)
        now = (_readable(one_peer), _readable(two_peer), _readable(three_peer))
        await _settle()
        assert now == (b"GET /a HTTP/1.1\r\n\r\n", b"GET /b HTTP/1.1\r\n\r\n", b"")
        assert _readable(three_peer) == b"POST /c HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}"
        assert pool.in_flight == 3
        one.done()  # its answer is no longer wanted: one fewer under way
        assert pool.in_flight == 2
        two.request(b"GET /d HTTP/1.1\r\n\r\n", None)  # a new turn's first
        big = b"b" * (HOLD_MAX + 1)
        three.request(b"POST /e HTTP/1.1\r\n\r\n", big)  # past HOLD_MAX: not held
        time.sleep(0.02)
        assert _readable(three_peer).startswith(b"POST /e HTTP/1.1\r\n\r\nbbb")
        pool.close()
        for conn, peer in conns:
            assert conn.transport is not None
            conn.transport.close()
            peer.close()

    _run(loop_name, test)


def test_the_turn_ends_when_the_loop_comes_back_to_its_callbacks() -> None:
    """The outbox alone: ``first`` is true once a turn, and a holder is flushed once the loop runs
    its next callbacks."""

    class Holder:
        def __init__(self) -> None:
            self.flushed = 0

        def flush(self) -> None:
            self.flushed += 1

    async def test() -> None:
        outbox, holder = Outbox(), Holder()
        loop: Any = asyncio.get_running_loop()
        assert outbox.first(loop) and not outbox.first(loop)
        outbox.hold(holder)
        assert holder.flushed == 0
        await asyncio.sleep(0)
        assert holder.flushed == 1
        assert outbox.first(loop)  # a new turn

    _run("uvloop", test)
