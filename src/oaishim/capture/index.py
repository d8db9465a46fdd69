"""The SQLite index beside the JSONL files: one row per record, for listing and search.

The JSONL files are the truth and the index only points into them (file, offset, length). Each
file's ``indexed_upto`` says how far the index has read it, so after a crash (records written, the
index transaction not yet committed) whatever lies beyond is indexed again from the files: by the
next writer for good, by a reader in memory.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

INDEX_NAME = "index.sqlite"
COLUMNS: Final = (
    "id",
    "time",
    "mode",
    "model",
    "method",
    "path",
    "status",
    "stream",
    "duration_ms",
    "findings",
    "upstream_findings",
    "file",
    "offset",
    "length",
)
_INSERT: Final = f"INSERT OR REPLACE INTO exchanges ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS exchanges (
    id TEXT PRIMARY KEY, time REAL, mode TEXT, model TEXT, method TEXT, path TEXT, status INTEGER,
    stream INTEGER, duration_ms REAL, findings INTEGER, upstream_findings INTEGER,
    file TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS exchanges_time ON exchanges (time);
CREATE INDEX IF NOT EXISTS exchanges_model ON exchanges (model);
CREATE INDEX IF NOT EXISTS exchanges_path ON exchanges (path);
CREATE TABLE IF NOT EXISTS files (file TEXT PRIMARY KEY, indexed_upto INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


def create_private(path: Path) -> None:
    """Create ``path`` (if missing) readable and writable by its owner only."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class Index:
    def __init__(self, path: Path, *, create: bool) -> None:
        if create:
            create_private(path)  # SQLite gives its -wal and -shm files the database file's mode
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=5000")
        if create:
            self.db.executescript(_SCHEMA)
        self._open = False
        self._marks: dict[str, int] = {}  # files marked in the open transaction: how far each is indexed

    def _begin(self) -> None:
        if not self._open:
            self.db.execute("BEGIN")
            self._open = True

    def add(self, row: Mapping[str, Any], file: str, offset: int, length: int) -> None:
        self._begin()
        values = [row.get(c) for c in COLUMNS[:-3]] + [file, offset, length]
        self.db.execute(_INSERT, values)

    def mark(self, file: str, upto: int) -> None:
        """The index holds ``file`` up to ``upto``: written with the transaction's commit (once a
        file per commit, not once a record; the rows it vouches for commit with it)."""
        self._begin()
        self._marks[file] = upto

    def set_meta(self, key: str, value: str) -> None:
        self._begin()
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def commit(self) -> None:
        if self._open:
            if self._marks:
                self.db.executemany(
                    "INSERT OR REPLACE INTO files (file, indexed_upto) VALUES (?, ?)", self._marks.items()
                )
                self._marks.clear()
            self.db.execute("COMMIT")
            self._open = False

    def upto(self) -> dict[str, int]:
        return {str(f): int(n) for f, n in self.db.execute("SELECT file, indexed_upto FROM files")}

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def rows(self) -> list[dict[str, Any]]:
        cursor = self.db.execute(f"SELECT {', '.join(COLUMNS)} FROM exchanges ORDER BY time, id")
        return [dict(zip(COLUMNS, row, strict=True)) for row in cursor]

    def close(self) -> None:
        self.commit()
        self.db.close()
