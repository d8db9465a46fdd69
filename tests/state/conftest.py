"""Fixtures for the response store: a fresh schema per test on the session's private PostgreSQL
cluster (``pg_cluster``, tests/conftest.py), and ``backend``: the same test run on each
store kind, with a way to read what really lies in its database."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from _state import Backend, Clock

from _postgres import Cluster
from oaishim.state import StateStore
from oaishim.state.memory import MemoryStore
from oaishim.state.postgres import TABLE, PostgresStore
from oaishim.state.sqlite import SQLiteStore

_schemas = itertools.count(1)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A URL whose search_path is a schema of its own, so each test starts with no table."""
    import psycopg

    name = f"test_{next(_schemas)}"
    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return pg_cluster.url(options=f"-csearch_path%3D{name}")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made: list[StateStore] = []
    make: Callable[..., StateStore]
    if request.param == "memory":

        def make(**kw: Any) -> StateStore:
            kw.setdefault("clock", Clock())
            store = MemoryStore(**kw)
            made.append(store)
            return store

        def dump() -> list[tuple[Any, ...]]:
            # The one white-box read: the in-process store has no database to look into.
            return [astuple(row) for store in made for _, row in store._rows.values()]  # type: ignore[attr-defined]

    elif request.param == "sqlite":
        path = tmp_path / "state" / "responses.db"

        def make(**kw: Any) -> StateStore:
            kw.setdefault("clock", Clock())
            store = SQLiteStore(path, **kw)
            made.append(store)
            return store

        def dump() -> list[tuple[Any, ...]]:
            if not path.exists():
                return []
            with sqlite3.connect(path) as db:
                return list(db.execute("SELECT * FROM responses"))

    else:
        url = request.getfixturevalue("pg_url")

        def make(**kw: Any) -> StateStore:
            kw.setdefault("clock", Clock())
            store = PostgresStore(url, **kw)
            made.append(store)
            return store

        def dump() -> list[tuple[Any, ...]]:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone() == (None,):
                    return []
                return list(conn.execute(f"SELECT * FROM {TABLE}"))

    yield Backend(request.param, make, dump, made)
