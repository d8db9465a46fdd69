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
from _responses import INSTRUCTIONS, MODEL
from _servers import Replayer, RunningGateway, free_port
from _trt import ANSWER_RESULT, TrtSim

from oaishim.server.config import ModelRoute, Settings

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("_agent_run.py")
KEY = "sk-agent-client-0123456"


def clients_python() -> Path | None:
    """The Python clients' venv (openai-agents among them) that scripts/install-clients makes under
    ``$OAISHIM_CLIENTS``."""
    root = os.environ.get("OAISHIM_CLIENTS")
    path = (Path(root) if root else Path.home() / ".cache" / "oaishim" / "clients") / "py" / "bin" / "python"
    return path if path.exists() else None


@pytest.fixture(scope="module")
def python() -> Path:
    found = clients_python()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("the Agents SDK is not installed: run scripts/install-clients")
        pytest.skip("the Agents SDK is not installed: run scripts/install-clients")
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TrtSim]]:
    sim = TrtSim()
    with Replayer() as backend:
        backend.responder = sim
        route = ModelRoute("*", (backend.url,), "trtllm@1.4")
        state = str(tmp_path_factory.mktemp("state") / "responses.sqlite")
        with RunningGateway(Settings(models=(route,), port=free_port(), api_keys=(KEY,), state=state)) as gateway:
            yield gateway.url, sim


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
