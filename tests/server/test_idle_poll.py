"""``serve --idle-poll-us`` (server.idle_poll): after a read the loop keeps polling for the window,
then sleeps; off, a read starts nothing. Over real sockets: the gateway in front of the replaying
backend, its clients' reads and its upstream's reads both counted."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from collections.abc import Iterator

import orjson
import pytest
from _servers import Canned, Replayer, RunningGateway, free_port

from oaishim.server.config import ConfigError, ModelRoute, Settings, build_settings
from oaishim.server.idle_poll import POLL, TAKEN_NS, IdlePoll
from oaishim.server.main import limits_for

ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip


def _ask(url: str) -> int:
    """One chat request, sent in one write (so the gateway reads it in one), and its status."""
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        return response.status


def _settled(poll: IdlePoll, seconds: float = 5.0) -> None:
    """Until the poll has stopped spinning (it must, with no reads)."""
    deadline = time.monotonic() + seconds
    while poll.spinning:
        assert time.monotonic() < deadline, "the loop never went back to sleep"
        time.sleep(0.005)


def _gateway(backend: Replayer, loop: str = "asyncio", **settings: object) -> RunningGateway:
    route = ModelRoute(name="m", upstreams=(backend.url,), profile="openai")
    return RunningGateway(Settings(models=(route,), port=free_port(), **settings), loop=loop)  # type: ignore[arg-type]


@pytest.fixture
def patient() -> Iterator[None]:
    """The process-wide poll not given up when this busy test machine takes the CPU a moment (see
    test_a_poll_that_loses_the_cpu_to_another_process_gives_up)."""
    POLL.taken_ns = 10**12
    yield
    POLL.taken_ns = TAKEN_NS


@pytest.mark.usefixtures("patient")
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_with_a_window_the_clients_and_the_upstreams_reads_keep_the_loop_polling_then_it_sleeps(loop: str) -> None:
    with Replayer() as backend, _gateway(backend, loop, idle_poll_us=20_000) as gateway:
        _settled(POLL)
        reads, turns = POLL.reads, POLL.turns
        backend.queue.append(Canned(orjson.dumps(ANSWER)))
        assert _ask(gateway.url) == 200
        # the request's one read woke it, and so did the upstream answer's read(s); and it polled
        assert POLL.reads - reads >= 2
        _settled(POLL)
        assert POLL.turns > turns
        # asleep, it stays asleep: no turn is spent while nothing is read
        idle = POLL.turns
        time.sleep(0.1)
        assert POLL.turns == idle
        assert not POLL.spinning
        # and the metrics say so (the page's read polls a little more, after it is rendered)
        host, port = gateway.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/metrics")
        page = conn.getresponse().read().decode()
        conn.close()
        shown = {
            k: float(v)
            for k, _, v in (line.partition(" ") for line in page.splitlines())
            if k.startswith("oaishim_idle")
        }
        assert idle <= shown["oaishim_idle_poll_turns_total"] <= POLL.turns and idle > 0
        assert shown["oaishim_idle_poll_given_up_total"] == POLL.taken
    assert POLL.window_ns == 0  # the stopped server turned it off


def test_off_by_default_a_read_starts_no_polling() -> None:
    with Replayer() as backend, _gateway(backend) as gateway:
        reads, turns = POLL.reads, POLL.turns
        backend.queue.append(Canned(orjson.dumps(ANSWER)))
        assert _ask(gateway.url) == 200
        assert (POLL.reads, POLL.turns, POLL.spinning) == (reads, turns, False)


def test_a_read_on_another_loop_and_a_read_after_the_stop_start_nothing() -> None:
    poll = IdlePoll()
    poll.taken_ns = 10**12

    async def other() -> None:
        poll.wake(asyncio.get_running_loop())  # not the loop it was started on

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        poll.start(loop, 50_000)
        await asyncio.to_thread(asyncio.run, other())
        on_other = poll.reads
        poll.wake(loop)
        await asyncio.sleep(0.01)
        spun = poll.turns
        poll.stop(loop)
        await asyncio.sleep(0.01)  # the spin under way ends at its next turn
        stopped = poll.turns
        poll.wake(loop)
        await asyncio.sleep(0.01)
        assert not poll.spinning
        return on_other, spun, poll.turns - stopped

    on_other, spun, after_stop = asyncio.run(main())
    assert on_other == 0
    assert spun > 0
    assert after_stop <= 1  # (at most the turn that saw the stop)


def test_each_read_restarts_the_window() -> None:
    """Twenty reads 5 ms apart against a 50 ms window: polling ends no sooner than 50 ms after the
    last read (a lower bound, whatever the machine's load), which only holds if each read restarted
    the window: a window counted from the first read of a spin would end sooner."""
    poll = IdlePoll()
    poll.taken_ns = 10**12

    async def main() -> float:
        loop = asyncio.get_running_loop()
        poll.start(loop, 50_000)
        last = 0.0
        for _ in range(20):
            last = time.perf_counter()
            poll.wake(loop)
            await asyncio.sleep(0.005)
        while poll.spinning:
            await asyncio.sleep(0)
        return time.perf_counter() - last

    assert asyncio.run(main()) >= 0.05


@pytest.mark.parametrize("value", [-1, 100_001, "fast"])
def test_a_window_out_of_range_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError, match="idle_poll_us"):
        build_settings(upstream="http://127.0.0.1:9", idle_poll_us=value)


def test_the_window_reaches_the_server_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OAISHIM_IDLE_POLL_US", "300")
    settings = build_settings(upstream="http://127.0.0.1:9")
    assert settings.idle_poll_us == 300
    assert limits_for(settings).idle_poll_us == 300
    monkeypatch.delenv("OAISHIM_IDLE_POLL_US")
    assert limits_for(build_settings(upstream="http://127.0.0.1:9")).idle_poll_us == 0


def test_the_window_shrinks_to_nothing_over_long_gaps_and_grows_back_over_short_ones() -> None:
    poll = IdlePoll()
    poll.max_ns = poll.window_ns = 200_000
    windows = []
    for gap in (900_000, 900_000, 900_000, 900_000, 50_000, 50_000, 50_000, 50_000, 199_999, 200_000):
        poll.slept(gap)
        windows.append(poll.window_ns)
    # halved while the gaps are past the window asked for (nothing below 20 µs), then doubled from
    # 20 µs while a longer window would have caught them, never past the one asked for
    assert windows == [100_000, 50_000, 25_000, 0, 20_000, 40_000, 80_000, 160_000, 200_000, 100_000]


def test_reads_far_apart_stop_the_polling_and_close_ones_bring_it_back() -> None:
    """A 2 ms window, reads 30 ms apart: after a few the loop no longer polls after a read; reads
    a loop turn apart then bring the window back."""
    poll = IdlePoll()
    poll.taken_ns = 10**12

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        poll.start(loop, 2_000)
        for _ in range(12):
            poll.wake(loop)
            await asyncio.sleep(0.03)
        after_far = poll.window_ns
        turns = poll.turns
        poll.wake(loop)
        await asyncio.sleep(0.03)
        polled_after_far = poll.turns - turns
        grown = 0
        for _ in range(12):
            poll.wake(loop)
            await asyncio.sleep(0)
            grown = max(grown, poll.window_ns)
        return after_far, polled_after_far, grown

    after_far, polled_after_far, after_close = asyncio.run(main())
    assert after_far == 0
    assert polled_after_far == 0
    assert after_close > 0


def test_a_poll_that_loses_the_cpu_to_another_process_gives_up() -> None:
    """Off the CPU for 5 ms in the middle of a poll (this thread asleep: wall time passes, its CPU
    time does not, as when another process runs): the poll ends at once, and reads for a while
    after start none, so a busy machine's loop sleeps as it would without polling."""
    poll = IdlePoll()
    poll.quiet_ns = 10**12  # (the quiet time outlasts whatever this busy machine makes of the test)

    async def main() -> tuple[bool, int, bool, int]:
        loop = asyncio.get_running_loop()
        poll.start(loop, 50_000)
        poll.wake(loop)
        await asyncio.sleep(0)
        loop.call_soon(time.sleep, 0.005)
        for _ in range(1000):  # the turn after the sleep gives up
            await asyncio.sleep(0)
            if not poll.spinning:
                break
        gave_up, taken = not poll.spinning, poll.taken
        poll.wake(loop)  # within the quiet time after
        quiet = not poll.spinning
        turns = poll.turns
        await asyncio.sleep(0.002)
        return gave_up, taken, quiet, poll.turns - turns

    gave_up, taken, quiet, turns_after = asyncio.run(main())
    assert (gave_up, taken, quiet, turns_after) == (True, 1, True, 0)


def test_a_spin_left_queued_on_a_loop_that_ended_does_not_stop_the_next_loop_polling() -> None:
    poll = IdlePoll()
    poll.taken_ns = 10**12

    async def first() -> None:
        loop = asyncio.get_running_loop()
        poll.start(loop, 50_000)
        poll.wake(loop)  # its spin still queued when this loop ends

    async def second() -> int:
        loop = asyncio.get_running_loop()
        poll.start(loop, 50_000)
        turns = poll.turns
        poll.wake(loop)
        await asyncio.sleep(0.005)
        return poll.turns - turns

    asyncio.run(first())
    assert asyncio.run(second()) > 0
