"""Polling instead of sleeping, for a short while after the last I/O: ``serve --idle-poll-us N``
(off by default), CPU traded for latency on machines where waking from sleep is what costs.

When the event loop has nothing ready it sleeps in ``epoll``, and on a virtual machine whose idle
vCPU halts (a KVM guest with guest halt polling off: ``haltpoll.guest_halt_poll_ns=0``, as on the
2-vCPU VM the benchmark ran on) each sleep hands the vCPU back to the host. Waking it costs the
host's exit and entry, and the request then runs at a worse rate (its caches cold): on that VM a
plain request cost the serving process about 250 µs of CPU at c1 against 80 at c32, for the same
instructions. With 200 µs of polling, c1 p50 (added) went from 0.222 to 0.151 ms; with the guest's
own halt polling on instead, to 0.126 ms (bench/results/2026-12-06T0814-idle-poll.md). A stream's
first token showed no gain the rounds could tell from noise (bench/README.md, "The idle round").

:data:`POLL` is one per process. A server that polls starts it on its loop with a window
(``start``); each read of a client connection or an upstream connection calls ``wake``. While the
last read is at most the window old the loop keeps a callback ready, so libuv polls without
blocking and the process keeps its CPU; each turn that goes on polling yields the CPU (``sched_yield``),
so a process that is ready to run is not held up. After the window without a read the loop sleeps
as usual, and the next read starts the polling again. The window fits itself to the gaps between
reads, as Linux's guest halt polling does (``slept``): where the loop, having polled in vain, then
sleeps longer than the window asked for before the next read (a slow stream's tokens, a model's
first token), it halves, to nothing; where a longer poll would have caught the read, it grows
back. So what gains is what comes back within the window: a client's next request on a kept-alive
connection, an upstream that answers in microseconds (a cache, the benchmark's synthetic one), the
reads of a busy stream; an answer a model takes milliseconds to start is waited for asleep.

Polling is worth it only where the CPU would otherwise idle: a turn that lost the CPU meanwhile
(its wall time well past this thread's CPU time: another process or thread ran, or the host took
the vCPU) ends the poll, and reads start none for a few milliseconds after, so on a busy machine
the loop sleeps as it would without polling (on two vCPUs under wrk at c32 polling without this
cost +20 % latency). The price is CPU: up to the window of it after each burst of work, so a load
whose gaps are shorter than the window turns the process's idle time into CPU time, which a
container's CPU quota counts. Off, ``wake`` is one test.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Final

now: Final = time.perf_counter_ns
cpu_now: Final = time.thread_time_ns
yield_cpu: Final = getattr(os, "sched_yield", lambda: None)
# a turn that took this much longer in wall time than in this thread's CPU time gave the CPU to
# another process: the CPU is wanted, it would not idle, and the loop may as well sleep; and it
# sleeps at once after every read for QUIET_NS after that (a busy machine stays busy a while)
TAKEN_NS: Final = 20_000
QUIET_NS: Final = 5_000_000
MAX_WINDOW_US: Final = 100_000  # the largest window the setting accepts (server.knobs)
GROW_START_NS: Final = 20_000  # a window that shrank to nothing starts again at this


class IdlePoll:
    """The loop kept polling for ``window_ns`` after each read, the window fitted to the gaps
    between reads up to ``max_ns`` (see the module)."""

    __slots__ = (
        "_cpu_at", "_last", "_loop", "_on", "_quiet_until", "_seen", "_slept_at", "_turn_at", "max_ns", "quiet_ns",
        "reads", "taken", "taken_ns", "turns", "window_ns",
    )  # fmt: skip

    def __init__(self) -> None:
        self.max_ns = 0  # the window asked for; 0: off
        self.window_ns = 0  # the window now (see ``slept``)
        self.reads = 0  # reads noted while on (the spin compares it to see whether one came)
        self.turns = 0  # loop turns spent polling, for the tests and the curious
        self.taken = 0  # polls given up because another process took the CPU meanwhile
        self.taken_ns = TAKEN_NS
        self.quiet_ns = QUIET_NS
        self._quiet_until = 0  # no polling before this (the CPU was taken)
        self._turn_at = 0  # the last turn's wall time and this thread's CPU time then
        self._cpu_at = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seen = 0
        self._last = 0
        self._slept_at = 0  # when the loop last went to sleep after polling in vain (0: it has not)
        self._on: asyncio.AbstractEventLoop | None = None  # the loop a spin is scheduled on

    def start(self, loop: asyncio.AbstractEventLoop, window_us: int) -> None:
        """Poll on ``loop`` for up to ``window_us`` microseconds after each read (0: never)."""
        self._loop = loop
        self.max_ns = self.window_ns = max(0, window_us) * 1000
        self._slept_at = self._quiet_until = 0
        self._on = None  # (a spin left queued on a loop that ended is not this one's)

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop polling on ``loop`` (the spin, if running, ends at its next turn)."""
        if self._loop is loop:
            self._loop = None
            self.max_ns = self.window_ns = 0

    @property
    def spinning(self) -> bool:
        return self._on is not None

    def slept(self, gap_ns: int) -> None:
        """The loop slept ``gap_ns`` after a poll that caught nothing (or none, the window being 0):
        a gap a longer window would have caught grows it (twice, from ``GROW_START_NS``, up to
        ``max_ns``); a gap longer than ``max_ns`` halves it, to nothing below ``GROW_START_NS``, so
        reads that come far apart (a slow stream's tokens) cost no polling. As Linux's guest halt
        polling fits its own window."""
        if gap_ns < self.max_ns:
            if self.window_ns < self.max_ns:
                self.window_ns = min(self.max_ns, max(GROW_START_NS, 2 * self.window_ns))
        else:
            half = self.window_ns // 2
            self.window_ns = half if half >= GROW_START_NS else 0

    def wake(self, loop: asyncio.AbstractEventLoop) -> None:
        """A connection on ``loop`` read something: poll for the window from now."""
        if self.max_ns and loop is self._loop:
            self.reads += 1
            if self._on is None:
                t = now()
                if t < self._quiet_until:
                    return
                if self._slept_at:
                    self.slept(t - self._slept_at)
                if self.window_ns:
                    self._on = loop
                    self._seen = self.reads
                    self._last = self._turn_at = t
                    self._cpu_at = cpu_now()
                    self._slept_at = 0
                    loop.call_soon(self._spin, loop)
                else:
                    self._slept_at = t  # no poll: the loop sleeps once this read is dealt with

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        """One turn of polling on ``loop`` (its own: never another thread's)."""
        t, cpu = now(), cpu_now()
        taken = (t - self._turn_at) - (cpu - self._cpu_at) > self.taken_ns
        self._turn_at, self._cpu_at = t, cpu
        if loop is not self._on or loop is not self._loop:  # stopped, or another loop started
            if loop is self._on:
                self._on = None
            return
        if self.reads != self._seen:  # a read since the last turn: the window starts again
            self._seen = self.reads
            self._last = t
        if taken:
            # the CPU went to something else meanwhile (another process, another thread, the host):
            # on a CPU that busy sleeping costs no halt, so the loop sleeps, and the gap after is not
            # the window's to fit
            self.taken += 1
            self._quiet_until = t + self.quiet_ns
            self._on = None
            self._slept_at = 0
            return
        if t - self._last >= self.window_ns:
            self._on = None  # polled in vain: the loop sleeps now, and the gap fits the window
            self._slept_at = t
            return
        self.turns += 1
        yield_cpu()  # before the next turn: a process ready to run here runs first
        loop.call_soon(self._spin, loop)


POLL: Final = IdlePoll()
