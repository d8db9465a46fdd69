"""When the capture process builds records (``server.capture_pace``): on a clock the test moves, so
each rule (quiet, the busy share, behind, full) is seen to decide; the real process is driven end
to end in ``test_workers``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oaishim.server.capture_feed import RemoteWriter
from oaishim.server.capture_pace import (
    BACKLOG_MIN,
    IDLE_BUILD_BYTES,
    MIB,
    RELEASE_AFTER,
    Backlog,
    Pace,
    Priority,
    backlog_bytes_for,
    one_core,
)
from oaishim.server.capture_process import backlog_bytes
from oaishim.server.config import build_settings
from oaishim.server.knobs import usable_memory


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def held(clock: Clock, *sizes: int) -> Backlog:
    backlog = Backlog()
    for size in sizes:
        backlog.add(clock.now, b"x" * size)
    return backlog


def test_the_backlog_is_first_in_first_out_and_counts_its_bytes(clock: Clock) -> None:
    backlog = Backlog()
    backlog.add(1.0, b"ab")
    backlog.add(2.0, b"cde")
    assert (len(backlog), backlog.bytes, backlog.oldest()) == (2, 5, 1.0)
    assert backlog.take() == b"ab"
    assert (len(backlog), backlog.bytes, backlog.oldest()) == (1, 3, 2.0)
    assert backlog.take() == b"cde"
    assert not backlog and backlog.bytes == 0 and backlog.oldest() == float("inf")


def test_nothing_held_nothing_built(clock: Clock) -> None:
    pace = Pace(clock)
    assert not pace.may_build(Backlog())
    assert pace.wait(Backlog()) == 0.2


def test_a_quiet_gateway_gets_every_record_built(clock: Clock) -> None:
    pace = Pace(clock)
    backlog = held(clock, 10, 10, 10)
    pace.arrived()
    clock.now += Pace.QUIET * 1.01
    for _ in range(3):
        assert pace.may_build(backlog)
        backlog.take()
        pace.built(1.0)  # however long: quiet time is not counted against the share
    assert pace.tokens == Pace.BURST


def test_a_worker_busy_on_the_board_is_not_quiet_though_no_frame_comes(clock: Clock) -> None:
    """A busy worker holds its frames (``capture_feed``): the board's time keeps the gateway busy,
    the frames' aside, and the share is what may be built until the board falls quiet too."""
    said = [clock.now]
    pace = Pace(clock, busy=lambda: said[0])
    backlog = held(clock, 10, 10, 10)
    pace.arrived()  # the burst handed over at the end of the last load
    clock.now += Pace.QUIET * 0.5
    said[0] = clock.now  # the next load has begun: no frame, but the board
    clock.now += Pace.QUIET * 0.9
    assert not pace.quiet()
    assert pace.may_build(backlog)  # the share's burst, at first
    pace.built(Pace.BURST * 2)
    assert not pace.may_build(backlog) and pace.wait(backlog) > 0  # not at full pace
    clock.now += Pace.QUIET * 0.2  # the board's last word is now QUIET old, the last frame's older
    assert pace.quiet() and pace.may_build(backlog) and pace.wait(backlog) == 0


