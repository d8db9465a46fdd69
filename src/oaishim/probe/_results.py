"""What a probe run produced: steps, checks, cases, one side per endpoint; scores and baselines.

Everything here is plain data with ``as_dict()``; ``results.json`` is the dict of a whole run and
doubles as a baseline file (``--baseline``). A *check* is one judgement that counts in the score:
the checker over one step (``wire:<step>``: passes with no error or warning finding), or one of the
case's expectations (``expect:<kind>``). A check is ``pass``, ``fail``, ``skip`` (cannot tell) or
``info`` (a note-level expectation that did not hold); only ``pass`` and ``fail`` are counted:
score = passed / (passed + failed), per endpoint and in total.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from oaishim.check import Finding
from oaishim.probe._steer import Steering

__all__ = [
    "CaseResult",
    "CheckResult",
    "FindingKey",
    "ProbeRun",
    "SideResult",
    "StepResult",
    "baseline_keys",
    "new_errors",
    "parameter_table",
    "score_of",
]

CheckOutcome = Literal["pass", "fail", "skip", "info"]
FindingKey = tuple[str, str, str, str]  # case, step, rule, path


@dataclass(frozen=True, slots=True)
class CheckResult:
    id: str
    step: str  # the step judged (an expectation over several steps: the first)
    endpoint: str
    outcome: CheckOutcome
    message: str
    findings: tuple[Finding, ...] = ()
    why: str = ""
    parameter: str = ""  # the parameter whose effect the check measures ("": none)
    ignored: bool = False  # it failed although the request was accepted: the parameter had no effect

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "step": self.step,
            "endpoint": self.endpoint,
            "outcome": self.outcome,
            "message": self.message,
            "why": self.why,
            "parameter": self.parameter,
            "ignored": self.ignored,
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class StepResult:
    name: str
    method: str
    path: str
    sent: Any  # the JSON body sent, the raw text for a raw step, None for a GET
    seconds: float
    record: Mapping[str, Any]  # the compat record (_record.record_of), with status and findings
    findings: tuple[Finding, ...]
    excerpt: str  # the start of the answer as text, for reports

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "sent": self.sent,
            "seconds": round(self.seconds, 4),
            "record": dict(self.record),
            "excerpt": self.excerpt,
        }


@dataclass(frozen=True, slots=True)
class CaseResult:
    id: str
    title: str
    refs: tuple[str, ...]
    steps: tuple[StepResult, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    skipped: str | None = None

    @property
    def outcome(self) -> Literal["pass", "fail", "skip"]:
        if self.skipped is not None:
            return "skip"
        return "fail" if any(c.outcome == "fail" for c in self.checks) else "pass"

    def findings(self) -> list[tuple[str, Finding]]:
        """(step, finding) for every finding of the case: the checker's and the expectations'."""
        out = [(s.name, f) for s in self.steps for f in s.findings]
        for check in self.checks:
            if check.id.startswith("expect:"):
                out.extend((check.step, f) for f in check.findings)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "refs": list(self.refs),
            "outcome": self.outcome,
            "skipped": self.skipped,
            "checks": [c.as_dict() for c in self.checks],
            "steps": [s.as_dict() for s in self.steps],
        }


def score_of(cases: Iterable[CaseResult]) -> dict[str, Any]:
    passed: Counter[str] = Counter()
    run: Counter[str] = Counter()
    for case in cases:
        for check in case.checks:
            if check.outcome in ("pass", "fail"):
                run[check.endpoint] += 1
                passed[check.endpoint] += check.outcome == "pass"

    def entry(p: int, r: int) -> dict[str, Any]:
        # tenths rounded half up in integers, so the HTML report's JavaScript gets the same figure
        return {"passed": p, "run": r, "percent": ((2000 * p + r) // (2 * r)) / 10 if r else None}

    return {
        "total": entry(sum(passed.values()), sum(run.values())),
        "by_endpoint": {ep: entry(passed[ep], run[ep]) for ep in sorted(run)},
    }


@dataclass(slots=True)
class SideResult:
    label: str  # "A" (the endpoint probed) or "B" (--against)
    url: str
    model: str
    steering: Steering
    cases: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    title: str = ""  # what the reports call the endpoint besides its URL (--name)

    @property
    def name(self) -> str:
        return f"{self.label} ({self.title or self.url})"

    def score(self) -> dict[str, Any]:
        return score_of(self.cases)

    def counts(self) -> dict[str, int]:
        c = Counter(f.severity for case in self.cases for _, f in case.findings())
        return {"error": c["error"], "warning": c["warning"], "note": c["note"]}

    def effects(self) -> dict[tuple[str, str], str]:
        """(case, parameter) -> what this endpoint did with it, for every case that measures one:
        ``honoured``, ``ignored``, ``refused`` (an expectation failed on an error answer) or
        ``cannot tell``."""
        out: dict[tuple[str, str], str] = {}
        rank = {"honoured": 0, "cannot tell": 1, "refused": 2, "ignored": 3}
        for case in self.cases:
            for check in case.checks:
                if not check.parameter:
                    continue
                if check.ignored:
                    verdict = "ignored"
                elif check.outcome == "fail":
                    verdict = "refused"
                elif check.outcome == "pass":
                    verdict = "honoured"
                else:
                    verdict = "cannot tell"
                key = (case.id, check.parameter)
                if key not in out or rank[verdict] > rank[out[key]]:
                    out[key] = verdict
        return out

    def ignored(self) -> list[dict[str, Any]]:
        """Each parameter this endpoint accepted and ignored: case, parameter, step and what was seen."""
        return [
            {"case": case.id, "parameter": check.parameter, "step": check.step, "seen": check.message}
            for case in self.cases
            for check in case.checks
            if check.ignored
        ]

    def finding_rows(self) -> list[dict[str, Any]]:
        return [{"case": case.id, "step": step, **f.as_dict()} for case in self.cases for step, f in case.findings()]

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "url": self.url,
            "title": self.title,
            "model": self.model,
            "steering": self.steering.as_dict(),
            "seconds": round(self.seconds, 3),
            "score": self.score(),
            "counts": self.counts(),
            "outcomes": dict(Counter(c.outcome for c in self.cases)),
            "cases": [c.as_dict() for c in self.cases],
            "findings": self.finding_rows(),
            "ignored": self.ignored(),
        }


def parameter_table(sides: Sequence[SideResult]) -> list[dict[str, Any]]:
    """One row per (case, parameter) any side measured: what each side did with it (``by_side``:
    label -> honoured / ignored / refused / cannot tell / not run) and, where it ignored it, what
    was seen. The reports show it side by side: raw backend against gateway."""
    effects = [side.effects() for side in sides]
    seen: list[dict[tuple[str, str], str]] = [{} for _ in sides]
    for side, found in zip(sides, seen, strict=True):
        for r in side.ignored():
            found.setdefault((r["case"], r["parameter"]), r["seen"])  # the first check that saw it
    keys = list(dict.fromkeys(k for e in effects for k in e))
    return [
        {
            "case": case,
            "parameter": parameter,
            "by_side": {s.label: e.get((case, parameter), "not run") for s, e in zip(sides, effects, strict=True)},
            "seen": {s.label: w[(case, parameter)] for s, w in zip(sides, seen, strict=True) if (case, parameter) in w},
        }
        for case, parameter in keys
    ]


def key_of(row: Mapping[str, Any]) -> FindingKey:
    return (str(row.get("case")), str(row.get("step")), str(row.get("rule")), str(row.get("path")))


def baseline_keys(results: Mapping[str, Any]) -> set[FindingKey]:
    """The findings of side A of an earlier ``results.json`` (messages and chunk numbers vary; keys do not)."""
    sides = results.get("sides")
    side = sides.get("A") if isinstance(sides, Mapping) else None
    rows = side.get("findings") if isinstance(side, Mapping) else None
    if not isinstance(rows, list):
        raise ValueError("not a probe results file: no sides.A.findings")
    return {key_of(r) for r in rows if isinstance(r, Mapping)}


def new_errors(side: SideResult, baseline: set[FindingKey] | None) -> list[Mapping[str, Any]]:
    """Error-level findings of ``side``, less those the baseline already had."""
    rows: Sequence[Mapping[str, Any]] = [r for r in side.finding_rows() if r["severity"] == "error"]
    return [r for r in rows if baseline is None or key_of(r) not in baseline]


@dataclass(slots=True)
class ProbeRun:
    """A whole run: side A (the endpoint probed), side B with --against, and their comparison."""

    sides: list[SideResult]
    created: str  # ISO 8601, UTC
    comparison: Mapping[str, Any] | None = None
    version: str = ""

    @property
    def primary(self) -> SideResult:
        return self.sides[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "oaishim_probe": 1,
            "version": self.version,
            "created": self.created,
            "sides": {side.label: side.as_dict() for side in self.sides},
            "parameters": parameter_table(self.sides),
            "comparison": self.comparison,
        }
