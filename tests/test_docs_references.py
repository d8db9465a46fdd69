"""Every reference in the product resolves inside this repository.

The code cites backend behaviour by row id (``V-5``, ``T-23``: ``docs/backend-quirks.md``) and the
official format by section (``docs/wire-format.md §3``); a maintainer with only this repository must
be able to follow each one. Nothing may point to documents kept beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "oaishim"
QUIRKS = ROOT / "docs" / "backend-quirks.md"
WIRE = ROOT / "docs" / "wire-format.md"
ROW_ID = re.compile(r"(?<![\w-])([VSTLO])-(\d+)(?![\w-])")  # V-5, not KV-5 or V-5a
TEXT = (".py", ".yaml", ".js", ".css")


def _sources() -> list[Path]:
    files = [p for p in SRC.rglob("*") if p.suffix in TEXT]
    return [*files, *sorted((ROOT / "tests" / "fixtures").glob("*/manifest.yaml"))]


def _rows() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^\| ([VSTLO]-\d+) \|", QUIRKS.read_text(), re.MULTILINE)}


def _sections(path: Path) -> set[str]:
    """``N`` for each ``## N.`` heading, ``N.M`` for each ``### N.M`` heading and each item M of §0's list."""
    text = path.read_text()
    found = set(re.findall(r"^##+ (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))
    zero = text.split("\n## 0.", 1)[1].split("\n## 1.", 1)[0] if "\n## 0." in text else ""
    found |= {f"0.{n}" for n in re.findall(r"^(\d+)\. ", zero, re.MULTILINE)}
    return found


def test_every_quirk_id_cited_in_the_code_has_a_row() -> None:
    rows = _rows()
    assert len(rows) > 100  # the table was read, not an empty match
    cited: dict[str, set[str]] = {}
    for path in _sources():
        for m in ROW_ID.finditer(path.read_text(encoding="utf-8")):
            cited.setdefault(f"{m.group(1)}-{m.group(2)}", set()).add(str(path.relative_to(ROOT)))
    assert len(cited) > 100
    missing = {row: sorted(where) for row, where in cited.items() if row not in rows}
    assert missing == {}


@pytest.mark.parametrize(("doc", "path"), [("docs/backend-quirks.md", QUIRKS), ("docs/wire-format.md", WIRE)])
def test_every_section_cited_in_the_code_exists(doc: str, path: Path) -> None:
    sections = _sections(path)
    cite = re.compile(re.escape(doc) + r"``?\s*((?:§\s?\d+(?:\.\d+)?(?:[–-]\d+)?(?:,\s*)?)+)")
    missing = []
    for source in _sources():
        for m in cite.finditer(source.read_text(encoding="utf-8")):
            for number in re.findall(r"§\s?(\d+(?:\.\d+)?)", m.group(1)):
                if number not in sections:
                    missing.append((str(source.relative_to(ROOT)), number))
    assert missing == []


def test_nothing_points_outside_the_repository() -> None:
    outside = re.compile(
        r"\.\./shared|/work/shared|\bshared/(docs|spec|fixtures|seeds)\b|\bseeds?\b ?_?0\d\d|\bseed_?0\d\d|the seeds?\b",
        re.IGNORECASE,
    )
    files = [
        *_sources(),
        *(ROOT / "tests").rglob("*.py"),
        ROOT / "README.md",
        *(ROOT / "tests" / "fixtures").rglob("*.md"),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line) and path != Path(__file__)
    ]
    assert found == []
