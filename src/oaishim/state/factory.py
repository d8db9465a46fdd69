"""``open_store``: a store from the one setting a user writes (``--response-store``-style).

* ``sqlite:///var/lib/oaishim/responses.db`` — the SQLite file at that absolute path (URL style:
  the path is what follows ``sqlite://``); ``sqlite:relative.db`` or a bare path such as
  ``responses.db`` or ``/var/lib/x.db`` — a SQLite file at that path.
* ``postgresql://user:pass@host:5432/db`` (or ``postgres://``) — a PostgreSQL database, shared by
  replicas; any libpq URL parameter works (``?sslmode=require``).
* ``memory`` — in-process, for tests only: lost with the process, not shared between replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from oaishim.state.base import Limits, StateStore


def open_store(
    url_or_path: str,
    *,
    limits: Limits | None = None,
    secrets: Iterable[str | None] = (),
    clock: Callable[[], float] = time.time,
) -> StateStore:
    """The store the setting names; nothing is opened yet (the first call connects), except that a
    PostgreSQL URL without psycopg installed fails here with :class:`StoreUnavailable`."""
    target = url_or_path.strip()
    if not target:
        raise ValueError("the response store setting is empty (expected a path, sqlite:///…, postgresql://… or memory)")
    if target == "memory":
        from oaishim.state.memory import MemoryStore

        return MemoryStore(limits=limits, secrets=secrets, clock=clock)
    scheme, sep, rest = target.partition(":")
    if sep and scheme.lower() in {"postgresql", "postgres"}:
        from oaishim.state.postgres import PostgresStore

        return PostgresStore(target, limits=limits, secrets=secrets, clock=clock)
    if sep and scheme.lower() == "sqlite":
        path = rest[2:] if rest.startswith("//") else rest
        if not path:
            raise ValueError(f"no file in the response store URL {target!r} (expected e.g. sqlite:///var/lib/x.db)")
    elif sep and len(scheme) > 1 and rest.startswith("//"):
        raise ValueError(f"unknown response store scheme {scheme!r} (expected sqlite, postgresql or memory)")
    else:
        path = target
    from oaishim.state.sqlite import SQLiteStore

    return SQLiteStore(path, limits=limits, secrets=secrets, clock=clock)
