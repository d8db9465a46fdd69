"""Collecting findings: JSON paths, severities, and folding generic findings into specific ones."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from oaishim.check._model import Finding
from oaishim.check._rules import GENERIC_RULES, RULES, Severity

_PATHS: Final[
    dict[tuple[str | int, ...], str]
] = {}  # jpath's answers: the rules ask for the same few paths every chunk


def jpath(*parts: str | int) -> str:
    """``jpath("choices", 0, "delta")`` -> ``$.choices[0].delta``."""
    path = _PATHS.get(parts)
    if path is None:
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)
        if len(_PATHS) >= 4096:
            _PATHS.clear()
        path = _PATHS[parts] = "$" + path
    return path


def child(path: str, part: str | int) -> str:
    return path + (f"[{part}]" if isinstance(part, int) else f".{part}")


class Sink:
    """Where rules put their findings; one per checked exchange."""

    __slots__ = ("findings",)

    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def add(
        self,
        rule: str,
        path: str,
        message: str,
        *,
        chunk: int | None = None,
        severity: Severity | None = None,
    ) -> None:
        self.findings.append(Finding(rule, severity or RULES[rule][0], path, chunk, message))

    def result(self) -> list[Finding]:
        return fold(self.findings)


def _covers(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith((outer + ".", outer + "["))


def fold(findings: Iterable[Finding]) -> list[Finding]:
    """Drop generic (schema, unknown-field) findings that a specific finding already explains.

    A specific finding at path P in chunk C explains every generic finding at or below P in C, so
    one mistake gives one finding. Order is kept; exact duplicates are dropped.
    """
    items = list(findings)
    specific = [(f.chunk, f.path) for f in items if f.rule not in GENERIC_RULES]
    out: list[Finding] = []
    seen: set[Finding] = set()
    for f in items:
        if f in seen:
            continue
        if f.rule in GENERIC_RULES and any(c == f.chunk and _covers(p, f.path) for c, p in specific):
            continue
        seen.add(f)
        out.append(f)
    return out
