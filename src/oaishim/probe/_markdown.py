"""The Markdown report: scores, one line per case, the findings, and the differences between sides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.probe._results import CaseResult, ProbeRun, SideResult, parameter_table
from oaishim.probe._terminal import percent

__all__ = ["markdown_report"]


def _esc(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`"


def _scores(run: ProbeRun) -> list[str]:
    sides = run.sides
    lines = ["| endpoint | " + " | ".join(f"{s.label}: {_esc(s.url)} ({_esc(s.model)})" for s in sides) + " |"]
    lines.append("|---" * (len(sides) + 1) + "|")
    lines.append("| **total** | " + " | ".join(f"**{percent(s.score()['total'])}**" for s in sides) + " |")
    endpoints = sorted({ep for s in sides for ep in s.score()["by_endpoint"]})
    for ep in endpoints:
        lines.append(
            f"| {_code(ep)} | " + " | ".join(percent(s.score()["by_endpoint"].get(ep, {})) for s in sides) + " |"
        )
    return lines


def _outcome(case: CaseResult) -> str:
    if case.outcome == "skip":
        return f"skipped ({_esc(case.skipped)})"
    failed = sum(c.outcome == "fail" for c in case.checks)
    counted = sum(c.outcome in ("pass", "fail") for c in case.checks)
    return f"{'✅' if case.outcome == 'pass' else '❌'} {counted - failed}/{counted}"


def _cases(run: ProbeRun) -> list[str]:
    sides = run.sides
    lines = ["| case | title | " + " | ".join(s.label for s in sides) + " |", "|---|---|" + "---|" * len(sides)]
    for i, case in enumerate(sides[0].cases):
        cells = " | ".join(_outcome(s.cases[i]) for s in sides)
        lines.append(f"| {_code(case.id)} | {_esc(case.title)} | {cells} |")
    return lines


def _findings(side: SideResult) -> list[str]:
    lines = [f"### {side.label}: {side.url}", ""]
    shown = False
    for case in side.cases:
        rows = [(step, f) for step, f in case.findings() if f.severity != "note"]
        notes = [(step, f) for step, f in case.findings() if f.severity == "note"]
        if not rows and not notes:
            continue
        shown = True
        refs = f" ({', '.join(case.refs)})" if case.refs else ""
        lines.append(f"**{case.id}**: {_esc(case.title)}{refs}")
        lines.append("")
        for step, f in rows + notes:
            where = f.path if f.chunk is None else f"chunk {f.chunk} {f.path}"
            lines.append(f"- {f.severity} {_code(f.rule)} step {_code(step)} {_code(where)}: {_esc(f.message)}")
        lines.append("")
    if not shown:
        lines.extend(["No findings.", ""])
    return lines


def _parameters(run: ProbeRun) -> list[str]:
    """Each measured parameter, what each side did with it; then what each side ignored, in words."""
    table = parameter_table(run.sides)
    if not table:
        return []
    sides = run.sides
    lines = [
        "## Parameters: accepted and honoured, or ignored",
        "",
        "| parameter | case | " + " | ".join(_esc(s.name) for s in sides) + " |",
        "|---|---|" + "---|" * len(sides),
    ]
    mark = {"honoured": "✅ honoured", "ignored": "❌ **ignored**", "refused": "⚠️ refused"}
    for row in table:
        cells = " | ".join(mark.get(row["by_side"][s.label], row["by_side"][s.label]) for s in sides)
        lines.append(f"| {_code(row['parameter'])} | {_code(row['case'])} | {cells} |")
    lines.append("")
    for side in sides:
        for row in side.ignored():
            lines.append(
                f"- {_esc(side.name)} ignored {_code(row['parameter'])} ({_code(row['case'])}): {_esc(row['seen'])}"
            )
    return [*lines, ""]


def _differences(comparison: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Differences between A and B",
        "",
        f"{comparison['differ']} case(s) differ, {comparison['same']} are the same.",
        "",
    ]
    for case in comparison["cases"]:
        if case["status"] != "differs":
            continue
        lines.append(f"**{case['case']}**: A {case['outcome']['A']}, B {case['outcome']['B']}")
        lines.append("")
        for step in case["steps"]:
            if step["status"] != "differs":
                continue
            parts = []
            for key, label in (("fields_only_in_A", "only in A"), ("fields_only_in_B", "only in B")):
                if step[key]:
                    parts.append(
                        f"{label}: "
                        + ", ".join(_code(f) for f in step[key][:12])
                        + (" …" if len(step[key]) > 12 else "")
                    )
            for key, (a, b) in step["record_differs"].items():
                parts.append(f"{_code(key)} A {_code(a)} / B {_code(b)}")
            for key, label in (("rules_only_in_A", "rules only A"), ("rules_only_in_B", "rules only B")):
                if step[key]:
                    parts.append(f"{label}: " + ", ".join(_code(r) for r in step[key]))
            lines.append(f"- step {_code(step['step'])}: " + "; ".join(parts))
        lines.append("")
    return lines


def markdown_report(run: ProbeRun) -> str:
    lines = ["# oaishim probe", "", f"{run.created}, oaishim {run.version}", "", "## Conformance score", ""]
    lines += [
        *_scores(run),
        "",
        "Score: checks passed / checks run (a skipped check, one that cannot tell, is not run).",
        "",
    ]
    for side in run.sides:
        s = side.steering
        lines.append(
            f"- {side.label}: steering text by {_code(s.text)}, tool calls {_code(s.tool_call)}, "
            f"tokenize {_code(s.tokenize)}; {side.seconds:.1f} s"
        )
    lines += ["", *_parameters(run), "## Cases", "", *_cases(run), "", "## Findings", ""]
    for side in run.sides:
        lines += _findings(side)
    if run.comparison is not None:
        lines += _differences(run.comparison)
    return "\n".join(lines).rstrip() + "\n"
