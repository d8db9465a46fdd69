"""Reading a capture back: a folder (JSONL files and their index) or one JSONL file.

Listing uses the index when there is one, plus whatever the files hold beyond it (a writer that
died before committing), read in memory: a reader never writes. Lines that are not records (a line
torn by a crash) are skipped and counted in ``torn``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oaishim.capture.files import capture_files, lines
from oaishim.capture.index import INDEX_NAME, Index
from oaishim.capture.record import Record, RecordError, parse_line, summary


class CaptureReader:
    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(f"no capture at {path}")
        self.path = path
        self.directory = path if path.is_dir() else path.parent
        self.files = capture_files(path) if path.is_dir() else [path]
        self.torn = 0
        self.dropped = 0
        self._rows: list[dict[str, Any]] | None = None

    def _index(self) -> Index | None:
        if not self.path.is_dir() or not (self.path / INDEX_NAME).is_file():
            return None
        try:
            return Index(self.path / INDEX_NAME, create=False)
        except sqlite3.Error:
            return None  # an unreadable index: the files alone will do

    def entries(self) -> list[dict[str, Any]]:
        """One summary per record (see ``record.summary``), with ``file``/``offset``/``length``, by time."""
        if self._rows is not None:
            return self._rows
        rows: list[dict[str, Any]] = []
        upto: dict[str, int] = {}
        index = self._index()
        if index is not None:
            try:
                rows, upto = index.rows(), index.upto()
                self.dropped = int(index.meta("dropped") or 0)
            except sqlite3.Error:
                rows, upto = [], {}
            finally:
                index.close()
        self.torn = 0
        for path in self.files:
            for offset, record, length in self._scan(path, upto.get(path.name, 0)):
                rows.append({**summary(record), "file": path.name, "offset": offset, "length": length})
        rows.sort(key=lambda r: (r["time"] or 0.0, r["id"]))
        self._rows = rows
        return rows

    def _scan(self, path: Path, start: int) -> Iterator[tuple[int, Record, int]]:
        for offset, line in lines(path, start):
            if not line.endswith(b"\n"):
                self.torn += 1
                return
            try:
                yield offset, parse_line(line), len(line)
            except RecordError:
                self.torn += 1

    def records(self) -> Iterator[Record]:
        """Every record, file by file, in the order written."""
        self.torn = 0
        for path in self.files:
            for _, record, _ in self._scan(path, 0):
                yield record

    def get(self, ident: str) -> Record:
        """The record whose id is ``ident`` or starts with it."""
        matches = [r for r in self.entries() if str(r["id"]).startswith(ident)]
        if not matches:
            raise KeyError(f"no exchange {ident!r} in {self.path}")
        if len({r["id"] for r in matches}) > 1:
            raise KeyError(f"{ident!r} matches {len(matches)} exchanges; give more of the id")
        return self.at(matches[0])

    def at(self, row: dict[str, Any]) -> Record:
        """The record one row of ``entries`` stands for."""
        with (self.directory / str(row["file"])).open("rb") as handle:
            handle.seek(int(row["offset"]))
            return parse_line(handle.read(int(row["length"])))
