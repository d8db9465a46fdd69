"""The HTML report: one self-contained file (styles, script and the run's data inline).

The page is rendered here in full, except the summary figures: the page's own script computes them
from the embedded run data (``<script type="application/json" id="probe-data">``), as results.json
does, so the test that opens the page in headless Chromium checks the data, the script and the
rendering at once (a ``<noscript>`` table carries the same figures for readers without scripts).
With ``--against`` every case shows the two sides' compat records and field sets side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from importlib import resources
from typing import Any

import orjson

from oaishim.check import Finding
from oaishim.probe._compare import flat_record
from oaishim.probe._results import CaseResult, ProbeRun, StepResult, parameter_table
from oaishim.probe._terminal import percent

__all__ = ["html_report"]


def _asset(name: str) -> str:
    return resources.files("oaishim.probe").joinpath(name).read_text(encoding="utf-8")


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def _badge(outcome: str) -> str:
    return f'<span class="badge {_e(outcome)}">{_e(outcome)}</span>'


def _findings(findings: Iterable[tuple[str, Finding]]) -> str:
    items = []
    for step, f in findings:
        where = f.path if f.chunk is None else f"chunk {f.chunk} {f.path}"
        items.append(
            f'<li class="sev-{_e(f.severity)}">{_e(f.severity)} <code>{_e(f.rule)}</code> '
            f"step <code>{_e(step)}</code> <code>{_e(where)}</code>: {_e(f.message)}</li>"
        )
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _checks(case: CaseResult) -> str:
    if case.skipped:
        return f'<p class="muted">skipped: {_e(case.skipped)}</p>'
    rows = "".join(
        f"<tr><td><code>{_e(c.id)}</code></td><td>{_badge(c.outcome)}</td>"
        f"<td>{_e(c.message)}{' <span class=muted>(' + _e(c.why) + ')</span>' if c.why else ''}</td></tr>"
        for c in case.checks
    )
    table = f"<table><thead><tr><th>check</th><th>outcome</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table>"
    return table + _findings(case.findings())


def _step_block(step: StepResult) -> str:
    return (
        f"<details><summary>step <code>{_e(step.name)}</code> {_e(step.method)} <code>{_e(step.path)}</code> "
        f"HTTP {_e(step.record.get('http_status'))} ({step.seconds:.2f} s)</summary>"
        f"<p>sent</p><pre>{_e(_json(step.sent) if not isinstance(step.sent, str) else step.sent)}</pre>"
        f"<p>answer (start)</p><pre>{_e(step.excerpt)}</pre></details>"
    )


def _fields_table(fields: list[str], other: set[str]) -> str:
    rows = "".join(f'<tr{" class=only" if f not in other else ""}><td class="mono">{_e(f)}</td></tr>' for f in fields)
    return f"<table><tbody>{rows}</tbody></table>"


def _side_by_side(a: StepResult, b: StepResult) -> str:
    ra, rb = flat_record(a.record), flat_record(b.record)
    rows = "".join(
        f'<tr{" class=only" if ra.get(k) != rb.get(k) else ""}><td class="mono">{_e(k)}</td>'
        f"<td>{_e(_json(ra.get(k)))}</td><td>{_e(_json(rb.get(k)))}</td></tr>"
        for k in sorted(ra.keys() | rb.keys())
    )
    fa, fb = list(a.record.get("fields") or []), list(b.record.get("fields") or [])
    return (
        f'<details class="pair" data-step="{_e(a.name)}"><summary>step <code>{_e(a.name)}</code>: '
        f"compat record and field sets, A | B</summary>"
        f"<table><thead><tr><th>record field</th><th>A</th><th>B</th></tr></thead><tbody>{rows}</tbody></table>"
        f'<div class="side-by-side"><div><p>fields of A ({len(fa)})</p>{_fields_table(fa, set(fb))}</div>'
        f"<div><p>fields of B ({len(fb)})</p>{_fields_table(fb, set(fa))}</div></div></details>"
    )


def _case(i: int, run: ProbeRun) -> str:
    per_side = [side.cases[i] for side in run.sides]
    head = per_side[0]
    all_pass = all(c.outcome != "fail" for c in per_side)
    badges = " ".join(f"{_e(s.label)} {_badge(c.outcome)}" for s, c in zip(run.sides, per_side, strict=True))
    refs = f' <span class="muted">({_e(", ".join(head.refs))})</span>' if head.refs else ""
    parts = [
        f'<details class="case{" all-pass" if all_pass else ""}" id="case-{_e(head.id)}">'
        f"<summary><code>{_e(head.id)}</code> {_e(head.title)}{refs} {badges}</summary>"
    ]
    for side, case in zip(run.sides, per_side, strict=True):
        parts.append(f"<h4>{_e(side.label)}: {_e(side.url)}</h4>{_checks(case)}")
        parts.extend(_step_block(s) for s in case.steps)
    if len(per_side) == 2 and not any(c.skipped for c in per_side):
        steps_b = {s.name: s for s in per_side[1].steps}
        parts.extend(_side_by_side(s, steps_b[s.name]) for s in per_side[0].steps if s.name in steps_b)
    parts.append("</details>")
    return "".join(parts)


def _noscript(run: ProbeRun) -> str:
    endpoints = sorted({ep for s in run.sides for ep in s.score()["by_endpoint"]})
    rows = [("total", [s.score()["total"] for s in run.sides])]
    rows += [(ep, [s.score()["by_endpoint"].get(ep, {}) for s in run.sides]) for ep in endpoints]
    body = "".join(f"<tr><th>{_e(ep)}</th>{''.join(f'<td>{_e(percent(x))}</td>' for x in xs)}</tr>" for ep, xs in rows)
    return f"<noscript><table><tbody>{body}</tbody></table></noscript>"


def _differences(comparison: Mapping[str, Any]) -> str:
    items = "".join(
        f'<li><a href="#case-{_e(c["case"])}"><code>{_e(c["case"])}</code></a>: '
        f"A {_badge(c['outcome']['A'])} B {_badge(c['outcome']['B'])} "
        f"{_e(', '.join(s['step'] for s in c['steps'] if s['status'] == 'differs'))}</li>"
        for c in comparison["cases"]
        if c["status"] == "differs"
    )
    return (
        f'<section id="differences"><h2>Differences between A and B</h2>'
        f'<p><span id="differ-count">{comparison["differ"]}</span> case(s) differ, '
        f"{comparison['same']} are the same.</p><ul>{items}</ul></section>"
    )


def _parameters(run: ProbeRun) -> str:
    """Each measured parameter by side (raw backend against gateway): honoured, ignored or refused."""
    table = parameter_table(run.sides)
    if not table:
        return ""
    head = "".join(f"<th>{_e(s.name)}</th>" for s in run.sides)
    rows = []
    for row in table:
        cells = "".join(
            f'<td><span class="badge {"fail" if row["by_side"][s.label] == "ignored" else "pass" if row["by_side"][s.label] == "honoured" else "skip"}">'
            f"{_e(row['by_side'][s.label])}</span>"
            + (f" {_e(row['seen'][s.label])}" if s.label in row["seen"] else "")
            + "</td>"
            for s in run.sides
        )
        rows.append(
            f"<tr><td><code>{_e(row['parameter'])}</code></td><td><code>{_e(row['case'])}</code></td>{cells}</tr>"
        )
    return (
        '<section id="parameters"><h2>Parameters: accepted and honoured, or ignored</h2>'
        f"<table><thead><tr><th>parameter</th><th>case</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def html_report(run: ProbeRun) -> str:
    data = orjson.dumps(run.as_dict(), option=orjson.OPT_NON_STR_KEYS).decode().replace("</", "<\\/")
    sides = "".join(
        f"<li><b>{_e(s.label)}</b>: {_e(s.url)} model <code>{_e(s.model)}</code>; steering text "
        f"<code>{_e(s.steering.text)}</code>, tool calls <code>{_e(s.steering.tool_call)}</code>; "
        f'<span class="side-outcomes" data-side="{_e(s.label)}"></span></li>'
        for s in run.sides
    )
    head_cells = "".join(f"<th>{_e(s.label)}</th>" for s in run.sides)
    cases = "".join(_case(i, run) for i in range(len(run.primary.cases)))
    differences = _differences(run.comparison) if run.comparison is not None else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>oaishim probe report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_asset("report.css")}</style></head>
<body>
<h1>oaishim probe</h1><p class="muted">{_e(run.created)}, oaishim {_e(run.version)}</p>
<ul>{sides}</ul>
<section id="summary"><h2>Conformance score</h2>
<table id="scores"><thead><tr><th>endpoint</th>{head_cells}</tr></thead><tbody id="score-body"></tbody></table>
{_noscript(run)}
<p class="muted">checks passed / checks run; a check that cannot tell (skip) is not run.</p></section>
{_parameters(run)}
{differences}
<section id="cases"><h2>Cases</h2>
<label><input type="checkbox" id="failing-only"> failing cases only</label>
{cases}</section>
<script type="application/json" id="probe-data">{data}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
