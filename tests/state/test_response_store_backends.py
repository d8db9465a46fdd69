"""What only one backend has: SQLite's file, durability and faults; PostgreSQL shared by two
replicas, its faults; and :func:`open_store`'s reading of the setting."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import sys
import time
from pathlib import Path

import orjson
import pytest
from _state import Clock, record

from _postgres import free_port
from oaishim.state import Limits, StoreUnavailable, open_store
from oaishim.state.memory import MemoryStore
from oaishim.state.postgres import TABLE, PostgresStore
from oaishim.state.sqlite import SQLiteStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- SQLite ------------------------------------------------------------------------------------


def test_sqlite_creates_a_private_folder_and_private_files(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "responses.db"

    async def body() -> None:
        store = SQLiteStore(path, clock=Clock())
        await store.put(record(1))
        assert mode(path.parent) == 0o700
        assert mode(path) == 0o600
        wal = path.with_name(path.name + "-wal")
        assert wal.exists()
        assert mode(wal) == 0o600
        assert mode(path.with_name(path.name + "-shm")) == 0o600
        await store.close()

    asyncio.run(body())


def test_sqlite_narrows_an_existing_file_and_leaves_an_existing_folder(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path = folder / "responses.db"
    path.touch()
    path.chmod(0o644)

    async def body() -> None:
        store = SQLiteStore(path, clock=Clock())
        await store.put(record(1))
        await store.close()

    asyncio.run(body())
    assert mode(path) == 0o600
    assert mode(folder) == 0o755


def test_sqlite_a_put_is_committed_before_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "responses.db"

    async def body() -> None:
        clock = Clock()
        writer = SQLiteStore(path, clock=clock)
        await writer.put(record(1))
        # Another connection, opened after put returned and while the writer is still open.
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert other.execute("SELECT id FROM responses").fetchall() == [("resp_0001",)]
        reader = SQLiteStore(path, clock=clock)
        assert await reader.get("resp_0001", "key-a") == record(1)
        await reader.close()
        await writer.close()

    asyncio.run(body())


def test_sqlite_a_corrupt_file_gives_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    path.write_bytes(b"this is not a database, it is a text file that was put here by mistake\n" * 100)

    async def body() -> None:
        store = SQLiteStore(path, clock=Clock())
        for call in (store.put(record(1)), store.get("resp_0001", "key-a")):
            with pytest.raises(StoreUnavailable) as caught:
                await call
            assert str(path) in str(caught.value)
            error = caught.value.openai()
            assert error.status == 500
            assert error.type == "server_error"
            assert str(path) not in error.message  # the client is not told the server's paths
        await store.close()

    asyncio.run(body())


def test_sqlite_an_unusable_path_gives_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    async def body() -> None:
        store = SQLiteStore(blocker / "responses.db", clock=Clock())
        with pytest.raises(StoreUnavailable):
            await store.put(record(1))
        await store.close()

    asyncio.run(body())


def test_sqlite_a_put_does_not_block_the_event_loop(tmp_path: Path) -> None:
    """Each call runs on the store's own thread: while a put holds the disk, the loop keeps ticking."""

    async def body() -> None:
        store = SQLiteStore(tmp_path / "responses.db", clock=Clock())
        await store.put(record(1))
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)
        started = ticks
        for n in range(2, 12):
            await store.put(record(n, text="x" * 20_000))
        ticker.cancel()
        assert ticks - started > 10
        await store.close()

    asyncio.run(body())


# -- PostgreSQL --------------------------------------------------------------------------------


