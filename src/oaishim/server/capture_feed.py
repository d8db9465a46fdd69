"""The link from a serving process to the capture process (``server.capture_process``): the
serving side's writer, compiled with the core (it runs once per captured exchange). The frames it
sends are ``server.capture_frame``'s.

* :class:`RemoteWriter` stands in a worker where the thread writer stands, and runs in the event
  loop: ``submit_plain`` (once a plain exchange has ended) frames the recorder's fields
  (``capture_frame.plain_frame``), ``submit`` (an exchange of any other shape) its parts. Either
  arms a timer; every ``interval`` non-blocking ``sendmsg`` calls gather the frames into the
  kernel. No thread: a sender thread took the GIL from the event loop for up to the interpreter's
  switch interval (5 ms), which was the capture's whole cost at p99 (bench/README.md).
* A tick sends until the socket's buffer is full; what is left goes as soon as the capture process
  has read some (the event loop watches the socket for room), not a tick later: sent once a tick,
  frames crossed at one socket buffer per ``interval`` at most (the kernel's default, 208 KiB,
  every 20 ms: about 2,900 plain exchanges a second), and a worker serving more dropped the rest.
  The socket's send buffer is also asked for ``send_buffer`` bytes (the kernel caps it at
  ``net.core.wmem_max``).
* When the capture process falls behind, the socket's buffer stays full, the frames wait here, and
  once ``queue_size`` exchanges (262,144) or ``queue_bytes`` bytes of frames (the worker's share,
  :func:`worker_bounds`) wait, a submit drops and counts (the ``oaishim_capture_dropped`` metric, a
  log line at 1, 2, 4, … drops): a record is never lost silently. The capture process reads
  nothing while it builds a record, and one built in the idle class on a core kept busy takes up
  to a few hundred milliseconds
  (``server.capture_pace``); one worker on a 2-vCPU host serves about 30,000 plain exchanges a
  second, which a queue of 1,024 held for 35 ms: bench runs dropped hundreds to thousands an
  episode (bench/README.md, "The holding round"). The bytes bound keeps long streams' frames (tens
  to hundreds of KB each) from holding that many.
* **A busy worker holds its frames** (``hold_bytes``, ``hold_age``): a tick that finds exchanges
  framed since the one before sends nothing and looks again a tick later; the frames go at the
  first tick after one with none (the worker has been quiet for ``interval``), or once they
  reach ``hold_bytes`` or have been held ``hold_age`` seconds. Handed over while the load ran, the
  frames woke the capture process to read them every tick, and on two vCPUs that reading, beside
  the request's chain, was capture's whole c1 tail (p99 0.58 ms against 0.29 off; with nothing
  read during the load, 0.25 against 0.27: bench/README.md, "The frame-writer round"). The memory
  a burst's frames take is then the worker's for the burst, not the capture process's: the bounds
  are the worker's share of ``--capture-backlog-mb`` (:func:`worker_bounds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
from pathlib import Path
from typing import Final

from librt.strings import BytesWriter

from oaishim.capture.raw import PlainExchange, RawExchange
from oaishim.server.asgi import Scope
from oaishim.server.capture_busy import BusyBoard, board_path
from oaishim.server.capture_frame import FRAME, encode, plain_frame
from oaishim.server.recorder import Recorder

log: Final = logging.getLogger("oaishim.capture")
IOV_BATCH: Final = 256  # buffers one sendmsg is given at most, one or two a frame (the kernel allows 1,024)
QUEUE_SIZE: Final = 1 << 18  # exchanges a worker holds for the capture process at most (see the module)
QUEUE_BYTES: Final = 32 << 20  # and bytes of their frames (the least a worker's share of the backlog bound gives)
SEND_EVERY: Final = 0.02  # seconds between a worker's ticks (the capture process's pace reads the gaps)
HOLD_AGE: Final = 10.0  # seconds a busy worker holds its frames at most before it hands them over


def worker_bounds(backlog_bytes: int, workers: int) -> tuple[int, int]:
    """A worker's ``queue_bytes`` (past it, exchanges are dropped) and ``hold_bytes`` (past it, a busy
    worker hands its frames over): its share of the capture backlog's bound, ``QUEUE_BYTES`` at
    least, and half of that. Every worker holding what it may hold is then at most the bytes the
    capture process may hold: a burst's frames take the memory once, in one process or the other."""
    queue = max(QUEUE_BYTES, backlog_bytes // max(1, workers))
    return queue, queue // 2


class RemoteWriter:
    """The capture writer of a serving process: frames handed to the capture process's socket
    from the event loop, without blocking it (see the module)."""

    def __init__(
        self,
        address: Path,
        *,
        queue_size: int = QUEUE_SIZE,
        queue_bytes: int = QUEUE_BYTES,
        interval: float = SEND_EVERY,
        send_buffer: int = 4 << 20,
        hold_bytes: int = QUEUE_BYTES // 2,
        hold_age: float = HOLD_AGE,
    ) -> None:
        self.address = address
        self.queue_size = queue_size  # exchanges held (framed, not yet all in the kernel) at most
        self.queue_bytes = queue_bytes  # bytes of frames held at most (one frame is taken whatever its size)
        self.interval = interval
        self.hold_bytes = hold_bytes  # a busy worker's frames go once they are this many bytes
        self.hold_age = hold_age  # or have been held this many seconds (0: frames are never held)
        self.busy = False  # an exchange was framed since the last tick
        self._holding = math.inf  # when the frames held now began to be held (inf: none are)
        self._board: BusyBoard | None = None  # where the capture process reads that this worker is busy
        self.send_buffer = send_buffer  # bytes asked of the kernel for the socket's send buffer
        self.dropped = 0
        self.sent = 0  # exchanges wholly handed to the kernel
        self._counted = 0  # the drop count the last frame carries
        # The frames not all sent, as buffers from ``_first`` on: a frame's head, then its payload
        # (none for a count's frame); ``_counts``, the exchanges each buffer's end completes (1 for
        # an exchange's payload, else 0). Two lists and an index: no tuple a buffer, and no deque
        # method (called as Python, once compiled) a buffer sent.
        self._buffers: list[bytes] = []
        self._counts: list[int] = []
        self._first = 0
        self._offset = 0  # how much of the first buffer the socket has taken
        self.held = 0  # exchanges framed and not yet wholly handed to the kernel
        self.held_bytes = 0  # the bytes of the buffers not yet wholly handed to the kernel
        self._framing = BytesWriter()  # plain frames are written here, its room kept from one to the next
        self._sock: socket.socket | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._watched: asyncio.AbstractEventLoop | None = None  # the loop watching the socket for room

    def start(self) -> RemoteWriter:
        self._sock = self._connect()  # here, so a gateway without its capture process fails at startup
        self._board = BusyBoard.open(board_path(self.address))
        return self

    def submit(self, exchange: RawExchange) -> bool:
        """Frame one finished exchange; False (and counted) when ``queue_size`` are already held, or
        its frame would take the bytes held past ``queue_bytes`` (taken when nothing is held)."""
        payload = self._admit(encode(exchange) if self.held < self.queue_size else None)
        if payload is None:
            return False
        self._frame(payload, 1)
        self.busy = True
        self._arm()
        return True

    def submit_plain(self, plain: PlainExchange) -> bool:
        """Frame one finished plain exchange from its fields (no parts made, nothing marshalled),
        as ``submit`` frames any other."""
        if self.held >= self.queue_size:
            self._admit(None)
            return False
        try:
            made = plain_frame(plain, self.dropped, self._framing)
        except ValueError:  # too large for a plain frame's lengths
            return self.submit(plain.exchange())
        frame = self._admit(made)
        if frame is None:
            return False
        self._queue(frame, 1)  # (a plain frame carries its own head)
        self.busy = True
        self._arm()
        return True

    def _admit(self, data: bytes | None) -> bytes | None:
        """``data``, an exchange framed (None: ``queue_size`` are held), if it may be queued; else
        None, the exchange dropped and counted."""
        if data is None or (self.held and self.held_bytes + len(data) > self.queue_bytes):
            self._drop(1, "capture queue full")
            self._arm()
            return None
        return data

    def close(self, timeout: float = 30.0) -> None:
        """Send everything held, waiting at most ``timeout`` seconds, and close the connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unwatch()
        self.flush(wait=timeout)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._board is not None:
            self._board.close()
            self._board = None

    def flush(self, wait: float | None = None) -> None:
        """Hand what is held to the kernel: what its buffer takes now, or (``wait``) all of it,
        waiting that many seconds at most. A drop count not yet sent goes in a frame of its own."""
        if self.dropped != self._counted:  # drops since the last frame: the capture process keeps the latest count
            self._frame(b"", 0)
        if self._first == len(self._buffers):
            return
        try:
            if self._sock is None:
                self._sock = self._connect()
            if wait is not None:
                self._sock.settimeout(wait)
            while self._first < len(self._buffers) and (self._send(self._sock) or wait is not None):
                pass  # until the kernel's buffer is full (or, waiting, until all is sent)
        except OSError as exc:  # a timeout, or the capture process gone
            self._lose(f"capture process unreachable ({exc.strerror or exc})")
        finally:
            if wait is not None and self._sock is not None:
                self._sock.setblocking(False)

    def _send(self, sock: socket.socket) -> bool:
        """One ``sendmsg`` of the first buffers, never copied (a backlog of megabytes costs nothing
        per tick); True when the socket took all it was given."""
        held, counts, first = self._buffers, self._counts, self._first
        end = min(len(held), first + IOV_BATCH)
        buffers: list[bytes | memoryview] = [memoryview(held[first])[self._offset :]]
        size = len(held[first]) - self._offset
        for i in range(first + 1, end):
            buffers.append(held[i])
            size += len(held[i])
        try:
            taken = sock.sendmsg(buffers)
        except BlockingIOError:
            return False
        whole = taken == size
        taken += self._offset
        while first < end and taken >= len(held[first]):
            taken -= len(held[first])
            self.held_bytes -= len(held[first])
            self.sent += counts[first]
            self.held -= counts[first]
            first += 1
        self._offset = taken
        if first == len(held):  # all sent
            held.clear()
            counts.clear()
            first = 0
        elif first > 4 * IOV_BATCH:  # a backlog: what was sent is let go
            del held[:first], counts[:first]
            first = 0
        self._first = first
        return whole

    def _frame(self, payload: bytes, count: int) -> None:
        """Queue one frame: an exchange's payload (``count`` 1), or none (0) to carry the drop count.
        Its head and payload are queued as two buffers, which ``sendmsg`` gathers: joined, each
        exchange's payload was copied once more."""
        self._queue(FRAME.pack(len(payload), self.dropped), 0)
        if payload:
            self._queue(payload, count)

    def _queue(self, buffer: bytes, count: int) -> None:
        """Hold one buffer for the socket: ``count``, the exchanges its end completes (0 for a
        frame's head); the frame it ends carries the drop count as it is now."""
        self._buffers.append(buffer)
        self._counts.append(count)
        self.held += count
        self.held_bytes += len(buffer)
        self._counted = self.dropped

    def _arm(self) -> None:
        """Flush within ``interval`` (now, outside an event loop): one send for many exchanges."""
        if self._timer is not None or self._watched is not None:
            return  # (watched: what is framed goes with the next room the socket has)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self._hold():
            self._arm()  # held one more tick
            return
        self.flush()
        if self._first < len(self._buffers):
            self._watch()  # the kernel's buffer is full: the rest goes once the capture process reads

    def _hold(self) -> bool:
        """Whether this tick keeps the frames (see the module): exchanges were framed since the tick
        before, and the frames held are under ``hold_bytes`` and ``hold_age``. Never while the
        socket is watched (what is framed then goes with its room), nor with a drop count to tell."""
        busy, self.busy = self.busy, False
        if not busy:
            self._holding = math.inf
            return False
        ns = time.monotonic_ns()
        if self._board is not None:
            self._board.mark(ns)  # (held or not: the capture process builds less while it is busy)
        if self._watched is None and self.held_bytes < self.hold_bytes and self.dropped == self._counted:
            now = ns / 1e9
            if self._holding == math.inf:
                self._holding = now
            if now - self._holding < self.hold_age:
                return True
        self._holding = math.inf
        return False

    def _watch(self) -> None:
        """Send again as soon as the socket has room (a tick later if it cannot be watched)."""
        if self._sock is None:  # (a lost connection let go of what it held: nothing waits)
            return
        try:
            loop = asyncio.get_running_loop()
            loop.add_writer(self._sock.fileno(), self._room)
        except (RuntimeError, NotImplementedError, ValueError, OSError):
            self._arm()
            return
        self._watched = loop

    def _room(self) -> None:
        self.flush()
        if self._first == len(self._buffers) or self._sock is None:
            self._unwatch()  # all sent (or the connection lost: the next submit reconnects)

    def _unwatch(self) -> None:
        loop, self._watched = self._watched, None
        if loop is not None and self._sock is not None:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                loop.remove_writer(self._sock.fileno())

    def _lose(self, why: str) -> None:
        """The connection failed: what it held is counted as dropped; the next flush reconnects."""
        self._unwatch()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        lost, self.held, self.held_bytes = self.held, 0, 0
        self._buffers.clear()
        self._counts.clear()
        self._first = self._offset = 0
        self._counted = -1  # the next frame says how many were dropped
        self._drop(lost, why)

    def _drop(self, count: int, why: str) -> None:
        before, self.dropped = self.dropped, self.dropped + count
        if before.bit_length() != self.dropped.bit_length():  # 1, 2, 4, 8…: reported, but not per request
            log.warning("%s: %d exchange(s) dropped so far", why, self.dropped)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(OSError):  # (a smaller buffer only means more, smaller sends)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            sock.connect(str(self.address))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock


class RemoteRecording:
    """What the gateway records through when a capture process writes: ``begin`` as
    :class:`~oaishim.server.recording.Recording`'s."""

    def __init__(self, address: Path, backlog_bytes: int = 0, workers: int = 1) -> None:
        """``backlog_bytes``: the capture process's bound, of which this worker has its share
        (:func:`worker_bounds`; 0: the least)."""
        queue_bytes, hold_bytes = worker_bounds(backlog_bytes, workers)
        self.writer = RemoteWriter(address, queue_bytes=queue_bytes, hold_bytes=hold_bytes)

    def start(self) -> None:
        self.writer.start()

    def close(self) -> None:
        self.writer.close()

    def begin(self, scope: Scope, wall: float = 0.0) -> Recorder:
        return Recorder(self.writer, scope, "gateway", wall)
