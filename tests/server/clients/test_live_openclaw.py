"""The OpenClaw agent (headless, ``openclaw agent --local --session-id … --json``, two turns in one session) against a
reasoning model on TensorRT-LLM 1.3 without parsers (``_reasoner.Reasoner``, a test double): turn 1 asks it
to read a file with its ``read`` tool — the tool must run and the answer carry the file's code word; turn 2
asks again and must be answered from the replayed history. With the model's reasoning-effort setting on
(``compat.supportsReasoningEffort`` and ``--thinking medium``: ``reasoning_effort`` is sent) and off, through
the gateway with profile ``trtllm`` and ``auto``, and straight at the backend, where ``reasoning_effort`` is a
400 and the tool call left as text is refused by the agent.

OpenClaw has no loop limit: the backend stops calling tools once there is a tool result after the ask, every
call is bounded in time, and the number of model requests per session is checked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _clients import installed, node_env, node_version, record
from _reasoner import Reasoner

pytestmark = pytest.mark.live

CALL_LIMIT_S = 180  # one agent call (it spends 15-20 s starting up on 2 cores)
MAX_REQUESTS = 8  # per session: 2 for the tool turn, 1 for the second, plus its retries
CODE = "PELICAN-42"
TURNS = (
    ("tool_turn", "Use the read tool with path=NOTE.txt and tell me the code word."),
    ("second_turn", "What was the code word again?"),
)
VIAS = ("gateway-trtllm", "gateway-auto", "direct")
EFFORTS = ("on", "off")


def config(base: str, workspace: Path, effort: str) -> dict[str, Any]:
    model = {
        "id": "qwen3",
        "name": "qwen3",
        "reasoning": True,
        "input": ["text"],
        "contextWindow": 131072,
        "maxTokens": 4096,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        # developer role on: the system prompt goes out as developer, which the backend's template drops
        "compat": {"supportsDeveloperRole": True, "supportsReasoningEffort": effort == "on"},
    }
    provider = {"baseUrl": base, "apiKey": "sk-test", "api": "openai-completions", "models": [model]}
    return {
        "models": {"providers": {"local": provider}},
        "agents": {"defaults": {"model": {"primary": "local/qwen3"}, "workspace": str(workspace)}},
    }


def find(value: Any, key: str) -> Any:
    """The first value under ``key`` anywhere in the agent's JSON report."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = find(item, key)
            if found is not None:
                return found
    return None


def turn(argv: list[str], env: dict[str, str], cwd: Path, name: str) -> dict[str, Any]:
    import subprocess

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CALL_LIMIT_S, env=env, cwd=cwd, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": f"no answer within {CALL_LIMIT_S} s"}
    try:
        report = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        report = {}
    text = find(report, "finalAssistantVisibleText") or find(report, "final") or ""
    tools = find(report, "toolSummary") or {}
    problems = []
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("[")]
        error = find(report, "error")
        why = error.get("message") if isinstance(error, dict) else (said or ["?"])[-1]
        problems.append(f"exit {done.returncode}: {str(why)[:200]}")
    if name == "tool_turn" and "read" not in (tools.get("tools") or []):
        problems.append(f"the read tool did not run ({tools or 'no tool calls'})")
    if "<think>" in text:
        problems.append("<think> markup in the answer")
    if CODE not in text:
        problems.append(f"answer {text[:80]!r} lacks the code word")
    return {"ok": not problems, "detail": "; ".join(problems), "text": text}


@pytest.fixture(scope="module")
def session(
    base_url: Callable[[str], str], reasoner: Reasoner, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, str], dict[str, Any]]:
    """One two-turn session per route and effort setting, run once and kept."""
    done: dict[tuple[str, str], dict[str, Any]] = {}

    def get(via: str, effort: str) -> dict[str, Any]:
        if (via, effort) in done:
            return done[via, effort]
        installed("node24")
        openclaw = installed("openclaw") / "node_modules" / ".bin" / "openclaw"
        home = tmp_path_factory.mktemp(f"openclaw-{via}-{effort}")
        workspace = home / "workspace"
        workspace.mkdir()
        (workspace / "NOTE.txt").write_text(f"The code word is {CODE}.\n")
        path = home / "openclaw.json"
        path.write_text(json.dumps(config(base_url(via), workspace, effort)))
        env = node_env(
            HOME=str(home), OPENCLAW_CONFIG_PATH=str(path), OPENCLAW_STATE_DIR=str(home / "state"), NO_COLOR="1"
        )
        env.pop("OPENAI_API_KEY", None)
        thinking = ["--thinking", "medium"] if effort == "on" else []
        sid = str(uuid.uuid4())
        before = len(reasoner.requests)
        results = {}
        for name, message in TURNS:
            argv = [str(openclaw), "agent", "--local", "--session-id", sid, *thinking, "--message", message, "--json"]
            argv += ["--timeout", str(CALL_LIMIT_S - 10)]
            results[name] = turn(argv, env, workspace, name)
        sent = len(reasoner.requests) - before
        version = json.loads((openclaw.parent.parent / "openclaw" / "package.json").read_text())["version"]
        record(f"openclaw (reasoning effort {effort})", via, {"openclaw": version, "node": node_version()}, results)
        done[via, effort] = {"cases": results, "requests": sent}
        return done[via, effort]

    return get


@pytest.mark.parametrize("effort", EFFORTS)
@pytest.mark.parametrize("via", VIAS[:2])
@pytest.mark.parametrize("case", [name for name, _ in TURNS])
def test_through_the_gateway(session: Callable[[str, str], dict[str, Any]], via: str, effort: str, case: str) -> None:
    result = session(via, effort)
    assert result["requests"] <= MAX_REQUESTS, f"{result['requests']} model requests: the agent looped"
    assert result["cases"][case]["ok"], result["cases"][case]["detail"]


@pytest.mark.parametrize("effort", EFFORTS)
@pytest.mark.parametrize("case", [name for name, _ in TURNS])
def test_straight_at_the_backend_breaks(session: Callable[[str, str], dict[str, Any]], effort: str, case: str) -> None:
    result = session("direct", effort)
    assert result["requests"] <= MAX_REQUESTS, f"{result['requests']} model requests: the agent looped"
    assert not result["cases"][case]["ok"], "passed without the gateway: this case does not measure it"
