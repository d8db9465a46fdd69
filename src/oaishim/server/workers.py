"""Serving on every core: ``oaishim serve --workers N``, and the capture process beside them.

A pre-fork parent: it builds what the processes share (``server.cluster``), starts the capture
process when ``--capture`` is on, then forks N workers. Each worker builds its own gateway (its own
upstream connection pool, its own profile detection) and serves on its own listening socket bound
with ``SO_REUSEPORT`` to the one address (Linux: the kernel spreads connections over the workers'
accept queues, so a busy worker is not woken for every connection); elsewhere the workers accept
from one socket the parent bound. The parent binds the address first, so a port already taken
fails before anything is forked, and ``--port 0`` gets one port for every worker.

Signals: SIGTERM or SIGINT to the parent stops every worker (each ends the requests it is serving:
server.serving), then the capture process (which writes what the workers flushed to it); a second
signal kills the workers at once. A worker that dies is restarted; one that dies within
``RESTART_WINDOW`` seconds of its start (it could not start: a store it cannot open, say) stops
the whole server with exit status 1 rather than restarting in a loop. The capture process is
restarted the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

log = logging.getLogger("oaishim.server")
RESTART_WINDOW = 2.0  # seconds: a process that dies sooner after its start is not restarted
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def die_with_parent(sig: int, parent: int) -> None:
    """In a child: get ``sig`` when the parent dies, even by ``kill -9`` (Linux), so no worker is
    left serving, and no capture process left running, without the parent that watched it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)


def bind(host: str, port: int, *, reuse_port: bool = REUSE_PORT) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening yet)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class Listener:
    """The address the workers serve: the parent's bound socket reserves it; each worker gets a
    socket of its own on it (``SO_REUSEPORT``) or the parent's (elsewhere)."""

    def __init__(self, host: str, port: int, backlog: int = 2048) -> None:
        self.host, self.backlog = host, backlog
        self.parent = bind(host, port)
        self.port: int = self.parent.getsockname()[1]
        if not REUSE_PORT:
            self.parent.listen(backlog)

    def for_worker(self) -> socket.socket:
        if not REUSE_PORT:
            return self.parent
        sock = bind(self.host, self.port)
        sock.listen(self.backlog)
        return sock

    def close(self) -> None:
        self.parent.close()


class Child:
    """A process the supervisor forks and watches: its ``main`` returns the exit status."""

    def __init__(self, name: str, main: Callable[[], int], pid: int = 0) -> None:
        self.name, self.main = name, main
        self.pid = pid
        self.started = 0.0

    def start(self) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                die_with_parent(signal.SIGKILL, parent)  # a worker killed with its parent, as one process would be
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                # until the server takes over the signals: a worker
                # that is not serving has nothing to finish
                for sig in STOP_SIGNALS:
                    signal.signal(sig, lambda *_: os._exit(0))
                code = self.main()
            except BaseException:
                log.exception("%s failed", self.name)
            finally:
                os._exit(code)
        self.pid, self.started = pid, time.monotonic()

    def reap(self) -> int | None:
        """Its exit status once it ended (and was reaped), else None."""
        if not self.pid:
            return None
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return 1
        return os.waitstatus_to_exitcode(status) if done else None

    def signal(self, sig: int) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class Supervisor:
    """Forks ``count`` workers and keeps them running until a stop signal (see the module's doc)."""

    def __init__(
        self,
        count: int,
        worker: Callable[[], int],
        *,
        helper: tuple[Callable[[], int], Callable[[], int]] | None = None,
    ) -> None:
        """``helper``: (start, stop) of a process started before the workers and stopped after them
        (the capture process); ``start`` returns its pid."""
        self.workers = [Child(f"worker {i}", worker) for i in range(count)]
        self.helper = helper
        self.helper_pid = 0

    def run(self) -> int:
        watched = {signal.SIGCHLD, *STOP_SIGNALS}
        signal.pthread_sigmask(signal.SIG_BLOCK, watched)
        try:
            if self.helper is not None:
                self.helper_pid = self.helper[0]()
                helper_started = time.monotonic()
            for child in self.workers:
                child.start()
            log.info("serving with %d worker processes: %s", len(self.workers), [c.pid for c in self.workers])
            while True:
                info = signal.sigtimedwait(watched, 1.0)
                if info is not None and info.si_signo in STOP_SIGNALS:
                    log.info("stopping the workers (signal %d)", info.si_signo)
                    return self._stop(0, watched)
                for child in self.workers:
                    code = child.reap()
                    if code is None:
                        continue
                    if time.monotonic() - child.started < RESTART_WINDOW:
                        log.error(
                            "%s (pid %d) exited with %d right after its start; stopping", child.name, child.pid, code
                        )
                        child.pid = 0
                        return self._stop(1, watched)
                    log.warning("%s (pid %d) exited with %d; restarting it", child.name, child.pid, code)
                    child.start()
                if self.helper is not None and self._helper_ended():
                    if time.monotonic() - helper_started < RESTART_WINDOW:
                        log.error("the capture process ended right after its start; stopping")
                        return self._stop(1, watched)
                    log.warning("the capture process ended; restarting it")
                    self.helper_pid = self.helper[0]()
                    helper_started = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)

    def _helper_ended(self) -> bool:
        try:
            done, _ = os.waitpid(self.helper_pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return bool(done)

    def _stop(self, code: int, watched: set[signal.Signals]) -> int:
        for child in self.workers:
            child.signal(signal.SIGTERM)
        running = [c for c in self.workers if c.pid]
        while running:
            info = signal.sigtimedwait(watched, 0.2)
            if info is not None and info.si_signo in STOP_SIGNALS:
                log.warning("second stop signal: killing the workers")
                for child in running:
                    child.signal(signal.SIGKILL)
            still = []
            for child in running:
                status = child.reap()
                if status is None:
                    still.append(child)
                elif status not in (0, -signal.SIGTERM, -signal.SIGINT):
                    log.warning("%s (pid %d) exited with %d", child.name, child.pid, status)
            running = still
        if self.helper is not None and self.helper_pid and self.helper[1]() != 0:
            code = code or 1
        return code
