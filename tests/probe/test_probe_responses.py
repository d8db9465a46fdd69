"""The probe's Responses cases (``responses.*``): the view a client holds, and a run against the gateway.

The run goes over real sockets to ``oaishim serve`` in front of the simulated TensorRT-LLM of the
gateway tests (``tests/server/_trt.py``), so every case's steps are sent, answered and judged by the
checker's ``responses.*`` rules and the cases' own expectations, as against a live backend.
The simulation's canned answers ignore the token limit and its backend refuses ``tool_choice:
"required"`` (T-quirks of that release), so those two checks are left to the live runs
(``test_probe_live.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from _servers import Replayer, RunningGateway, free_port
from _trt import TrtSim

from oaishim.probe import ProbeOptions, ProbeRun, Target, load_catalogue, run_probe, select
from oaishim.server.config import ModelRoute, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openai-live-responses"


@pytest.fixture(scope="module")
def run() -> Iterator[ProbeRun]:
    with Replayer() as backend:
        backend.responder = TrtSim()
        route = ModelRoute("*", (backend.url,), "trtllm@1.4")
        with RunningGateway(Settings(models=(route,), port=free_port(), state="memory")) as gateway:
            cases = select(load_catalogue(), "responses.*")
            yield run_probe([Target(gateway.url + "/v1", "qwen3")], cases, ProbeOptions(timeout=30))


SIMULATION_LIMITS = ("responses.plain expect:completion-tokens-at-most:", "responses.function-call expect:tool-call:")


def test_every_responses_case_passes_through_the_gateway(run: ProbeRun) -> None:
    side = run.primary
    assert [f for f in _failures(run) if not f.startswith(SIMULATION_LIMITS)] == []
    wire = [f for c in side.cases for s in c.steps for f in s.findings if f.severity in ("error", "warning")]
    assert wire == []  # the checker found nothing in any step that was sent
    assert set(side.score()["by_endpoint"]) == {"/v1/responses", "/v1/responses/{id}"}


def _failures(run: ProbeRun) -> list[str]:
    return [f"{c.id} {ch.id}: {ch.message}" for c in run.primary.cases for ch in c.checks if ch.outcome == "fail"]
