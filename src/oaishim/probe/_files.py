"""Writing a run to a folder::

OUT/results.json               the whole run; also the format --baseline reads
OUT/report.md                  the Markdown report
OUT/report.html                the self-contained HTML report
OUT/records/A/<case>.json      the compat record of each case, per side (B with --against),
OUT/records/A/<case>.yaml      the same in YAML
OUT/comparison.json            with --against: the differences, step by step
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from oaishim.probe._html import html_report
from oaishim.probe._markdown import markdown_report
from oaishim.probe._results import CaseResult, ProbeRun

__all__ = ["case_record", "write_reports"]

_JSON = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def case_record(case: CaseResult, side_label: str) -> dict[str, Any]:
    """The compat record of one case: its steps' records (the comparison fields of :mod:`._record`) plus the findings."""
    return {
        "case": case.id,
        "title": case.title,
        "side": side_label,
        "outcome": case.outcome,
        "skipped": case.skipped,
        "refs": list(case.refs),
        "records": [{"step": s.name, **s.record} for s in case.steps],
        "checks": [c.as_dict() for c in case.checks],
    }


def write_reports(run: ProbeRun, out: Path) -> dict[str, Path]:
    """Write every report of ``run`` under ``out`` (created); returns the main files by kind."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "json": out / "results.json",
        "markdown": out / "report.md",
        "html": out / "report.html",
    }
    files["json"].write_bytes(orjson.dumps(run.as_dict(), option=_JSON) + b"\n")
    files["markdown"].write_text(markdown_report(run), encoding="utf-8")
    files["html"].write_text(html_report(run), encoding="utf-8")
    for side in run.sides:
        folder = out / "records" / side.label
        folder.mkdir(parents=True, exist_ok=True)
        for case in side.cases:
            record = case_record(case, side.label)
            (folder / f"{case.id}.json").write_bytes(orjson.dumps(record, option=_JSON) + b"\n")
            # JSON round trip: plain types only (tuples, ...), so safe_dump writes every record
            plain = orjson.loads(orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS))
            text = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=120)
            (folder / f"{case.id}.yaml").write_text(text, encoding="utf-8")
    if run.comparison is not None:
        files["comparison"] = out / "comparison.json"
        files["comparison"].write_bytes(orjson.dumps(run.comparison, option=_JSON) + b"\n")
    return files
