"""Responses-API clients other than the official SDKs, through the gateway in front of the
simulated TensorRT-LLM (``_trt.TrtSim``: ``<think>`` in content, unknown fields refused), each with a
plain answer and a function-tool loop, plain and streamed:

* the Vercel AI SDK, ``@ai-sdk/openai``'s ``openai.responses(model)`` (ai 6 on Node 20:
  ``generateText``, ``streamText``, a zod tool, ``stopWhen: stepCountIs(3)``). Its default is
  ``store: true``, so the second step sends the first step's reasoning as an ``item_reference``;
* langchain-openai's ``ChatOpenAI(use_responses_api=True)`` (``invoke``, ``stream``, ``bind_tools``).

Both are installed by ``scripts/install-clients`` (the AI SDK in its own npm folder, LangChain in the
clients' venv); the tests skip where they are not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _installed import ROOT, installed, missing, trt_gateway
from _responses import INSTRUCTIONS, MODEL
from _trt import ANSWER_CHAT, ANSWER_RESULT, TrtSim

pytestmark = pytest.mark.live
HERE = Path(__file__).parent
KEY = "sk-responses-clients-0123"
WEATHER = "查看东京天气 Tokyo"
RESULT = ANSWER_RESULT.format(result="Tokyo：晴，25°C")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TrtSim]]:
    with trt_gateway(tmp_path_factory.mktemp("state"), KEY) as running:
        yield running


def test_vercel_ai_sdk_responses_model(served: tuple[str, TrtSim]) -> None:
    folder = ROOT / "ai-sdk-responses"
    node = shutil.which("node")
    if node is None or not (folder / "node_modules" / "@ai-sdk" / "openai").is_dir():
        missing("the Vercel AI SDK")
    url, sim = served
    config = {"baseURL": url + "/v1", "apiKey": KEY, "model": MODEL, "system": INSTRUCTIONS, "weather": WEATHER}
    config["hello"] = "你好"
    script = (HERE / "_ai_sdk_responses.mjs").read_text()
    done = subprocess.run(
        [str(node), "--input-type=module", "-e", script],
        cwd=folder,  # the bare imports resolve from the folder's node_modules
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
            "OAISHIM_TEST_CONFIG": json.dumps(config),
        },
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    out = json.loads(done.stdout)
    assert out["plain"] == {"text": ANSWER_CHAT, "reasoning": "", "finish": "stop"}
    two_steps = [{"finish": "tool-calls", "calls": ["get_weather"]}, {"finish": "stop", "calls": []}]
    for run in ("generate", "stream"):
        assert out[run]["text"] == RESULT and out[run]["finish"] == "stop"
        assert out[run]["steps"] == two_steps
    assert out["stream"]["final"] == RESULT
    assert {"tool-call", "tool-result", "text-delta", "finish"} <= set(out["stream"]["parts"])
    assert out["tool_calls"] == ["Tokyo", "Tokyo"]
    assert sim.rejected == []


def test_langchain_chat_openai_on_the_responses_api(served: tuple[str, TrtSim]) -> None:
    python = installed("py", "bin", "python")
    if python is None or installed("py", ".oaishim-ready") is None:
        missing("langchain-openai")
    assert python is not None
    url, sim = served
    config = {"base_url": url + "/v1", "api_key": KEY, "model": MODEL, "system": INSTRUCTIONS, "weather": WEATHER}
    config["hello"] = "你好"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTHON"))}
    done = subprocess.run(
        [str(python), str(HERE / "_langchain_responses.py")],
        input=json.dumps(config).encode(),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    out = json.loads(done.stdout)
    for run in ("plain", "stream"):
        assert out[run]["calls"] == [["get_weather", {"city": "Tokyo"}]]
        assert out[run]["answer"] == RESULT and out[run]["hello"] == ANSWER_CHAT
        assert out[run]["response_id"].startswith("resp_")
    assert out["tool_runs"] == ["Tokyo", "Tokyo"]
    assert sim.rejected == []
