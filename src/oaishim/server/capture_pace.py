"""When the capture process builds its records, and at what CPU priority (``server.capture_process``).

Building a record (decoding, redaction, the checker, the JSON line, the index) costs the capture
process ten to forty times what handing the exchange over cost the serving process. On a machine
of two cores that work runs beside the serving process, the upstream and the clients, and took
the gateway's latency tail with it (c1 p99 1.3 → 3.3 ms) even in the idle scheduling class. So the
capture process reads every frame at once (the workers never wait on it) and keeps what it reads
in a :class:`Backlog`, and :class:`Pace` says when to build from it:

* while the gateway is **quiet** (no frame, and no worker's word that it is busy on the board of
  ``server.capture_busy``, for ``QUIET`` seconds, a few of the workers' ticks): build, one record
  at a time, looking at the sockets between records, so the next request finds the core free;
* while it is **busy**: a ``SHARE`` of the wall time (in slices of one record), which keeps up
  with a light load and leaves a heavy one alone;
* once the backlog is **behind** (half of its bound in bytes held, or its oldest exchange
  ``BACKLOG_AGE`` seconds old): build without pause, at nice 10 rather than in the idle class
  (:class:`Priority`), until it is down to a quarter of the bytes and half the age. With the whole
  bound held the capture process stops reading (:meth:`Pace.full`): it no longer keeps up even at
  full pace, its sockets fill, and the workers drop and count, as before.

The bound (``serve --capture-backlog-mb``) is by default a sixteenth of the memory the gateway may
use (:func:`backlog_bytes_for`: the machine's, or its cgroup's limit), 256 MiB at least and 2 GiB at
most. At 256 MiB for every machine, a burst of 30,000 plain exchanges (three seconds of wrk at c32
on two cores, 4 KiB each) was behind within the burst, and the records were built at full pace
beside it: 37 µs of the capture process's CPU a request while the load ran, against 9 with the
bound out of reach (bench/README.md, "The backlog round"). Memory the backlog held goes back to
the system once it is built (:func:`release_memory`): the allocator kept it, and the capture
process stayed at the burst's size (171 MB) for good.

A record is therefore late under load (at most ``BACKLOG_AGE`` seconds), never lost: on SIGTERM
the capture process builds all it holds before it exits. A ``kill -9`` of the capture process
loses what it held (the exchanges are not written to disk unredacted to keep them).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable

from oaishim.server.capture_feed import SEND_EVERY

log = logging.getLogger("oaishim.capture")
WRITER_NICE = 10  # a lower CPU priority than the serving processes'
MIB = 1 << 20
BACKLOG_MIN, BACKLOG_MAX = 256 * MIB, 2048 * MIB  # the default bound's range (backlog_bytes_for)
RELEASE_AFTER = 16 * MIB  # a backlog that held this much gives its memory back once it is built
# a frame's payload built in the idle class at most (under a millisecond of building here): a longer one is
# built at nice 10, as a long record slowed down in the idle class holds up the reading (Priority)
IDLE_BUILD_BYTES = 8 << 10


def backlog_bytes_for(memory: int | None) -> int:
    """The default bound of the backlog, in bytes, for ``memory`` bytes usable (None: unknown)."""
    if memory is None:
        return BACKLOG_MIN
    return max(BACKLOG_MIN, min(BACKLOG_MAX, memory // 16))


def release_memory() -> bool:
    """Hand the memory the allocator holds free back to the system (glibc's ``malloc_trim``);
    False where there is no such call (another C library)."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


class Backlog:
    """Exchanges received and not yet built, as the frames' payloads (serialised), oldest first."""

    def __init__(self) -> None:
        self._items: deque[tuple[float, bytes]] = deque()  # (when it arrived, payload)
        self.bytes = 0
        self.peak = 0  # the most bytes held since its memory was last given back (drained)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, at: float, payload: bytes) -> None:
        self._items.append((at, payload))
        self.bytes += len(payload)
        self.peak = max(self.peak, self.bytes)

    def take(self) -> bytes:
        _, payload = self._items.popleft()
        self.bytes -= len(payload)
        return payload

    def drained(self) -> bool:
        """Whether the backlog is empty after it held ``RELEASE_AFTER`` bytes or more (once: the
        peak starts again from nothing), the time to :func:`release_memory`."""
        if self._items or self.peak < RELEASE_AFTER:
            return False
        self.peak = 0
        return True

    def oldest(self) -> float:
        """When the oldest exchange held arrived (``inf`` when none is)."""
        return self._items[0][0] if self._items else math.inf


class Pace:
    """Whether the capture process may build a record now (see the module)."""

    # seconds without a frame: the gateway has nothing in hand. A busy worker hands its frames over
    # every SEND_EVERY, so a shorter gap is a worker between two hand-overs (with hand-overs every
    # 100 ms against a QUIET of 50, the gaps passed for quiet and records were built at full pace
    # beside the load: the capture process's CPU went from 14 to 100 µs a request, and the c1 p99
    # from 0.7 to 1.3-1.5 ms, bench/results/2026-12-06T0320-capture-parts-again.md)
    QUIET = 2.5 * SEND_EVERY
    SHARE = 0.05  # of the wall time, while the gateway is busy
    BURST = 0.002  # seconds of building ahead of the share
    BACKLOG_AGE = 120.0

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        backlog_bytes: int = BACKLOG_MIN,
        busy: Callable[[], float] | None = None,
    ) -> None:
        self.clock = clock
        self.backlog_bytes = backlog_bytes  # the bound (see the module)
        self.last_frame = -math.inf
        # when a worker last said it had exchanges in hand (``capture_busy.BusyBoard.last``): a worker
        # holds its frames while it is busy (``capture_feed``), so no frame says it is
        self.busy = busy
        self.tokens = self.BURST
        self._last = clock()
        self.behind = False
        self._metered = False  # the build now allowed is paid from the share

    def arrived(self) -> None:
        self.last_frame = self.clock()

    def may_build(self, backlog: Backlog) -> bool:
        self._metered = False
        if not backlog:
            self.behind = False
            return False
        now = self.clock()
        self.tokens = min(self.BURST, self.tokens + (now - self._last) * self.SHARE)
        self._last = now
        age = now - backlog.oldest()
        if backlog.bytes > self.backlog_bytes // 2 or age > self.BACKLOG_AGE:
            self.behind = True
        elif backlog.bytes <= self.backlog_bytes // 4 and age <= self.BACKLOG_AGE / 2:
            self.behind = False
        if self.behind or self._quiet_at(now):
            return True
        self._metered = self.tokens > 0
        return self._metered

    def quiet(self) -> bool:
        """Whether the gateway is quiet (no frame for ``QUIET`` seconds) and the backlog not
        behind: what is built now is built on time no serving process wants (the checker's
        budget is then not counted, ``server.recording.CheckBudget.free``)."""
        return not self.behind and self._quiet_at(self.clock())

    def _quiet_at(self, now: float) -> bool:
        return now - self._last_busy() >= self.QUIET

    def _last_busy(self) -> float:
        """When the gateway was last seen busy: the last frame, or a worker's word on the board."""
        return self.last_frame if self.busy is None else max(self.last_frame, self.busy())

    def full(self, backlog: Backlog) -> bool:
        """Whether to stop reading frames until some are built (the workers then hold and drop)."""
        return backlog.bytes >= self.backlog_bytes

    def built(self, seconds: float) -> None:
        """One record took ``seconds``: paid from the share when the gateway was busy."""
        if self._metered:
            self.tokens -= seconds

    def wait(self, backlog: Backlog) -> float:
        """Seconds until a build may be allowed, frames aside (how long to wait on the sockets)."""
        if not backlog:
            return 0.2
        if self.behind:
            return 0.0
        now = self.clock()
        quiet_in = self.QUIET - (now - self._last_busy())
        share_in = -self.tokens / self.SHARE if self.tokens <= 0 else 0.0
        return max(0.0, min(quiet_in, share_in, 0.2))


