"""The terminal: a live progress line while cases run, and the summary table at the end."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any, TextIO

from oaishim.probe._results import CaseResult, ProbeRun, SideResult, parameter_table

__all__ = ["ProgressPrinter", "percent", "summary_table"]

_MARK = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}


def percent(entry: dict[str, Any]) -> str:
    """``"97.1% (34/35)"``; the same text in every report."""
    if entry.get("percent") is None:
        return "n/a (0 checks)"
    return f"{entry['percent']:.1f}% ({entry['passed']}/{entry['run']})"


class ProgressPrinter:
    """A progress callback: on a terminal one line rewritten in place, else one line per case."""

    def __init__(self, stream: TextIO, *, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.width = max(40, shutil.get_terminal_size((100, 20)).columns - 1)
        self.failed = 0

    def __call__(self, label: str, case: CaseResult, done: int, total: int) -> None:
        self.failed += case.outcome == "fail"
        line = f"[{label} {done:>3}/{total}] {_MARK[case.outcome]} {case.id}"
        if self.live:
            status = f"  ({self.failed} failed)" if self.failed else ""
            self.stream.write("\r" + (line + status)[: self.width].ljust(self.width))
            if done == total:
                self.stream.write("\n")
                self.failed = 0
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _cell(case: CaseResult) -> str:
    if case.outcome == "skip":
        return "skip"
    counts = {"error": 0, "warning": 0}
    for _, f in case.findings():
        if f.severity in counts:
            counts[f.severity] += 1
    detail = " ".join(f"{n}{k[0].upper()}" for k, n in counts.items() if n)
    return f"{case.outcome}{' ' + detail if detail else ''}"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _side_name(side: SideResult) -> str:
    return f"{side.label}: {side.url} ({side.model})"


def summary_table(run: ProbeRun) -> str:
    """Cases by side, then the scores per endpoint, then (with --against) how many cases differ."""
    sides = run.sides
    rows = [["case", *[s.label for s in sides]]]
    for i, case in enumerate(sides[0].cases):
        rows.append([case.id, *[_cell(s.cases[i]) for s in sides]])
    lines = _table(rows)
    lines.append("")
    endpoints = sorted({ep for s in sides for ep in s.score()["by_endpoint"]})
    score_rows = [["score", *[s.label for s in sides]]]
    score_rows.append(["total", *[percent(s.score()["total"]) for s in sides]])
    for ep in endpoints:
        score_rows.append([ep, *[percent(s.score()["by_endpoint"].get(ep, {})) for s in sides]])
    lines.extend(_table(score_rows))
    lines.append("")
    for side in sides:
        c, st = side.counts(), side.steering
        responses = any(s.path.startswith("/v1/responses") for case in side.cases for s in case.steps)
        extra = f" (/v1/responses: text {st.responses_text}, tool calls {st.responses_tool_call})" if responses else ""
        lines.append(
            f"{_side_name(side)}: {c['error']} error(s), {c['warning']} warning(s), {c['note']} note(s); "
            f"steering: text {st.text}, tool calls {st.tool_call}{extra}; {side.seconds:.1f} s"
        )
    table = parameter_table(sides)
    if table:
        lines.append("")
        rows = [["parameter", "case", *[s.label for s in sides]]]
        rows += [[r["parameter"], r["case"], *[r["by_side"][s.label] for s in sides]] for r in table]
        lines.extend(_table(rows))
        for side in sides:
            for row in side.ignored():
                lines.append(f"{side.name} ignored {row['parameter']} ({row['case']}): {row['seen']}")
    if run.comparison is not None:
        lines.append(f"--against: {run.comparison['differ']} case(s) differ, {run.comparison['same']} the same")
    return "\n".join(lines)
