"""Judging one case: the checker over every step, then the case's own expectations. Pure.

The runner hands over what went on the wire (:class:`Sent`); this module turns it into a
:class:`~oaishim.probe._results.CaseResult` with findings, checks and compat records. A case may
*tolerate* some unknown fields (``reasoning_content`` in the reasoning case: the one extension the
gateway adds on purpose); their ``unknown-field`` findings become notes in that case only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oaishim.check import CheckOptions, Finding, check
from oaishim.probe._cases import Case, fill
from oaishim.probe._expect import EXPECTATIONS, Context, Verdict
from oaishim.probe._record import record_of
from oaishim.probe._results import CaseResult, CheckOutcome, CheckResult, StepResult
from oaishim.probe._view import StepView, view_of

__all__ = ["Sent", "endpoint_of", "judge_case"]

_FAILING = ("error", "warning")
_RESPONSE_ID = re.compile(r"/resp_[^/]+")
EXCERPT = 1500


@dataclass(frozen=True, slots=True)
class Sent:
    """One step as it went over the wire."""

    name: str
    method: str
    path: str
    request: Mapping[str, Any] | None  # the JSON body sent (None: raw bytes or a GET)
    sent: Any  # what the report shows as sent
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    seconds: float = 0.0
    transport_error: str | None = None
    skipped: str | None = None  # not sent, and why (a value an earlier step did not give)


def endpoint_of(path: str) -> str:
    """The endpoint a path counts under in scores: stored responses' ids become ``{id}``."""
    return _RESPONSE_ID.sub("/{id}", path.split("?", 1)[0])


def _tolerated(findings: Sequence[Finding], fields: frozenset[str]) -> list[Finding]:
    if not fields:
        return list(findings)
    out = []
    for finding in findings:
        key = finding.path.rsplit(".", 1)[-1]
        if finding.rule == "unknown-field" and key in fields:
            tolerated = finding.message + " (tolerated in this case)"
            out.append(Finding(finding.rule, "note", finding.path, finding.chunk, tolerated))
        else:
            out.append(finding)
    return out


def _step_findings(view: StepView, options: CheckOptions, case: Case) -> list[Finding]:
    if view.exchange is None:
        return [Finding("probe.transport", "error", "$", None, f"no answer: {view.transport_error}")]
    return _tolerated(check(view.exchange, options), case.tolerate)


def _wire_check(name: str, path: str, findings: Sequence[Finding]) -> CheckResult:
    failing = [f for f in findings if f.severity in _FAILING]
    outcome: CheckOutcome = "fail" if failing else "pass"
    if failing:
        rules = sorted({f.rule for f in failing})
        message = f"{len(failing)} finding(s): {', '.join(rules)}"
    else:
        message = "matches the official API" + (f" ({len(findings)} note(s))" if findings else "")
    return CheckResult(f"wire:{name}", name, path, outcome, message, tuple(findings))


def _excerpt(body: bytes | None) -> str:
    if body is None:
        return ""
    text = body[: EXCERPT * 4].decode("utf-8", "replace")
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"… ({len(body)} bytes)"


def _accepted(views: Mapping[str, StepView], steps: Sequence[str]) -> bool:
    """Every step was answered 200 without an error inside: the endpoint took the request, parameter and all."""
    return all(name in views and views[name].ok and views[name].error is None for name in steps)


def judge_case(
    case: Case, sent: Sequence[Sent], ctx: Context, options: CheckOptions, target: str = "the endpoint"
) -> CaseResult:
    """Findings, checks and records of one case whose steps were all sent. ``target`` names the
    endpoint in an "ignored" finding (``A (http://…)``)."""
    views: dict[str, StepView] = {}
    steps: list[StepResult] = []
    checks: list[CheckResult] = []
    paths: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for s in sent:
        paths[s.name] = endpoint_of(s.path)
        if s.skipped is not None:
            skipped[s.name] = s.skipped
            record = record_of(s.path, s.request, view_of(None, request=s.request, status=None, headers={}))
            record.update(status="not sent", skipped=s.skipped, findings=[])
            steps.append(StepResult(s.name, s.method, s.path, s.sent, 0.0, record, (), ""))
            checks.append(CheckResult(f"wire:{s.name}", s.name, paths[s.name], "skip", s.skipped))
            continue
        view = view_of(
            s.body,
            request=s.request,
            status=s.status,
            headers=s.headers,
            transport_error=s.transport_error,
            path=s.path,
        )
        views[s.name] = view
        findings = _step_findings(view, options, case)
        record = record_of(s.path, s.request, view)
        record["status"] = "differs" if any(f.severity in _FAILING for f in findings) else "comparable"
        record["findings"] = [f.as_dict() for f in findings]
        steps.append(StepResult(s.name, s.method, s.path, s.sent, s.seconds, record, tuple(findings), _excerpt(s.body)))
        checks.append(_wire_check(s.name, paths[s.name], findings))
    seen: dict[str, int] = {}
    for expect in case.expect:
        step = expect.steps[0]
        unsent = [n for n in expect.steps if n in skipped]
        if unsent:
            verdict = Verdict("skip", f"cannot tell: step {unsent[0]} was not sent ({skipped[unsent[0]]})")
        else:
            verdict = EXPECTATIONS[expect.kind](fill(expect.params, ctx.variables), views, ctx)
        base = f"expect:{expect.kind}:{step}"
        seen[base] = seen.get(base, 0) + 1
        check_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        failed: tuple[Finding, ...] = ()
        outcome: CheckOutcome = verdict.outcome
        ignored = False
        if verdict.outcome == "fail":
            message = verdict.message + (f" ({expect.why})" if expect.why else "")
            severity = expect.severity
            if expect.parameter and _accepted(views, expect.steps):
                # accepted and without effect: always an error, naming who ignored what
                ignored, severity = True, "error"
                message = f"{target} ignored {expect.parameter}: {message}"
            failed = (Finding(f"expect.{expect.kind}", severity, verdict.path, None, message),)
            outcome = "fail" if severity in _FAILING else "info"
        checks.append(
            CheckResult(
                check_id, step, paths[step], outcome, verdict.message, failed, expect.why, expect.parameter, ignored
            )
        )
    return CaseResult(case.id, case.title, case.refs, tuple(steps), tuple(checks))
