"""Findings as text for a terminal, or as JSON for machines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from oaishim.check._model import Finding


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    c = Counter(f.severity for f in findings)
    return {"error": c["error"], "warning": c["warning"], "note": c["note"]}


def text_report(name: str, findings: Sequence[Finding]) -> str:
    c = counts(findings)
    head = f"{name}: {c['error']} error(s), {c['warning']} warning(s), {c['note']} note(s)"
    lines = [head]
    for f in findings:
        where = f.path if f.chunk is None else f"chunk {f.chunk} {f.path}"
        lines.append(f"  {f.severity:<7} {f.rule:<26} {where}: {f.message}")
    return "\n".join(lines)


def json_report(name: str, findings: Sequence[Finding]) -> dict[str, Any]:
    return {"file": name, "counts": counts(findings), "findings": [f.as_dict() for f in findings]}
