"""Raw examples of each backend's documented quirks (tests/fixtures/<backend>/manifest.yaml): the
checker reports exactly the rule ids each case names, no fewer and no more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from oaishim.check import check, exchange_from_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BACKENDS = ("vllm", "sglang", "trtllm", "llamacpp", "ollama")


def cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for backend in BACKENDS:
        for case in yaml.safe_load((FIXTURES / backend / "manifest.yaml").read_text()):
            out.append((backend, case))
    return out


CASES = cases()


def test_every_backend_has_cases() -> None:
    counts = {b: sum(1 for backend, _ in CASES if backend == b) for b in BACKENDS}
    assert all(n >= 10 for n in counts.values()), counts


@pytest.mark.parametrize(("backend", "case"), CASES, ids=[f"{b}/{c['name']}" for b, c in CASES])
def test_fixture_raises_exactly_its_documented_rules(backend: str, case: dict[str, Any]) -> None:
    raw = (FIXTURES / backend / case["file"]).read_bytes()
    exchange = exchange_from_bytes(
        raw, request=case.get("request"), status=case["status"], headers={"content-type": case["content_type"]}
    )
    findings = check(exchange)
    got = {f.rule for f in findings if f.severity != "note"}
    assert got == set(case["expect"]), [(f.rule, f.path, f.chunk, f.message) for f in findings if f.severity != "note"]
