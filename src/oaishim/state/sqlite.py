"""The default store: one SQLite file, for one gateway host (several processes on that host may share
the file; replicas on several hosts need :mod:`oaishim.state.postgres`).

Every call runs on one dedicated thread that owns the connection (sqlite3 blocks, and one writer
is all SQLite allows anyway), so the event loop never waits on the disk. ``put`` returns after its
transaction committed in WAL mode with ``synchronous=FULL``: the record is then visible to any
connection and survives a power cut, which is what lets the gateway write before it sends the
terminal event and a client continue at once.

The file holds conversations, so it is created 0600 (SQLite gives its -wal and -shm files the
same mode) in a folder created 0700; an existing file with wider bits is narrowed to 0600. A
folder that already exists is left as it is: it may be the user's.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from oaishim.state.base import Codec, Limits, Record, RecordConflict, StoreUnavailable, tenant_key

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    model TEXT NOT NULL,
    previous_response_id TEXT,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL,
    history TEXT NOT NULL,
    size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created_at ON responses (created_at);
"""

_COLUMNS = "id, created_at, model, previous_response_id, response, input_items, history"
_UPSERT = """
INSERT INTO responses (id, tenant, created_at, model, previous_response_id, response, input_items, history, size)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    created_at = excluded.created_at, model = excluded.model,
    previous_response_id = excluded.previous_response_id, response = excluded.response,
    input_items = excluded.input_items, history = excluded.history, size = excluded.size
WHERE responses.tenant = excluded.tenant
"""


def _prepare_file(path: Path) -> None:
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class SQLiteStore:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        limits: Limits | None = None,
        secrets: Iterable[str | None] = (),
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = Path(path)
        self.limits = limits or Limits()
        self._codec = Codec(self.limits, secrets)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oaishim-state")
        self._db: sqlite3.Connection | None = None  # touched only on the executor's thread
        self._last_purge = float("-inf")

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- on the store's thread ------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            _prepare_file(self.path)
            db = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            try:
                mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"cannot switch to WAL mode (journal mode is {mode})")
                db.execute("PRAGMA synchronous=FULL")
                db.executescript(SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _put(self, record: Record) -> None:
        row = self._codec.row(record)
        db = self._conn()
        now = self._clock()
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute(
                _UPSERT,
                row.values(),
            )
            if cur.rowcount == 0:
                raise RecordConflict(f"response id {row.id} is held by another tenant")
            if self.limits.max_records is not None:
                db.execute(
                    "DELETE FROM responses WHERE seq <= (SELECT max(seq) FROM responses) - ?",
                    (self.limits.max_records,),
                )
            purge = now - self._last_purge >= self.limits.purge_every
            if purge:
                self._delete_expired(db, now)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if purge:
            self._last_purge = now

    def _delete_expired(self, db: sqlite3.Connection, now: float) -> int:
        if self.limits.max_age is None:
            return 0
        return db.execute("DELETE FROM responses WHERE created_at < ?", (self.limits.cutoff(now),)).rowcount

    def _get(self, id: str, tenant: str) -> Record | None:
        found = (
            self._conn()
            .execute(
                f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND tenant = ? AND created_at >= ?",
                (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
            )
            .fetchone()
        )
        return None if found is None else Codec.record(tenant, *found)

    def _history(self, id: str, tenant: str) -> str | None:
        found = (
            self._conn()
            .execute(
                "SELECT history FROM responses WHERE id = ? AND tenant = ? AND created_at >= ?",
                (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
            )
            .fetchone()
        )
        return None if found is None else str(found[0])

    def _delete(self, id: str, tenant: str) -> bool:
        cur = self._conn().execute(
            "DELETE FROM responses WHERE id = ? AND tenant = ? AND created_at >= ?",
            (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
        )
        return cur.rowcount > 0

    def _purge(self) -> int:
        now = self._clock()
        count = self._delete_expired(self._conn(), now)
        self._last_purge = now
        return count

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- the async face -------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except (sqlite3.Error, OSError) as error:
            raise StoreUnavailable(f"the response store {self.path} cannot be used: {error}") from error

    async def put(self, record: Record) -> None:
        await self._run(self._put, record)

    async def get(self, id: str, tenant: str) -> Record | None:
        return await self._run(self._get, id, tenant)

    async def delete(self, id: str, tenant: str) -> bool:
        return await self._run(self._delete, id, tenant)

    async def history(self, id: str, tenant: str) -> list[Any] | None:
        text = await self._run(self._history, id, tenant)
        if text is None:
            return None
        value: list[Any] = orjson.loads(text)
        return value

    async def purge(self) -> int:
        return await self._run(self._purge)

    async def close(self) -> None:
        try:
            await self._run(self._close)
        finally:
            self._executor.shutdown(wait=False)
