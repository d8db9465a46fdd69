"""``serve --capture DIR`` off the serving process: one writer process for the whole gateway.

The record of an exchange is built, redacted, checked and written in a process of its own, so the
checker (milliseconds per streamed answer, ten times the recording) never takes the serving
process's GIL, and every worker's exchanges go to one folder, one numbering of files and one index.

* The serving parent binds a Unix socket in its private run folder, then forks the writer
  (:class:`CaptureProcess`); the writer accepts one connection per worker, a restarted worker too.
* In a worker, :class:`RemoteWriter` stands where the thread writer stands, and runs in the
  event loop: ``submit`` (once the response has ended) serialises the raw exchange as tuples with
  ``marshal`` into a frame (its size and the worker's drop count, then the payload; 1.1 µs for a
  plain exchange, 9 µs for a 144-chunk stream: half and a quarter of pickle's time) and arms a
  timer; every ``interval`` one non-blocking ``send`` hands the frames to the kernel. No thread:
  a sender thread took the GIL from the event loop for up to the interpreter's switch interval
  (5 ms), which was the capture's whole cost at p99 (bench/README.md).
* Frames carry the worker's count of dropped exchanges. When the writer falls behind, the socket's
  buffer fills, the sends take less, the frames wait in the worker (retried every ``interval``),
  and once ``queue_size`` exchanges wait ``submit`` drops and counts (the ``oaishim_capture_dropped``
  metric, a log line at 1, 2, 4, … drops): a record is never lost silently. The writer keeps the sum
  of every worker's drops in the index, as the thread writer does.
* The capture process reads every frame as it comes and holds the exchanges; it builds their
  records when the gateway is quiet, at a small share of the time while it is busy, and without
  pause once it is behind (``server.capture_pace``: a record is late under load, not lost). The
  checker's budget (``CheckBudget``) is a tenth of the usable cores (at most half a core) of the
  writer process, and never more than half of what the machine leaves idle. Past the budget,
  records are written unchecked (``findings: null``) rather than dropped; ``oaishim inspect``
  checks them.
* Shutdown: the workers stop first and flush their queues; the writer then reads every connection
  to its end, builds every record it holds, commits, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import marshal
import os
import pickle
import selectors
import signal
import socket
import struct
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from oaishim.capture.raw import RawExchange, from_tuple, to_tuple
from oaishim.server.asgi import Scope
from oaishim.server.capture_pace import WRITER_NICE, Backlog, Pace, Priority
from oaishim.server.config import Settings
from oaishim.server.knobs import IdleCores, usable_cores
from oaishim.server.recording import CheckBudget, Recorder, Recording, recording_for
from oaishim.server.workers import die_with_parent

log = logging.getLogger("oaishim.capture")
FRAME = struct.Struct("!IQ")  # the payload's size, the worker's drops so far; then the exchange (see encode)
# The checker's share of one core in the writer process: a tenth of the cores this gateway may use,
# at most half a core (on 2 cores the serving process needs the other one under load)
WRITER_CHECK_SHARE = min(0.5, 0.1 * usable_cores())
WRITER_CHECK_BURST = 0.05  # seconds of checking ahead of the share (a long burst is a core taken under load)
IOV_BATCH = 256  # frames one sendmsg is given at most (the kernel allows 1,024)
COMMIT_EVERY = 0.05  # seconds between the index's commits while records are being built
STOP_WAIT = 30.0  # seconds the writer waits for its connections to end once asked to stop


# -- the serving processes' side --------------------------------------------------------------------
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

    def begin(self, scope: Scope) -> Recorder:
        return Recorder(self.writer, scope, "gateway")


# -- the capture process ----------------------------------------------------------------------------
def writer_recording(settings: Settings) -> Recording:
    """The recording the capture process builds records with (the gateway's redaction and checks)."""
    budget = CheckBudget(share=WRITER_CHECK_SHARE, burst=WRITER_CHECK_BURST, idle=IdleCores())
    recording = recording_for(settings, budget)
    assert recording is not None, "the capture process runs only with --capture DIR"
    return recording


class CaptureProcess:
    """The writer process, from the serving parent: started before any worker, stopped after all."""

    def __init__(self, settings: Settings, address: Path) -> None:
        self.settings = settings
        self.address = address
        self.pid = 0

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.address.unlink()  # left by a capture process that died (this one restarts it)
        listener.bind(str(self.address))
        listener.listen(64)
        recording = writer_recording(self.settings)
        recording.writer.open_files()  # here: a folder that cannot be written fails before serving starts
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                # the parent killed outright: the workers die with it; what reached this process is written
                die_with_parent(signal.SIGTERM, parent)
                signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the supervisor blocks them for itself
                code = _writer_main(listener, recording)
            except BaseException:
                log.exception("the capture process failed")
            finally:
                os._exit(code)
        listener.close()
        recording.writer.finish()  # the parent's copies of the descriptors
        self.pid = pid

    def stop(self, timeout: float = STOP_WAIT + 5) -> int:
        """Ask the writer to finish (after the workers have gone) and wait; its exit status."""
        if not self.pid:
            return 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        log.error("the capture process did not finish within %g s; killing it", timeout)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.pid = 0
        return 1


def _writer_main(listener: socket.socket, recording: Recording) -> int:
    stopping = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent orders the stop
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with contextlib.suppress(OSError):
        os.nice(WRITER_NICE)  # the serving processes first when the cores are all busy
    priority, pace, backlog = Priority(), Pace(), Backlog()
    writer = recording.writer
    writer.open_index()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytearray] = {}
    drops: dict[int, int] = {}  # connection number: the last count its worker sent (kept after it ends)
    numbers: dict[socket.socket, int] = {}
    counter = itertools.count()
    deadline = None
    dirty = False  # built or counted since the last commit
    committed = time.monotonic()
    while True:
        for key, _ in selector.select(timeout=0 if stopping.is_set() and backlog else pace.wait(backlog)):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ)
                buffers[conn] = bytearray()
                numbers[conn] = next(counter)
                continue
            if pace.full(backlog):
                continue  # left in the socket: the workers hold what follows, and count what they drop
            data = sock.recv(1 << 20)
            if not data:
                selector.unregister(sock)
                sock.close()
                del buffers[sock], numbers[sock]
                continue
            pace.arrived()
            buffer = buffers[sock]
            buffer += data
            at = time.monotonic()
            number = numbers[sock]
            for dropped, payload in _frames(buffer):
                if drops.get(number, 0) != dropped:
                    drops[number] = dropped
                    dirty = True
                if payload:
                    backlog.add(at, payload)
        if stopping.is_set():  # everything held is written before the process ends
            deadline = deadline or time.monotonic() + STOP_WAIT
        if pace.may_build(backlog) or (backlog and deadline is not None):
            started = time.perf_counter()
            writer.write(decode(backlog.take()))
            pace.built(time.perf_counter() - started)
            dirty = True
        priority.follow(pace.behind or deadline is not None)
        now_s = time.monotonic()
        if dirty and (not backlog or now_s - committed >= COMMIT_EVERY):
            writer.dropped = sum(drops.values())
            writer.commit()
            dirty, committed = False, now_s
        if deadline is not None and ((not buffers and not backlog) or now_s > deadline):
            break
    if backlog:
        log.error("capture: %d exchange(s) not written: the stop's %g s ran out", len(backlog), STOP_WAIT)
    writer.dropped = sum(drops.values())
    writer.finish()
    log.info("capture: %d exchange(s) written, %d dropped, %d failed", writer.written, writer.dropped, writer.failed)
    return 0


def _frames(buffer: bytearray) -> list[tuple[int, bytes]]:
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
    marshalled value starts with."""
    form: tuple[Any, ...] = to_tuple(exchange)  # builtins only (capture.raw)
    try:
        return marshal.dumps(form)
    except ValueError:
        return pickle.dumps(form, pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> RawExchange:
    """One frame's exchange (from this gateway's own workers, through a 0700 folder)."""
    form = pickle.loads(payload) if payload[:1] == b"\x80" else marshal.loads(payload)
    return from_tuple(form)
