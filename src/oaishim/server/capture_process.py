"""``serve --capture DIR`` off the serving process: one writer process for the whole gateway.

The record of an exchange is built, redacted, checked and written in a process of its own, so the
checker (milliseconds per streamed answer, ten times the recording) never takes the serving
process's GIL, and every worker's exchanges go to one folder, one numbering of files and one index.

* The serving parent binds a Unix socket in its private run folder, then forks the writer
  (:class:`CaptureProcess`); the writer accepts one connection per worker, a restarted worker too.
* In a worker, ``server.capture_feed.RemoteWriter`` frames each finished exchange and hands the
  frames to the socket from the event loop, without a thread, once the worker is quiet (a busy one
  holds them, and says it is busy on a mapped board, ``server.capture_busy``); when this process
  falls behind, the frames wait there and, past its queue, are dropped and counted (never
  silently): the writer keeps the sum of every worker's drops in the index, as the thread writer
  does.
* The capture process reads every frame as it comes and holds the exchanges; it builds their
  records when the gateway is quiet, at a small share of the time while it is busy, and without
  pause once it is behind (``server.capture_pace``: a record is late under load, not lost). The
  checker's budget (``CheckBudget``) is a tenth of the usable cores (at most half a core) of the
  writer process, and never more than half of what the machine leaves idle, while the gateway is
  busy; while it is quiet every record is checked. Past the budget, records are written unchecked
  (``findings: null``) rather than dropped; ``oaishim inspect`` checks them.
* Shutdown: the workers stop first and flush their queues; the writer then reads every connection
  to its end, builds every record it holds, commits, and exits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import selectors
import signal
import socket
import threading
import time
from pathlib import Path

from oaishim.server.capture_busy import BusyBoard, board_path
from oaishim.server.capture_frame import decode, frames
from oaishim.server.capture_pace import WRITER_NICE, Backlog, Pace, Priority, backlog_bytes_for, release_memory
from oaishim.server.config import Settings
from oaishim.server.knobs import IdleCores, usable_cores, usable_memory
from oaishim.server.recording import CheckBudget, Recording, recording_for
from oaishim.server.workers import die_with_parent

log = logging.getLogger("oaishim.capture")
# The checker's share of one core in the writer process: a tenth of the cores this gateway may use,
# at most half a core (on 2 cores the serving process needs the other one under load)
WRITER_CHECK_SHARE = min(0.5, 0.1 * usable_cores())
WRITER_CHECK_BURST = 0.05  # seconds of checking ahead of the share (a long burst is a core taken under load)
COMMIT_EVERY = 0.05  # seconds between the index's commits while records are being built
STOP_WAIT = 30.0  # seconds the writer waits for its connections to end once asked to stop


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
        self.backlog = backlog_bytes(settings)  # its bound, of which each worker has a share (capture_feed)
        self.pid = 0

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.address.unlink()  # left by a capture process that died (this one restarts it)
        listener.bind(str(self.address))
        listener.listen(64)
        board = BusyBoard(board_path(self.address), create=True)  # before the workers, which map it
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
                code = _writer_main(listener, recording, self.backlog, board)
            except BaseException:
                log.exception("the capture process failed")
            finally:
                os._exit(code)
        listener.close()
        board.close()
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


def backlog_bytes(settings: Settings) -> int:
    """The bound of the capture process's backlog: the setting, else one for this machine's memory."""
    return settings.capture_backlog_bytes or backlog_bytes_for(usable_memory())


def _writer_main(listener: socket.socket, recording: Recording, bound: int, board: BusyBoard) -> int:
    stopping = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent orders the stop
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with contextlib.suppress(OSError):
        os.nice(WRITER_NICE)  # the serving processes first when the cores are all busy
    priority, pace, backlog = Priority(), Pace(backlog_bytes=bound, busy=board.last), Backlog()
    log.info("capture: up to %d bytes of exchanges held before their records are built", bound)
    writer, budget = recording.writer, recording.budget
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
        priority.read()  # (from the idle class a busy core would leave it too little time to read: capture_pace)
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
            for dropped, payload in frames(buffer):
                if drops.get(number, 0) != dropped:
                    drops[number] = dropped
                    dirty = True
                if payload:
                    backlog.add(at, payload)
        if stopping.is_set():  # everything held is written before the process ends
            deadline = deadline or time.monotonic() + STOP_WAIT
        if pace.may_build(backlog) or (backlog and deadline is not None):
            # quiet: the record is checked whatever the budget (not while stopping: the stop's
            # wait is for writing what is held, not for checking it)
            budget.free = deadline is None and pace.quiet()
            payload = backlog.take()
            priority.build(len(payload))
            started = time.perf_counter()
            writer.write(decode(payload))
            pace.built(time.perf_counter() - started)
            dirty = True
        if backlog.drained():
            release_memory()  # what held the burst goes back to the system (capture_pace)
        priority.follow(pace.behind, stopping=deadline is not None)
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
