"""The link from a serving process to the capture process (``server.capture_process``): its frames,
and the serving side's writer, compiled with the core (it runs once per captured exchange).

* A frame is the payload's size and the worker's count of dropped exchanges so far (``FRAME``),
  then the exchange (``encode``): its tuples (``capture.raw.to_tuple``) in ``marshal``'s format, or
  pickled where marshal refuses a value. ``frames`` takes the complete frames off a buffer.
* :class:`RemoteWriter` stands in a worker where the thread writer stands, and runs in the event
  loop: ``submit`` (once the response has ended) frames the raw exchange (about 20k instructions
  for a plain one; a 144-chunk stream in under half of pickle's time) and arms a timer; every
  ``interval`` one non-blocking ``sendmsg`` hands the frames to the kernel. No thread: a sender
  thread took the GIL from the event loop for up to the interpreter's switch interval (5 ms),
  which was the capture's whole cost at p99 (bench/README.md).
* When the capture process falls behind, the socket's buffer fills, the sends take less, the
  frames wait here (retried every ``interval``), and once ``queue_size`` exchanges wait ``submit``
  drops and counts (the ``oaishim_capture_dropped`` metric, a log line at 1, 2, 4, … drops): a
  record is never lost silently.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import marshal
import pickle
import socket
import struct
from collections import deque
from pathlib import Path
from typing import Any, Final

from oaishim.capture.raw import RawExchange, from_tuple, to_tuple
from oaishim.server.asgi import Scope
from oaishim.server.recorder import Recorder

log: Final = logging.getLogger("oaishim.capture")
FRAME: Final = struct.Struct("!IQ")  # the payload's size, the worker's drops so far; then the exchange (see encode)
MARSHAL_VERSION: Final = 2  # see encode
IOV_BATCH: Final = 256  # frames one sendmsg is given at most (the kernel allows 1,024)


class RemoteWriter:
    """The capture writer of a serving process: frames handed to the capture process's socket
    from the event loop, without blocking it (see the module)."""

    def __init__(self, address: Path, *, queue_size: int = 1024, interval: float = 0.02) -> None:
        self.address = address
        self.queue_size = queue_size  # exchanges held (framed, not yet all in the kernel) at most
        self.interval = interval
        self.dropped = 0
        self.sent = 0  # exchanges wholly handed to the kernel
        self._counted = 0  # the drop count the last frame carries
        self._queue: deque[tuple[bytes, int]] = deque()  # (frame, exchanges: 1, or 0 for a count) not all sent
        self._offset = 0  # how much of the first frame the socket has taken
        self.held = 0  # exchanges framed and not yet wholly handed to the kernel
        self._sock: socket.socket | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> RemoteWriter:
        self._sock = self._connect()  # here, so a gateway without its capture process fails at startup
        return self

    def submit(self, exchange: RawExchange) -> bool:
        """Frame one finished exchange; False (and counted) when ``queue_size`` are already held."""
        if self.held >= self.queue_size:
            self._drop(1, "capture queue full")
            self._arm()
            return False
        self._frame(encode(exchange), 1)
        self._arm()
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Send everything held, waiting at most ``timeout`` seconds, and close the connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush(wait=timeout)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def flush(self, wait: float | None = None) -> None:
        """Hand what is held to the kernel: what its buffer takes now, or (``wait``) all of it,
        waiting that many seconds at most. A drop count not yet sent goes in a frame of its own."""
        if self.dropped != self._counted:  # drops since the last frame: the capture process keeps the latest count
            self._frame(b"", 0)
        if not self._queue:
            return
        try:
            if self._sock is None:
                self._sock = self._connect()
            if wait is not None:
                self._sock.settimeout(wait)
            while self._queue and (self._send(self._sock) or wait is not None):
                pass  # until the kernel's buffer is full (or, waiting, until all is sent)
        except OSError as exc:  # a timeout, or the capture process gone
            self._lose(f"capture process unreachable ({exc.strerror or exc})")
        finally:
            if wait is not None and self._sock is not None:
                self._sock.setblocking(False)

    def _send(self, sock: socket.socket) -> bool:
        """One ``sendmsg`` of the first frames, never copied (a backlog of megabytes costs nothing
        per tick); True when the socket took all it was given."""
        queue = self._queue
        first = memoryview(queue[0][0])[self._offset :]
        buffers: list[bytes | memoryview] = [first]
        buffers += (frame for frame, _ in itertools.islice(queue, 1, IOV_BATCH))
        try:
            taken = sock.sendmsg(buffers)
        except BlockingIOError:
            return False
        whole = taken == sum(len(b) for b in buffers)
        taken += self._offset
        while queue and taken >= len(queue[0][0]):
            frame, count = queue.popleft()
            taken -= len(frame)
            self.sent += count
            self.held -= count
        self._offset = taken
        return whole

    def _frame(self, payload: bytes, count: int) -> None:
        """Queue one frame: an exchange's payload (``count`` 1), or none (0) to carry the drop count."""
        self._queue.append((FRAME.pack(len(payload), self.dropped) + payload, count))
        self.held += count
        self._counted = self.dropped

    def _arm(self) -> None:
        """Flush within ``interval`` (now, outside an event loop): one send for many exchanges."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.flush()
        if self._queue:  # the kernel's buffer was full (the capture process is behind): again later
            self._arm()

    def _lose(self, why: str) -> None:
        """The connection failed: what it held is counted as dropped; the next flush reconnects."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        lost, self.held = self.held, 0
        self._queue.clear()
        self._offset = 0
        self._counted = -1  # the next frame says how many were dropped
        self._drop(lost, why)

    def _drop(self, count: int, why: str) -> None:
        before, self.dropped = self.dropped, self.dropped + count
        if before.bit_length() != self.dropped.bit_length():  # 1, 2, 4, 8…: reported, but not per request
            log.warning("%s: %d exchange(s) dropped so far", why, self.dropped)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.address))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock


