"""The OpenAI Agents SDK (``openai-agents`` 0.24, its own virtual environment from
``scripts/install-clients``) runs an agent with one function tool to completion through the
gateway, on its default Responses model, against the simulated TensorRT-LLM: the model calls the
tool, the SDK runs it and sends the output back, the model answers with it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _installed import installed, missing, trt_gateway
from _responses import INSTRUCTIONS, MODEL
from _trt import ANSWER_RESULT, TrtSim

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("_agent_run.py")
KEY = "sk-agent-client-0123456"


@pytest.fixture(scope="module")
def python() -> Path:
    """The Python clients' venv (openai-agents among them)."""
    return installed("py", "bin", "python") or missing("the Agents SDK")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TrtSim]]:
    with trt_gateway(tmp_path_factory.mktemp("state"), KEY) as running:
        yield running


@pytest.mark.parametrize("stream", [False, True])
def test_an_agent_with_a_function_tool_runs_to_completion(
    python: Path, served: tuple[str, TrtSim], stream: bool
) -> None:
    url, sim = served
    config = {
        "base_url": url + "/v1",
        "api_key": KEY,
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "question": "查看东京天气 Tokyo",
        "stream": stream,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTHON"))}
    done = subprocess.run(
        [str(python), str(SCRIPT)],
        input=json.dumps(config).encode(),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    result = json.loads(done.stdout)
    assert result["tool_calls"] == ["Tokyo"]
    assert result["final_output"] == ANSWER_RESULT.format(result="Tokyo：晴，25°C")
    assert "tool_call_item" in result["items"] and "tool_call_output_item" in result["items"]
    assert sim.rejected == []
