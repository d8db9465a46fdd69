"""The JSONL files of a capture folder: their names, their order, and reading their lines back.

``capture-00001.jsonl``, ``capture-00002.jsonl``, …: one record per line, a new file when the
current one would pass the size limit. A line that does not end in a newline (the process died
while writing it) is not a record; the next writer starts on a fresh line after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

PREFIX = "capture-"
SUFFIX = ".jsonl"
_NAME = re.compile(r"^capture-(\d{5,})\.jsonl$")


def file_name(number: int) -> str:
    return f"{PREFIX}{number:05d}{SUFFIX}"


def number_of(path: Path) -> int | None:
    match = _NAME.match(path.name)
    return int(match.group(1)) if match else None


def capture_files(directory: Path) -> list[Path]:
    """The folder's JSONL files in the order they were written."""
    found = [(n, p) for p in directory.glob(f"{PREFIX}*{SUFFIX}") if (n := number_of(p)) is not None]
    return [p for _, p in sorted(found)]


def lines(path: Path, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its newline) for each line from ``start``. A last line without one was
    torn by a crash (or is being written now): it is not a record."""
    with path.open("rb") as handle:
        handle.seek(start)
        offset = start
        for line in handle:
            yield offset, line
            offset += len(line)
