"""``serve --capture DIR`` off the serving process: one writer process for the whole gateway.

The record of an exchange is built, redacted, checked and written in a process of its own, so the
checker (milliseconds per streamed answer, ten times the recording) never takes the serving
process's GIL, and every worker's exchanges go to one folder, one numbering of files and one index.

* The serving parent binds a Unix socket in its private run folder, then forks the writer
  (:class:`CaptureProcess`); the writer accepts one connection per worker, a restarted worker too.
* In a worker, :class:`RemoteWriter` stands where the thread writer stands: ``submit`` appends the
  raw exchange to a bounded deque and returns (no pickling, no system call, no wake-up on the
  request path). A thread wakes every ``interval``, pickles what is queued (one exchange at a
  time, handing the GIL back between them) and writes length-prefixed frames to the socket.
* Frames carry the worker's count of dropped exchanges. When the writer falls behind, the socket's
  buffer fills, the thread's writes wait, the deque fills and ``submit`` drops and counts (the
  ``oaishim_capture_dropped`` metric, a log line at 1, 2, 4, … drops): a record is never lost
  silently. The writer keeps the sum of every worker's drops in the index, as the thread writer does.
* The checker's budget (``CheckBudget``) is a tenth of the usable cores (at most half a core) of the
  writer process, which runs at a lower priority than the serving ones: past it, records are
  written unchecked (``findings: null``) rather than dropped; ``oaishim inspect`` checks them.
* Shutdown: the workers stop first and flush their queues; the writer then reads every connection
  to its end, commits, and exits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import selectors
import signal
import socket
import struct
import threading
import time
from pathlib import Path

from oaishim.capture.raw import RawExchange, from_tuple, to_tuple
from oaishim.capture.store import Drained
from oaishim.server.asgi import Scope
from oaishim.server.config import Settings
from oaishim.server.knobs import usable_cores
from oaishim.server.recording import CheckBudget, Recorder, Recording, recording_for
from oaishim.server.workers import die_with_parent

log = logging.getLogger("oaishim.capture")
FRAME = struct.Struct("!I")
# The checker's share of one core in the writer process: a tenth of the cores this gateway may use,
# at most half a core (on 2 cores the serving process needs the other one under load)
WRITER_CHECK_SHARE = min(0.5, 0.1 * usable_cores())
WRITER_NICE = 10  # a lower CPU priority than the serving processes'
STOP_WAIT = 30.0  # seconds the writer waits for its connections to end once asked to stop


# -- the serving processes' side --------------------------------------------------------------------
class RemoteWriter(Drained):
    """The capture writer of a serving process: a bounded queue, drained by a thread into the
    capture process's socket."""

    def __init__(self, address: Path, *, queue_size: int = 1024, interval: float = 0.02) -> None:
        super().__init__(queue_size, interval)
        self.address = address
        self.sent = 0
        self._sent_dropped = 0
        self._sock: socket.socket | None = None

    def start(self) -> RemoteWriter:
        self._sock = self._connect()  # here, so a gateway without its capture process fails at startup
        self._start_thread("oaishim-capture-sender")
        return self

    def close(self, timeout: float = 30.0) -> None:
        self._stop_thread(timeout, "capture: the queue was not sent within %g s")

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.address))
        except OSError:
            sock.close()
            raise
        return sock

    def _run(self) -> None:
        try:
            while True:
                stopping = self._stop.wait(self.interval)
                self._send_queued()
                if stopping:
                    return
        finally:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def _send_queued(self) -> None:
        frames: list[bytes] = []
        count = len(self.queue)
        for _ in range(count):
            payload = pickle.dumps((self.dropped, to_tuple(self.queue.popleft())), pickle.HIGHEST_PROTOCOL)
            frames += (FRAME.pack(len(payload)), payload)
            time.sleep(0)  # hand the GIL to the event loop if it waits, between exchanges
        if not frames and self.dropped == self._sent_dropped:
            return
        if not frames:  # only drops to report
            payload = pickle.dumps((self.dropped, None), pickle.HIGHEST_PROTOCOL)
            frames = [FRAME.pack(len(payload)), payload]
        try:
            if self._sock is None:
                self._sock = self._connect()
            self._sock.sendall(b"".join(frames))
        except OSError as exc:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._drop(count, f"capture process unreachable ({exc.strerror or exc})")
            return
        self.sent += count
        self._sent_dropped = self.dropped


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
    recording = recording_for(settings, CheckBudget(share=WRITER_CHECK_SHARE))
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
    writer = recording.writer
    writer.open_index()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytearray] = {}
    drops: dict[int, int] = {}  # connection number: the last count its worker sent (kept after it ends)
    numbers: dict[socket.socket, int] = {}
    counter = itertools.count()
    deadline = None
    while True:
        wrote = False
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ)
                buffers[conn] = bytearray()
                numbers[conn] = next(counter)
                continue
            data = sock.recv(1 << 20)
            if not data:
                selector.unregister(sock)
                sock.close()
                del buffers[sock], numbers[sock]
                continue
            buffer = buffers[sock]
            buffer += data
            for dropped, exchange in _frames(buffer):
                drops[numbers[sock]] = dropped
                if exchange is not None:
                    writer.write(exchange)
                wrote = True
        if wrote:
            writer.dropped = sum(drops.values())
            writer.commit()
        if stopping.is_set():
            deadline = deadline or time.monotonic() + STOP_WAIT
            if not buffers or time.monotonic() > deadline:
                break
    writer.dropped = sum(drops.values())
    writer.finish()
    log.info("capture: %d exchange(s) written, %d dropped, %d failed", writer.written, writer.dropped, writer.failed)
    return 0


def _frames(buffer: bytearray) -> list[tuple[int, RawExchange | None]]:
    """The complete frames at the buffer's start (taken out of it)."""
    out: list[tuple[int, RawExchange | None]] = []
    start = 0
    while len(buffer) - start >= FRAME.size:
        (size,) = FRAME.unpack_from(buffer, start)
        if len(buffer) - start - FRAME.size < size:
            break
        body = bytes(buffer[start + FRAME.size : start + FRAME.size + size])
        dropped, exchange = pickle.loads(body)  # from this gateway's own workers, through a 0700 folder
        out.append((dropped, from_tuple(exchange) if exchange is not None else None))
        start += FRAME.size + size
    del buffer[:start]
    return out
