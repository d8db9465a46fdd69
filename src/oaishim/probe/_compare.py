"""``--against``: the two sides' compat records and findings, step by step. Pure.

For every case both sides ran, and every step of it: the key paths only one side's answer has
(comparison step 2, ``compat.two-endpoints``: compare the sets of field names), the compat-record fields whose values differ
(``response.first_chunk_has_content``: true vs false, ...), the checker and expectation rules only
one side broke, and the checks whose outcome differs. A step is ``same`` when none of these differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.probe._results import CaseResult, SideResult

__all__ = ["compare", "flat_record", "tops"]

# Record fields that differ between any two runs or sides and say nothing about compatibility.
_VOLATILE = frozenset({"served_model_name", "requested_model", "fields", "findings", "status", "transport_error"})


def flat_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``{"response.usage_present": True, ...}``: the record's comparable fields, flattened."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _VOLATILE:
            continue
        if isinstance(value, Mapping):
            for sub, item in value.items():
                out[f"{key}.{sub}"] = item
        else:
            out[key] = value
    return out


def tops(paths: set[str]) -> list[str]:
    """The paths whose parent is not in ``paths`` too: ``timings`` stands for ``timings.*``."""
    return sorted(p for p in paths if not any(p.startswith((q + ".", q + "[")) for q in paths if q != p))


def _rules(case: CaseResult, step: str) -> set[str]:
    return {f.rule for s, f in case.findings() if s == step and f.severity in ("error", "warning")}


def _step_diff(a: CaseResult, b: CaseResult, name: str) -> dict[str, Any]:
    sa = next(s for s in a.steps if s.name == name)
    sb = next(s for s in b.steps if s.name == name)
    fa, fb = set(sa.record.get("fields") or ()), set(sb.record.get("fields") or ())
    ra, rb = flat_record(sa.record), flat_record(sb.record)
    values = {k: [ra.get(k), rb.get(k)] for k in sorted(ra.keys() | rb.keys()) if ra.get(k) != rb.get(k)}
    rules_a, rules_b = _rules(a, name), _rules(b, name)
    diff = {
        "step": name,
        "fields_only_in_A": tops(fa - fb),
        "fields_only_in_B": tops(fb - fa),
        "record_differs": values,
        "rules_only_in_A": sorted(rules_a - rules_b),
        "rules_only_in_B": sorted(rules_b - rules_a),
        "fields_A": sorted(fa),
        "fields_B": sorted(fb),
    }
    same = not any(diff[k] for k in ("fields_only_in_A", "fields_only_in_B", "record_differs"))
    diff["status"] = "same" if same and rules_a == rules_b else "differs"
    return diff


def _case_diff(a: CaseResult, b: CaseResult) -> dict[str, Any]:
    names = [s.name for s in a.steps if any(t.name == s.name for t in b.steps)]
    steps = [_step_diff(a, b, n) for n in names]
    outcomes_b = {c.id: c.outcome for c in b.checks}
    checks = [
        {"check": c.id, "A": c.outcome, "B": outcomes_b[c.id]}
        for c in a.checks
        if c.id in outcomes_b and c.outcome != outcomes_b[c.id]
    ]
    differs = a.outcome != b.outcome or checks or any(s["status"] == "differs" for s in steps)
    return {
        "case": a.id,
        "title": a.title,
        "outcome": {"A": a.outcome, "B": b.outcome},
        "status": "differs" if differs else "same",
        "checks_differ": checks,
        "steps": steps,
    }


def compare(a: SideResult, b: SideResult) -> dict[str, Any]:
    """The comparison of two sides that ran the same catalogue."""
    by_id = {c.id: c for c in b.cases}
    cases = [_case_diff(c, by_id[c.id]) for c in a.cases if c.id in by_id and not c.skipped and not by_id[c.id].skipped]
    differing = [c for c in cases if c["status"] == "differs"]
    return {
        "A": {"url": a.url, "model": a.model},
        "B": {"url": b.url, "model": b.model},
        "same": len(cases) - len(differing),
        "differ": len(differing),
        "cases": cases,
    }
