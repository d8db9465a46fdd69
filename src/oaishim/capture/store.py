"""The capture store's writer: a bounded queue and one thread, off the request path.

The request path only calls :meth:`CaptureWriter.submit`, which appends to a deque and never
blocks or wakes anything: when the queue is full the exchange is dropped and counted
(``dropped``, logged, and kept in the index's ``meta`` table so ``oaishim inspect`` reports it).
The thread wakes every ``interval`` seconds (50 ms) and drains the queue — waking it per exchange
would hand the GIL back and forth on every request, which costs the event loop more than the
writing itself. For each exchange it builds the record (decoding, redaction, the checker), appends
it to the current JSONL file with one ``os.write`` (so it is in the kernel, and survives the
process, as soon as it is written), then indexes it in SQLite, committing once per batch. A ``kill
-9`` therefore loses the exchanges in flight and those queued in the last moments; a record on
disk is always whole, or is a torn last line that readers skip.

Files and the folder are private to their owner (0600 and 0700).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from oaishim.capture.files import capture_files, file_name, lines, number_of
from oaishim.capture.index import INDEX_NAME, Index
from oaishim.capture.raw import PlainExchange, RawExchange
from oaishim.capture.record import Record, RecordError, parse_line, summary

log = logging.getLogger("oaishim.capture")
Build = Callable[[RawExchange], tuple[Record, bytes]]


def private_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # also when it already existed with a wider mode


def open_private(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # also when it already existed with a wider mode
    return fd


def reindex(index: Index, directory: Path) -> int:
    """Index what the files hold beyond what the index has seen (after a crash); returns the count."""
    done = index.upto()
    added = 0
    for path in capture_files(directory):
        upto = done.get(path.name, 0)
        for offset, line in lines(path, upto):
            if not line.endswith(b"\n"):
                break  # torn by a crash: not a record
            upto = offset + len(line)
            try:
                record = parse_line(line)
            except RecordError:
                continue
            index.add(summary(record), path.name, offset, len(line))
            added += 1
        index.mark(path.name, upto)
    index.commit()
    return added


class Drained:
    """A bounded queue of finished exchanges, drained by one thread: what the thread writer (below)
    and the capture process's sender (``server.capture_feed.RemoteWriter``) share. The request
    path only calls :meth:`submit`; a subclass defines ``_run``, the thread's loop."""

    def __init__(self, queue_size: int, interval: float) -> None:
        self.queue_size = queue_size
        self.interval = interval
        self.queue: deque[RawExchange] = deque()
        self.dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, exchange: RawExchange) -> bool:
        """Queue one finished exchange; False (and counted) when the queue is full."""
        if len(self.queue) >= self.queue_size:
            self._drop(1, "capture queue full")
            return False
        self.queue.append(exchange)  # deque.append is atomic: no lock, no wake-up
        return True

    def submit_plain(self, plain: PlainExchange) -> bool:
        """Queue one finished plain exchange (the recorder's fields), as its parts."""
        return self.submit(plain.exchange())

    def _drop(self, count: int, why: str) -> None:
        before, self.dropped = self.dropped, self.dropped + count
        if before.bit_length() != self.dropped.bit_length():  # 1, 2, 4, 8…: reported, but not per request
            log.warning("%s: %d exchange(s) dropped so far", why, self.dropped)

    def _run(self) -> None:
        raise NotImplementedError

    def _start_thread(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _stop_thread(self, timeout: float, late: str) -> bool:
        """Stop the thread, waiting at most ``timeout`` seconds (``late`` logged past them); False
        when it was not running."""
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(late, timeout)
        self._thread = None
        return True


class CaptureWriter(Drained):
    def __init__(
        self,
        directory: Path,
        build: Build,
        *,
        max_file_bytes: int = 64 << 20,
        queue_size: int = 1024,
        interval: float = 0.05,
        warm_up: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(queue_size, interval)
        self.directory = directory
        self.build = build
        self.warm_up = warm_up  # run first in the thread: the first record should not pay for loading
        self.max_file_bytes = max_file_bytes
        self.written = 0
        self.failed = 0
        self._fd = -1
        self._number = 0
        self._size = 0
        self._index: Index | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> CaptureWriter:
        self.open_files()  # in the caller's thread, so a folder that cannot be written fails at once
        self._start_thread("oaishim-capture-writer")
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop. Waits at most ``timeout`` seconds."""
        if not self._stop_thread(timeout, "capture writer did not drain its queue within %g s"):
            return
        log.info("capture: %d exchange(s) written, %d dropped, %d failed", self.written, self.dropped, self.failed)

    # -- the writer thread ---------------------------------------------------------------------------
    def open_files(self) -> None:
        private_dir(self.directory)
        existing = capture_files(self.directory)
        self._number = (number_of(existing[-1]) or 1) if existing else 1
        self._open_current()

    def _open_current(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        path = self.directory / file_name(self._number)
        self._fd = open_private(path)
        self._size = os.fstat(self._fd).st_size
        if self._size:
            with path.open("rb") as handle:
                handle.seek(self._size - 1)
                torn = handle.read(1) != b"\n"
            if torn:
                self._write_all(b"\n")  # a line torn by a crash stays a line of its own

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data)

    def _run(self) -> None:
        self.open_index()
        try:
            while True:
                stopping = self._stop.wait(self.interval)
                for _ in range(len(self.queue)):  # what is there now: under load the index still commits
                    self._record(self.queue.popleft())
                    time.sleep(0)  # hand the GIL to the event loop if it waits, between records
                self.commit()
                if stopping:
                    return
        finally:
            self.finish()

    # -- driven by a caller of its own (the capture process, server.capture_process) ----------------
    def open_index(self) -> None:
        """Open the index (indexing what an earlier crash left unindexed) and warm the checker up."""
        self._index = Index(self.directory / INDEX_NAME, create=True)
        reindex(self._index, self.directory)
        if self.warm_up is not None:
            self.warm_up()

    def write(self, exchange: RawExchange) -> None:
        """Build, append and index one exchange now (committed by the next :meth:`commit`)."""
        self._record(exchange)

    def commit(self) -> None:
        assert self._index is not None
        self._index.set_meta("dropped", str(self.dropped))
        self._index.commit()

    def finish(self) -> None:
        if self._index is not None:
            self._index.set_meta("dropped", str(self.dropped))
            self._index.close()
            self._index = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _record(self, exchange: RawExchange) -> None:
        assert self._index is not None
        try:
            record, line = self.build(exchange)
        except Exception:  # a bug in building one record must not stop the recording of the rest
            self.failed += 1
            log.exception("capture: could not build the record of one exchange")
            return
        if self._size and self._size + len(line) > self.max_file_bytes:
            self._number += 1
            self._open_current()
        offset = self._size
        self._write_all(line)
        self._index.add(summary(record), file_name(self._number), offset, len(line))
        self._index.mark(file_name(self._number), self._size)
        self.written += 1