def test_quiet_is_no_frame_for_a_while_and_not_behind(clock: Clock) -> None:
    bound = 10_000
    pace = Pace(clock, backlog_bytes=bound)
    assert pace.quiet()  # nothing ever arrived
    pace.arrived()
    assert not pace.quiet()
    clock.now += Pace.QUIET * 0.99
    assert not pace.quiet()
    clock.now += Pace.QUIET * 0.02
    assert pace.quiet()
    behind = held(clock, bound // 2 + 1)
    assert pace.may_build(behind) and pace.behind
    assert not pace.quiet()  # building without pause to catch up: the checker keeps its budget


def test_a_busy_gateway_gets_a_share_of_the_time(clock: Clock) -> None:
    pace = Pace(clock)
    backlog = held(clock, *[10] * 1000)
    built = 0
    for _ in range(1000):  # frames every millisecond for a second, a record costing 0.5 ms
        clock.now += 0.001
        pace.arrived()
        if pace.may_build(backlog):
            backlog.take()
            pace.built(0.0005)
            built += 1
    spent = built * 0.0005
    assert Pace.SHARE * 0.8 <= spent <= Pace.SHARE + Pace.BURST + 0.0005
    assert not pace.behind


def test_a_worker_between_two_hand_overs_is_not_a_quiet_gateway(clock: Clock) -> None:
    """Frames come once per the worker's own hand-over interval under load (``RemoteWriter``'s
    default), with the gaps between a little late as a loaded event loop makes them: the share
    still rules, so the records wait rather than take the core beside the load. (With hand-overs
    every 100 ms against a quiet of 50, the gaps passed for quiet under load:
    bench/results/2026-12-06T0320-capture-parts-again.md.)"""
    interval = RemoteWriter(Path("unused.sock")).interval
    pace = Pace(clock)
    backlog = held(clock, *[10] * 1000)
    built, start = 0, clock.now
    for _ in range(round(2 / interval)):  # two seconds of hand-overs on time (2.6 s as they come late)
        pace.arrived()
        slice_end = clock.now + interval * 1.3  # a tick 30 % late
        while clock.now < slice_end:
            clock.now += 0.001
            if pace.may_build(backlog):
                backlog.take()
                pace.built(0.0005)
                built += 1
    spent = built * 0.0005
    assert spent <= Pace.SHARE * (clock.now - start) + Pace.BURST + 0.0005
    assert not pace.behind


def test_the_wait_ends_when_the_share_or_the_quiet_allows_a_build(clock: Clock) -> None:
    pace = Pace(clock)
    backlog = held(clock, 10)
    pace.arrived()
    assert pace.may_build(backlog)  # the burst
    pace.built(0.004)  # 2 ms past it: the share pays that back in 40 ms
    assert not pace.may_build(backlog)
    assert pace.wait(backlog) == pytest.approx(0.04)  # sooner than the quiet's 50 ms
    pace.built(0.0)
    clock.now += 0.01
    pace.arrived()
    pace.may_build(backlog)
    assert pace.wait(backlog) == pytest.approx(min(Pace.QUIET, 0.0015 / Pace.SHARE))


@pytest.mark.parametrize("bound", [BACKLOG_MIN, 10_000])
def test_a_backlog_past_half_its_bytes_is_behind_until_a_quarter(clock: Clock, bound: int) -> None:
    pace = Pace(clock, bound)
    half = bound // 2
    pace.may_build(held(clock, half))
    assert not pace.behind  # half itself is not past it
    backlog = held(clock, half, 1)
    pace.arrived()
    pace.tokens = -1.0  # the share spent: only being behind allows a build
    assert pace.may_build(backlog) and pace.behind
    assert pace.wait(backlog) == 0.0
    backlog.take()  # down to 1 byte: a quarter or less, and young
    assert not pace.may_build(backlog) and not pace.behind


def test_a_backlog_whose_oldest_is_too_old_is_behind(clock: Clock) -> None:
    pace = Pace(clock)
    backlog = held(clock, 10)
    clock.now += Pace.BACKLOG_AGE + 1
    pace.arrived()
    pace.tokens = -1.0
    assert pace.may_build(backlog) and pace.behind


@pytest.mark.parametrize("bound", [BACKLOG_MIN, 10_000])
def test_a_full_backlog_stops_the_reading(clock: Clock, bound: int) -> None:
    pace = Pace(clock, bound)
    assert not pace.full(held(clock, bound - 1))
    assert pace.full(held(clock, bound))


@pytest.mark.parametrize(
    ("memory", "bound"),
    [(None, 256 * MIB), (1 << 30, 256 * MIB), (8 << 30, 512 * MIB), (24 << 30, 1536 * MIB), (64 << 30, 2048 * MIB)],
)
def test_the_default_bound_is_a_sixteenth_of_the_memory_within_its_range(memory: int | None, bound: int) -> None:
    assert backlog_bytes_for(memory) == bound


def test_the_bound_is_the_setting_else_the_machines(tmp_path: Path) -> None:
    given = build_settings(upstream="http://127.0.0.1:9", capture=tmp_path, capture_backlog_mb=1.5)
    assert backlog_bytes(given) == 1536 * 1024
    machine = usable_memory()
    assert machine is not None and machine > 0  # (Linux: /proc/meminfo)
    assert backlog_bytes(build_settings(upstream="http://127.0.0.1:9", capture=tmp_path)) == backlog_bytes_for(machine)


def machine(tmp_path: Path, total_kb: int | None, group: str | None, limits: dict[str, str]) -> Path:
    """A folder laid out as ``/proc`` and ``/sys/fs/cgroup`` are, with these figures."""
    (tmp_path / "proc/self").mkdir(parents=True)
    if total_kb is not None:
        (tmp_path / "proc/meminfo").write_text(f"MemTotal:       {total_kb} kB\nMemFree:        1 kB\n")
    if group is not None:
        (tmp_path / "proc/self/cgroup").write_text(f"0::{group}\n")
    for folder, value in limits.items():
        where = tmp_path / "sys/fs/cgroup" / folder
        where.mkdir(parents=True, exist_ok=True)
        (where / "memory.max").write_text(value + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("total_kb", "group", "limits", "expected"),
    [
        (8 << 20, None, {}, 8 << 30),  # no cgroup file: the machine's
        (8 << 20, "/a/b", {"a/b": "max", "a": "max"}, 8 << 30),  # no limit anywhere
        (8 << 20, "/a/b", {"a/b": str(1 << 30)}, 1 << 30),  # its own group's
        (8 << 20, "/a/b", {"a/b": "max", "a": str(2 << 30)}, 2 << 30),  # a parent's
        (8 << 20, "/a/b", {"a/b": str(3 << 30), "a": str(2 << 30)}, 2 << 30),  # the least of them
        (1 << 20, "/a", {"a": str(4 << 30)}, 1 << 30),  # a limit above the machine's memory
        (None, "/a", {"a": str(4 << 30)}, 4 << 30),  # no meminfo
        (None, None, {}, None),  # nothing to read
        (8 << 20, "/a", {"a": "garbage"}, 8 << 30),  # a value that is not a number is passed over
    ],
)
def test_the_usable_memory_is_the_machines_or_the_least_cgroup_limit(
    tmp_path: Path, total_kb: int | None, group: str | None, limits: dict[str, str], expected: int | None
) -> None:
    assert usable_memory(machine(tmp_path, total_kb, group, limits)) == expected


def test_a_backlog_that_held_enough_says_once_that_it_is_drained(clock: Clock) -> None:
    backlog = held(clock, RELEASE_AFTER // 2, RELEASE_AFTER // 2)
    assert not backlog.drained()  # (still held)
    backlog.take()
    backlog.add(clock.now, b"x")  # the peak is what counts, not what is held now
    backlog.take()
    assert not backlog.drained()
    backlog.take()
    assert backlog.drained() and not backlog.drained()  # once
    small = held(clock, RELEASE_AFTER - 1)
    small.take()
    assert not small.drained()  # too little held to be worth a release


RELEASE_PROBE = """
import collections, os, sys
from oaishim.server.capture_pace import release_memory
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) * 1024
held = collections.deque(os.urandom(16) * 256 for _ in range(50_000))  # 200 MB of 4 KB payloads, as a backlog
peak = rss()
held.clear()
kept = rss()
released = release_memory()
print(peak, kept, rss(), released)
"""


def test_the_memory_a_built_backlog_held_goes_back_to_the_system() -> None:
    """In a process of its own (what the test process holds would blur the figures)."""
    out = subprocess.run([sys.executable, "-c", RELEASE_PROBE], capture_output=True, text=True, check=True).stdout
    peak, kept, after, released = out.split()
    if released != "True":
        pytest.skip("no malloc_trim in this C library")
    assert int(peak) > 180 * MIB
    assert int(kept) > 150 * MIB  # freed, and still the process's: what release_memory is for
    assert int(after) < 60 * MIB


def test_the_writer_builds_in_the_idle_class_reads_outside_it_and_leaves_it_when_behind() -> None:
    calls: list[bool] = []
    allowed = [True]

    def set_idle(idle: bool) -> bool:
        calls.append(idle)
        return allowed[0]

    priority = Priority(set_idle, can_leave_idle=True)
    assert not priority.idle and calls == []  # it starts reading, at its nice value
    priority.read()
    assert calls == []  # no switch where none is needed
    priority.build()
    assert priority.idle and calls == [True]
    priority.build()
    assert calls == [True]  # records built one after another: no switch between them
    priority.read()
    assert not priority.idle and calls == [True, False]
    priority.build()
    priority.follow(True)  # behind: out of the idle class at once
    assert not priority.idle and calls == [True, False, True, False] and priority.switches == 1
    priority.build()
    priority.read()
    priority.follow(True)
    assert calls == [True, False, True, False] and priority.switches == 1  # builds at nice 10 while behind
    priority.follow(False)
    priority.build()
    assert priority.idle and calls[-1] is True
    allowed[0] = False  # the kernel refuses the switch: the writer says what it really is
    priority.read()
    assert priority.idle and calls[-1] is False


def test_a_long_record_is_built_at_nice_10_and_the_next_short_one_in_the_idle_class_again() -> None:
    calls: list[bool] = []
    priority = Priority(lambda idle: calls.append(idle) or True, can_leave_idle=True)
    priority.build(IDLE_BUILD_BYTES)
    assert priority.idle and calls == [True]  # up to the bound: the idle class
    priority.build(IDLE_BUILD_BYTES + 1)
    assert not priority.idle and calls == [True, False]  # past it: out of the idle class for this one
    priority.build(IDLE_BUILD_BYTES + 1)
    assert calls == [True, False]
    priority.build(100)
    assert priority.idle and calls == [True, False, True]


def test_a_stopping_writer_leaves_the_idle_class_and_says_it_is_stopping_not_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[bool] = []
    priority = Priority(lambda idle: calls.append(idle) or True, can_leave_idle=True)
    priority.build()
    with caplog.at_level("INFO", logger="oaishim.capture"):
        priority.follow(False, stopping=True)
        assert not priority.idle and calls == [True, False]
        priority.build()
        priority.follow(False, stopping=True)
        assert calls == [True, False]  # stays out of the idle class until it exits
    assert "stopping" in caplog.text and "behind" not in caplog.text


def test_a_writer_that_could_not_leave_the_idle_class_never_enters_it() -> None:
    calls: list[bool] = []
    priority = Priority(lambda idle: calls.append(idle) or True, can_leave_idle=False)
    priority.build()
    priority.follow(True)
    priority.follow(False)
    priority.build()
    assert not priority.idle and calls == []


def test_the_writer_keeps_to_the_last_core_it_may_use() -> None:
    assert one_core({0, 1, 2, 3}) == {3}
    assert one_core({5, 2}) == {5}
    assert one_core(set()) == set()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux, 2 cores")
def test_in_the_idle_class_the_writer_keeps_to_one_core_and_behind_it_has_them_all_again() -> None:
    """The kernel's side, in a process of its own (it changes the process it runs in)."""
    script = (
        "import os\n"
        "from oaishim.server.capture_pace import _Scheduler\n"
        "s = _Scheduler()\n"
        "print(sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))\n"
        "assert s.set_idle(True)\n"
        "print(sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))\n"
        "if s.set_idle(False):\n"
        "    print(sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    lines = [line.rsplit(" ", 1) for line in out.splitlines()]
    cores = sorted(os.sched_getaffinity(0))
    assert lines[0] == [str(cores), str(os.SCHED_OTHER)]
    assert lines[1] == [str([cores[-1]]), str(os.SCHED_IDLE)]
    if len(lines) > 2:  # (leaving the idle class needs the right to nice 10: root, or RLIMIT_NICE)
        assert lines[2] == [str(cores), str(os.SCHED_OTHER)]