class Priority:
    """The writer's CPU priority, by what it does:

    * **building a record on time**: the idle class, so a serving process that wakes always takes
      the core at once (at nice 10, a burst of records held a core for milliseconds at a time: the
      c1 p99 went from 1.3 to 3 ms), and on one core (the last it may use; :func:`one_core`): left
      free, the kernel moved it to whichever core the serving chain had just left, where the chain's
      next wake-up found it (on two cores, capture on's c1 p97 came down by 50–150 µs, the p99 by
      50–170, bench/results/2026-12-05T2035-capture-one-core.md);
    * **reading frames, and waiting for them**: nice 10 in the normal class, on every core. In the
      idle class a core kept busy by a serving process left it about 0.3 % of its time, too little
      to read what the workers sent; their queues filled and dropped what followed (13,129 of 17,729
      Responses exchanges at c32 with the serving process on the writer's core; 2,816 in one round
      of ``bench/run``). Reading a frame costs a few microseconds: a small share of any core keeps up;
    * **building a long record** (a payload over ``IDLE_BUILD_BYTES``: a stream of some fifteen
      chunks or more through the gateway): nice 10 on every core, as reading. The process reads
      nothing while it builds, and in the idle class on a core kept busy at nice 0 a record takes
      about 360 times its CPU time: a 4,000-chunk stream's (44 ms) took 15.8 s, and the frames
      behind it waited until the workers' queues were full (1,992 of 2,000 exchanges dropped in
      ``test_workers``' case). A record up to the bound, so slowed, holds the frames for about a
      quarter of a second;
    * **behind, or stopping**: nice 10 on every core, reading and building alike, so a gateway that
      keeps every core busy does not starve it into dropping exchanges, and what is held is built
      before the exit.

    Where the idle class could not be left again (an unprivileged user whose RLIMIT_NICE does not
    allow nice 10, see sched(7)), it is never entered: everything runs at nice 10."""

    def __init__(self, set_idle: Callable[[bool], bool] | None = None, can_leave_idle: bool | None = None) -> None:
        self._set = set_idle or _Scheduler().set_idle
        self.can_idle = _can_leave_idle() if can_leave_idle is None else can_leave_idle
        self.idle = False  # in the idle class now
        self.busy = False  # behind or stopping
        self.switches = 0  # times it fell behind

    def build(self, size: int = 0) -> None:
        """A record is about to be built from a payload of ``size`` bytes: in the idle class, unless
        behind or stopping, or the payload is longer than ``IDLE_BUILD_BYTES`` (then at nice 10)."""
        if size > IDLE_BUILD_BYTES:
            self.read()
        elif not self.idle and not self.busy and self.can_idle and self._set(True):
            self.idle = True

    def read(self) -> None:
        """The writer is about to read or wait for frames: in the normal class."""
        if self.idle and self._set(False):
            self.idle = False

    def follow(self, behind: bool, stopping: bool = False) -> None:
        """Behind (or ``stopping``: what is held is built before the exit), everything runs at nice
        10 until it is not."""
        busy = behind or stopping
        if busy and not self.busy:
            self.switches += 1
            if behind:
                log.info("capture: the writer is behind; it takes its share of the cores until it catches up")
            else:
                log.info("capture: stopping; the writer builds what it holds at its share of the cores")
        self.busy = busy
        if busy:
            self.read()


def one_core(cpus: set[int]) -> set[int]:
    """The core the writer keeps to in the idle class: the last of those it may use (the first
    is where a machine's interrupts and timers tend to land)."""
    return {max(cpus)} if cpus else cpus


class _Scheduler:
    """What :class:`Priority` asks of the kernel: the scheduling class, and the cores."""

    def __init__(self) -> None:
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()  # given back when behind

    def set_idle(self, idle: bool) -> bool:
        policy = getattr(os, "SCHED_IDLE", None) if idle else getattr(os, "SCHED_OTHER", None)
        if policy is None:
            return False
        try:
            os.sched_setscheduler(0, policy, os.sched_param(0))
        except OSError:
            return False
        if self.cpus:
            with contextlib.suppress(OSError):  # (a core taken away since: the class is what matters)
                os.sched_setaffinity(0, one_core(self.cpus) if idle else self.cpus)
        return True


def _can_leave_idle() -> bool:
    """Whether this process may switch back from SCHED_IDLE to the normal class at nice 10."""
    if os.geteuid() == 0:
        return True
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return soft == resource.RLIM_INFINITY or soft >= 20 - WRITER_NICE
