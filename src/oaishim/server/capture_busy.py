"""When a serving process last had exchanges in hand: the one thing the capture process must know
while the workers hold their frames (``server.capture_feed``, the hold), read without a wake-up.

A busy worker sends the capture process nothing, so no frame tells it the gateway is busy, and
what it held from before (a burst handed over at its end) it would build at full pace beside the
next load (its CPU a request at c1 went from 11–16 to 70–150 µs, ``bench/capture_c32.py``). A
frame a tick to say so would wake it fifty times a second a worker: the wake-ups are what capture's
c1 tail was made of. So the workers write the time into eight bytes of a file beside the capture
socket, mapped into every process (a store into memory, no system call), and the capture process
reads them when it decides whether to build (``capture_pace.Pace``).

The time is ``time.monotonic_ns()``, one clock for every process of the machine. Workers write over
one another: any of their times is recent, which is all the reader asks.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path
from typing import Final

SIZE: Final = 8  # one little-endian signed 64-bit count of nanoseconds


def board_path(address: Path) -> Path:
    """The board's file, beside the capture process's socket ``address``."""
    return address.with_name(address.name + ".busy")


class BusyBoard:
    """The mapped board (see the module); ``create``: made (zeroed) by the serving parent, before
    the capture process and the workers start; else opened, and :meth:`open` gives None where it
    is not there (a writer tried alone, as the tests do)."""

    def __init__(self, path: Path, create: bool = False) -> None:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)  # (the mapping keeps the file)

    @classmethod
    def open(cls, path: Path) -> BusyBoard | None:
        with contextlib.suppress(OSError, ValueError):  # none there, or not the board's size
            return cls(path)
        return None

    def mark(self, ns: int) -> None:
        """A worker had exchanges in hand at ``ns`` (``time.monotonic_ns()``)."""
        self._map[:SIZE] = ns.to_bytes(SIZE, "little", signed=True)

    def last(self) -> float:
        """When a worker last said it was busy, in ``time.monotonic()``'s seconds (0.0: never)."""
        return int.from_bytes(self._map[:SIZE], "little", signed=True) / 1e9

    def close(self) -> None:
        self._map.close()
