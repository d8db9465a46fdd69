"""The probe catalogue: cases as data (``cases.yaml``), loaded into typed, checked objects.

A case is one or more HTTP requests (*steps*) and the *expectations* that judge them beyond the
checker. Every step is also judged by the checker (:func:`oaishim.check.check`). The YAML shape::

    cases:
      - id: compat.stop                  # stable: baselines and reports refer to it
        title: a stop string that occurs in the text
        refs: ["compat step 4", "V-29"]  # a docs/backend-quirks.md row, or a comparison step
        exclusive: true                  # run alone: nothing batched with it (determinism)
        needs: [eot]                     # skipped unless the probe knows this (eot, bias)
        tolerate: [reasoning_content]    # these unknown fields are notes in this case only
        parameter: stop                  # the parameter whose effect the expectations measure
        steps:
          - name: plain
            path: /v1/chat/completions   # the default; GET when there is no body
            body: {messages: [...], max_tokens: 8}   # "model" is added unless given
            raw: '{"model": '            # instead of body: bytes sent as they are
            steer: {text: "Hello world"} # or {tool_call: true}: see _steer.py
        expect:
          - {is: same-text, steps: [a, b], severity: error, why: "..."}

``parameter`` names what the case's expectations measure the effect of (an expectation may name its
own, or ``parameter: ""`` for none). When such an expectation fails although every step it judges
was answered 200, the endpoint accepted the parameter and ignored it: an error-level finding
"<endpoint> ignored <parameter>: <what was seen>", whatever the expectation's severity, and the
reports list the ignored parameters per endpoint side by side. (A step answered with an error status
refused the parameter instead: the expectation fails as usual.)

Strings (and mapping keys) may hold ``${name}`` placeholders, filled in by :func:`fill` from the
run's variables (``model``, ``eot``, ``bias_token_id``, ``overflow_prompt``, ...). A string that is
exactly one placeholder takes the variable's own type, so ``"${bias_token_id}"`` can become an int.
A step's answer adds variables for the steps after it (a Responses answer: ``${<step>_id}``, and
``${<step>_call_id}`` of its first function call); a step that still holds a placeholder after
filling is not sent, and what judges it says "cannot tell".
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from oaishim.check import RULES, Severity

__all__ = [
    "Case",
    "CatalogueError",
    "Expect",
    "Step",
    "fill",
    "load_catalogue",
    "parse_catalogue",
    "select",
    "unfilled",
]

NEEDS = frozenset({"eot", "bias"})
_SEVERITIES: frozenset[str] = frozenset({"error", "warning", "note"})
_PLACEHOLDER = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")
_ONE_PLACEHOLDER = re.compile(r"^\$\{([a-z_][a-z0-9_]*)\}$")


class CatalogueError(ValueError):
    """The catalogue file does not have the shape this module documents."""


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    path: str = "/v1/chat/completions"
    method: str = "POST"
    body: Mapping[str, Any] | None = None
    raw: str | None = None
    steer: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Expect:
    kind: str  # a key of oaishim.probe._expect.EXPECTATIONS
    params: Mapping[str, Any]
    severity: Severity = "error"
    why: str = ""
    parameter: str = ""  # the parameter whose effect it measures ("": none)

    @property
    def steps(self) -> tuple[str, ...]:
        names = self.params.get("steps") or [self.params.get("step")]
        return tuple(str(n) for n in names if n is not None)


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    title: str
    steps: tuple[Step, ...]
    expect: tuple[Expect, ...] = ()
    refs: tuple[str, ...] = ()
    exclusive: bool = False
    needs: frozenset[str] = frozenset()
    tolerate: frozenset[str] = frozenset()
    parameter: str = ""  # what the case measures the effect of (the default of its expectations)

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


def _step(data: Any, where: str) -> Step:
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise CatalogueError(f"{where}: a step needs a name")
    body, raw = data.get("body"), data.get("raw")
    if (body is None) == (raw is None) and data.get("method", "POST") == "POST":
        raise CatalogueError(f"{where}: a POST step needs exactly one of body and raw")
    if body is not None and not isinstance(body, Mapping):
        raise CatalogueError(f"{where}: body must be a mapping")
    steer = data.get("steer") or {}
    if not isinstance(steer, Mapping) or not set(steer) <= {"text", "tool_call", "thinking"}:
        raise CatalogueError(f"{where}: steer takes text, tool_call and/or thinking")
    method = str(data.get("method", "POST" if body is not None or raw is not None else "GET"))
    return Step(data["name"], str(data.get("path", "/v1/chat/completions")), method, body, raw, dict(steer))


def _parameter(value: Any, where: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise CatalogueError(f"{where}: parameter must be a string")
    return value


def _expect(data: Any, where: str, steps: set[str], kinds: set[str], parameter: str) -> Expect:
    if not isinstance(data, Mapping) or data.get("is") not in kinds:
        raise CatalogueError(f"{where}: expectation {data!r} is not one of {sorted(kinds)}")
    severity = data.get("severity", "error")
    if severity not in _SEVERITIES:
        raise CatalogueError(f"{where}: severity {severity!r}")
    params = {k: v for k, v in data.items() if k not in ("is", "severity", "why", "parameter")}
    own = _parameter(data.get("parameter"), where, parameter)
    expect = Expect(str(data["is"]), params, severity, str(data.get("why", "")), own)
    unknown = [s for s in expect.steps if s not in steps]
    if unknown:
        raise CatalogueError(f"{where}: unknown step(s) {unknown}")
    return expect


def parse_catalogue(data: Any, kinds: Iterable[str] | None = None) -> tuple[Case, ...]:
    """Cases from the YAML document; ``kinds`` are the known expectation names."""
    if kinds is None:
        from oaishim.probe._expect import EXPECTATIONS

        kinds = EXPECTATIONS
    known = set(kinds)
    entries = data.get("cases") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise CatalogueError("the catalogue needs a list under 'cases'")
    cases: list[Case] = []
    for i, entry in enumerate(entries):
        where = f"cases[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
            raise CatalogueError(f"{where}: a case needs an id")
        where = f"case {entry['id']}"
        steps = tuple(_step(s, f"{where} step {j}") for j, s in enumerate(entry.get("steps") or []))
        if not steps:
            raise CatalogueError(f"{where}: no steps")
        names = {s.name for s in steps}
        if len(names) != len(steps):
            raise CatalogueError(f"{where}: step names repeat")
        needs = frozenset(entry.get("needs") or ())
        if not needs <= NEEDS:
            raise CatalogueError(f"{where}: needs {sorted(needs - NEEDS)} unknown")
        parameter = _parameter(entry.get("parameter"), where)
        expect = tuple(_expect(e, where, names, known, parameter) for e in entry.get("expect") or [])
        cases.append(
            Case(
                id=entry["id"],
                title=str(entry.get("title", entry["id"])),
                steps=steps,
                expect=expect,
                refs=tuple(str(r) for r in entry.get("refs") or ()),
                exclusive=bool(entry.get("exclusive", False)),
                needs=needs,
                tolerate=frozenset(entry.get("tolerate") or ()),
                parameter=parameter,
            )
        )
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise CatalogueError("case ids repeat")
    if any(c.id in RULES for c in cases):
        raise CatalogueError("a case id may not be a checker rule id")
    return tuple(cases)


def load_catalogue(text: str | None = None) -> tuple[Case, ...]:
    """The built-in catalogue (``cases.yaml`` beside this module), or the YAML ``text`` given."""
    if text is None:
        text = resources.files("oaishim.probe").joinpath("cases.yaml").read_text(encoding="utf-8")
    return parse_catalogue(yaml.safe_load(text))


def select(cases: Sequence[Case], patterns: str | None) -> tuple[Case, ...]:
    """Cases whose id matches one of the comma-separated globs (all when ``patterns`` is empty)."""
    if not patterns:
        return tuple(cases)
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    return tuple(c for c in cases if any(fnmatch.fnmatchcase(c.id, g) for g in globs))


def _fill_str(text: str, variables: Mapping[str, Any]) -> Any:
    whole = _ONE_PLACEHOLDER.match(text)
    if whole and whole.group(1) in variables:
        return variables[whole.group(1)]
    return _PLACEHOLDER.sub(lambda m: str(variables.get(m.group(1), m.group(0))), text)


def unfilled(*values: Any) -> str | None:
    """The first ``${name}`` left in ``values`` after :func:`fill`: a variable no step gave."""
    for value in values:
        if isinstance(value, str):
            if found := _PLACEHOLDER.search(value):
                return found.group(1)
        elif isinstance(value, Mapping):
            if (name := unfilled(*value.keys(), *value.values())) is not None:
                return name
        elif isinstance(value, list) and (name := unfilled(*value)) is not None:
            return name
    return None


def fill(value: Any, variables: Mapping[str, Any]) -> Any:
    """``value`` with every ``${name}`` replaced (in strings and mapping keys), as a fresh copy."""
    if isinstance(value, str):
        return _fill_str(value, variables)
    if isinstance(value, Mapping):
        return {str(_fill_str(str(k), variables)): fill(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, variables) for v in value]
    return value