class RemoteRecording:
    """What the gateway records through when a capture process writes: ``begin`` as
    :class:`~oaishim.server.recording.Recording`'s."""

    def __init__(self, address: Path) -> None:
        self.writer = RemoteWriter(address)

    def start(self) -> None:
        self.writer.start()

    def close(self) -> None:
        self.writer.close()

    def begin(self, scope: Scope, wall: float = 0.0) -> Recorder:
        return Recorder(self.writer, scope, "gateway", wall)


def frames(buffer: bytearray) -> list[tuple[int, bytes]]:
    """The complete frames at the buffer's start (taken out of it): (the drop count, the payload)."""
    out: list[tuple[int, bytes]] = []
    start = 0
    while len(buffer) - start >= FRAME.size:
        size, dropped = FRAME.unpack_from(buffer, start)
        if len(buffer) - start - FRAME.size < size:
            break
        out.append((dropped, bytes(buffer[start + FRAME.size : start + FRAME.size + size])))
        start += FRAME.size + size
    del buffer[:start]
    return out


def encode(exchange: RawExchange) -> bytes:
    """One exchange as a frame's payload: its tuples in ``marshal``'s format (the serving and the
    capture process are the same interpreter), or pickled where marshal refuses a value (a subclass
    of ``str`` or ``int`` in a header, say). A pickle starts with its PROTO opcode, 0x80, which no
    marshalled value starts with. Marshal's format 2, the last without back-references: the later
    ones keep a table of every object written, a third of the time for a plain exchange, to share
    what recurs, which in an exchange is little."""
    form: tuple[Any, ...] = to_tuple(exchange)  # builtins only (capture.raw)
    try:
        return marshal.dumps(form, MARSHAL_VERSION)
    except ValueError:
        return pickle.dumps(form, pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> RawExchange:
    """One frame's exchange (from this gateway's own workers, through a 0700 folder)."""
    form = pickle.loads(payload) if payload[:1] == b"\x80" else marshal.loads(payload)
    return from_tuple(form)
