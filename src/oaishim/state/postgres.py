"""The shared store: one PostgreSQL database behind several gateway replicas, so that a conversation
stored through one replica continues through any other.

psycopg 3 (the ``state-postgres`` extra) is imported when such a store is made, so the package
works without it. Connections come from a small pool of this store's own (at most ``pool_size``,
opened on demand, autocommit): a connection that broke or was left inside a transaction (a
cancelled request) is closed, not reused, and an unreachable server fails the call at once with
:class:`StoreUnavailable` rather than queueing it behind a reconnect loop.

The table is created on first use, under a transaction-scoped advisory lock so that replicas
starting together do not race on ``CREATE TABLE IF NOT EXISTS``. ``put`` returns after its
transaction committed, so any replica reads the record at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import orjson

from oaishim.state.base import Codec, Limits, Record, RecordConflict, StoreUnavailable, tenant_key

if TYPE_CHECKING:
    from psycopg import AsyncConnection

TABLE = "oaishim_responses"
_LOCK_KEY = 0x6F616973686D  # any constant: the advisory lock that serialises schema creation
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    model TEXT NOT NULL,
    previous_response_id TEXT,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL,
    history TEXT NOT NULL,
    size INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS {TABLE}_seq ON {TABLE} (seq);
CREATE INDEX IF NOT EXISTS {TABLE}_created_at ON {TABLE} (created_at);
"""
_COLUMNS = "id, created_at, model, previous_response_id, response, input_items, history"
_UPSERT = f"""
INSERT INTO {TABLE} AS t (id, tenant, created_at, model, previous_response_id, response, input_items, history, size)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET
    created_at = excluded.created_at, model = excluded.model,
    previous_response_id = excluded.previous_response_id, response = excluded.response,
    input_items = excluded.input_items, history = excluded.history, size = excluded.size
WHERE t.tenant = excluded.tenant
"""


class PostgresStore:
    def __init__(
        self,
        url: str,
        *,
        limits: Limits | None = None,
        secrets: Iterable[str | None] = (),
        clock: Callable[[], float] = time.time,
        pool_size: int = 4,
        connect_timeout: int = 5,
    ) -> None:
        try:
            import psycopg
        except ImportError as error:
            raise StoreUnavailable(
                "a PostgreSQL response store needs psycopg 3: pip install 'oaishim[state-postgres]'"
            ) from error
        self._psycopg = psycopg
        self._url = url
        self.limits = limits or Limits()
        self._codec = Codec(self.limits, secrets)
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(pool_size)
        self._idle: list[AsyncConnection[Any]] = []
        self._ready = False
        self._schema_lock = asyncio.Lock()
        self._last_purge = float("-inf")

    def __repr__(self) -> str:
        return "PostgresStore(...)"  # the URL may hold a password

    async def _schema(self, conn: AsyncConnection[Any]) -> None:
        async with self._schema_lock:
            if self._ready:
                return
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                await conn.execute(SCHEMA)
            self._ready = True

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        psycopg = self._psycopg
        async with self._slots:
            conn = None
            while self._idle and conn is None:
                conn = self._idle.pop()
                if conn.closed or conn.broken:
                    conn = None
            try:
                if conn is None:
                    conn = await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True, connect_timeout=self._connect_timeout
                    )
                if not self._ready:
                    await self._schema(conn)
                yield conn
            except psycopg.Error as error:
                raise StoreUnavailable(f"the PostgreSQL response store cannot be used: {error}") from error
            finally:
                if conn is not None:
                    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                    if idle and not conn.broken:
                        self._idle.append(conn)
                    else:
                        await conn.close()

    async def put(self, record: Record) -> None:
        row = self._codec.row(record)
        now = self._clock()
        purge = now - self._last_purge >= self.limits.purge_every
        async with self._connection() as conn, conn.transaction():
            cur = await conn.execute(
                _UPSERT,
                row.values(),
            )
            if cur.rowcount == 0:
                raise RecordConflict(f"response id {row.id} is held by another tenant")
            if self.limits.max_records is not None:
                await conn.execute(
                    f"DELETE FROM {TABLE} WHERE seq <= (SELECT max(seq) FROM {TABLE}) - %s",
                    (self.limits.max_records,),
                )
            if purge and self.limits.max_age is not None:
                await conn.execute(f"DELETE FROM {TABLE} WHERE created_at < %s", (self.limits.cutoff(now),))
        if purge:
            self._last_purge = now

    async def get(self, id: str, tenant: str) -> Record | None:
        async with self._connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = %s AND tenant = %s AND created_at >= %s",
                (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
            )
            found = await cur.fetchone()
        return None if found is None else Codec.record(tenant, *found)

    async def history(self, id: str, tenant: str) -> list[Any] | None:
        async with self._connection() as conn:
            cur = await conn.execute(
                f"SELECT history FROM {TABLE} WHERE id = %s AND tenant = %s AND created_at >= %s",
                (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
            )
            found = await cur.fetchone()
        if found is None:
            return None
        value: list[Any] = orjson.loads(found[0])
        return value

    async def delete(self, id: str, tenant: str) -> bool:
        async with self._connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM {TABLE} WHERE id = %s AND tenant = %s AND created_at >= %s",
                (id, tenant_key(tenant), self.limits.cutoff(self._clock())),
            )
        return cur.rowcount > 0

    async def purge(self) -> int:
        now = self._clock()
        if self.limits.max_age is None:
            self._last_purge = now
            return 0
        async with self._connection() as conn:
            cur = await conn.execute(f"DELETE FROM {TABLE} WHERE created_at < %s", (self.limits.cutoff(now),))
        self._last_purge = now
        return cur.rowcount

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
