"""The virtual keys' buckets shared by the worker processes of one gateway (``--workers N``
without ``--limits redis://…``).

Counted in each process's memory, N workers would admit N times a key's limit. These buckets
live in one anonymous shared mapping that the serving parent makes before it forks its workers
(a restarted worker is forked from the same parent, so it maps the same pages): per key, the
level and the time of the requests bucket and of the tokens bucket, four doubles. A decision
reads, updates and writes one key's slot under a POSIX record lock on a file made beside it: the
kernel drops such a lock when its process dies, so a worker killed while it holds it blocks nobody.
The clock is ``time.monotonic`` (CLOCK_MONOTONIC: one clock for every process on the machine).
The arithmetic is :class:`~oaishim.server.limits.LocalBuckets`' own.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from oaishim.server.config import VirtualKey
from oaishim.server.limits import Decision, LocalBuckets

SLOT = struct.Struct("=dddd")  # requests level, its time, tokens level, its time (NaN: never used)
NEVER = float("nan")


class SharedBuckets(LocalBuckets):
    def __init__(self, keys: tuple[VirtualKey, ...], lock_path: Path, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self._slots = {key.label: i for i, key in enumerate(keys)}
        self._map = mmap.mmap(-1, max(1, len(keys)) * SLOT.size)  # MAP_SHARED|MAP_ANONYMOUS: kept across fork
        for i in range(len(keys)):
            SLOT.pack_into(self._map, i * SLOT.size, NEVER, NEVER, NEVER, NEVER)
        self._lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)

    def run(self, key: VirtualKey, take: int, charge: int) -> Decision:
        index = self._slots.get(key.label)
        if index is None:  # not a configured key (cannot happen through the gateway): this process only
            return super().run(key, take, charge)
        offset = index * SLOT.size
        fcntl.lockf(self._lock, fcntl.LOCK_EX)
        try:
            r_level, r_ts, t_level, t_ts = SLOT.unpack_from(self._map, offset)
            self._levels.clear()
            if not math.isnan(r_ts):  # the bucket was used
                self._levels["r:" + key.label] = (r_level, r_ts)
            if not math.isnan(t_ts):
                self._levels["t:" + key.label] = (t_level, t_ts)
            decision = super().run(key, take, charge)
            r_level, r_ts = self._levels.get("r:" + key.label, (NEVER, NEVER))
            t_level, t_ts = self._levels.get("t:" + key.label, (NEVER, NEVER))
            SLOT.pack_into(self._map, offset, r_level, r_ts, t_level, t_ts)
            return decision
        finally:
            fcntl.lockf(self._lock, fcntl.LOCK_UN)