def test_postgres_two_replicas_share_one_store(pg_url: str) -> None:
    async def body() -> None:
        clock = Clock()
        a, b = PostgresStore(pg_url, clock=clock), PostgresStore(pg_url, clock=clock)
        # Both replicas' first calls at once: the table is created once, under the advisory lock.
        await asyncio.gather(a.put(record(1)), b.put(record(2)))
        assert await b.get("resp_0001", "key-a") == record(1)
        assert await a.get("resp_0002", "key-a") == record(2)
        # Writers on both sides at once; each record is readable from the other side right after.

        async def write_then_read_elsewhere(writer: PostgresStore, reader: PostgresStore, n: int) -> None:
            await writer.put(record(n))
            assert await reader.history(f"resp_{n:04d}", "key-a") == record(n).history

        await asyncio.gather(
            *(write_then_read_elsewhere(a, b, n) for n in range(10, 30, 2)),
            *(write_then_read_elsewhere(b, a, n) for n in range(11, 31, 2)),
        )
        assert await b.delete("resp_0010", "key-a") is True
        assert await a.get("resp_0010", "key-a") is None
        await a.close()
        await b.close()

    asyncio.run(body())


def test_postgres_a_put_is_committed_before_it_returns(pg_url: str) -> None:
    import psycopg

    async def body() -> None:
        store = PostgresStore(pg_url, clock=Clock())
        await store.put(record(1, text="fresh"))
        with psycopg.connect(pg_url) as other:  # not autocommit: its own transaction, after the put
            row = other.execute(f"SELECT response FROM {TABLE} WHERE id = 'resp_0001'").fetchone()
        assert row is not None
        assert orjson.loads(row[0]) == record(1, text="fresh").response
        await store.close()

    asyncio.run(body())


@pytest.mark.usefixtures("pg_cluster")  # only for its check that psycopg is installed
def test_postgres_unreachable_gives_store_unavailable_at_once() -> None:
    url = f"postgresql://oaishim:hunter2-password@127.0.0.1:{free_port()}/postgres"

    async def body() -> None:
        store = PostgresStore(url, clock=Clock(), connect_timeout=2)
        begun = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            await store.get("resp_0001", "key-a")
        assert time.monotonic() - begun < 2
        assert "hunter2" not in str(caught.value)
        assert "hunter2" not in repr(store)
        assert caught.value.openai().status == 500
        await store.close()

    asyncio.run(body())


def test_postgres_a_dropped_connection_is_replaced(pg_url: str) -> None:
    import psycopg

    async def body() -> None:
        store = PostgresStore(pg_url, clock=Clock(), pool_size=1)
        await store.put(record(1))
        # The server ends every other session (a restart, a failover, an idle timeout).
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND usename = current_user"
            )
        with pytest.raises(StoreUnavailable):
            await store.get("resp_0001", "key-a")  # the call that finds the connection dead
        assert await store.get("resp_0001", "key-a") == record(1)  # the next one reconnects
        await store.close()

    asyncio.run(body())


def test_postgres_without_psycopg_is_refused_when_the_store_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing driver cannot be provoked for real in a venv that has it: ``sys.modules`` hides it."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreUnavailable, match=r"state-postgres"):
        open_store("postgresql://127.0.0.1/x")


# -- open_store --------------------------------------------------------------------------------


def test_open_store_reads_the_setting(tmp_path: Path) -> None:
    absolute = tmp_path / "a.db"
    assert isinstance(open_store("memory"), MemoryStore)
    for setting in (f"sqlite://{absolute}", str(absolute), f"sqlite:{absolute}"):
        store = open_store(setting)
        assert isinstance(store, SQLiteStore)
        assert store.path == absolute, setting
    relative = open_store("sqlite:relative.db")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path("relative.db")
    assert isinstance(open_store("postgresql://u@127.0.0.1/db"), PostgresStore)
    assert isinstance(open_store("postgres://u@127.0.0.1/db"), PostgresStore)
    limited = open_store("memory", limits=Limits(max_records=7))
    assert isinstance(limited, MemoryStore)
    assert limited.limits.max_records == 7
    for bad in ("", "  ", "mysql://u@h/db", "sqlite://"):
        with pytest.raises(ValueError):
            open_store(bad)
    assert not os.path.exists("relative.db")  # nothing is opened until the first call
