"""What ``serve --capture`` costs the serving process: capture off and on, at concurrency 1 and 32.

A smaller harness than ``bench/run`` for one question, runnable on a shared machine: the wall-clock
latency of each request (p50, p99) and, steadier than that when other work shares the cores, the CPU
time of the serving process per request (from /proc; the capture process's own CPU is given apart,
it runs outside the serving process: all of it, and the part spent while the load ran, since it
builds most records once the gateway is quiet; with ``--workers N``, the serving figure sums the workers). Streams of ``--tokens`` chunks against ``bench/upstream.py``.

    PYTHONPATH=src python bench/capture_cost.py [--requests 400] [--tokens 16] [--src OTHER/src] [--workers 2]

``--src`` runs oaishim from another source folder (a ``git archive`` of an older commit) beside
this one, as ``before``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat
from loadgen import connect, request_bytes

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int, process: subprocess.Popen[bytes]) -> None:
    import http.client

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "it exited"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("did not start")


async def load(url: str, requests: int, concurrency: int, tokens: int) -> list[float]:
    raw = request_bytes(url, tokens, True)
    left = requests
    times: list[float] = []

    async def worker() -> None:
        nonlocal left
        client = await connect(url)
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            await client.call(raw)
            times.append(time.perf_counter() - t0)
        client.transport.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def settled(pids: list[int], most: float = 20.0) -> float:
    """The CPU seconds of ``pids`` once they stop using any (0.3 s without a tick), waiting ``most``."""
    last, deadline = procstat.cpu_seconds(pids), time.monotonic() + most
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = procstat.cpu_seconds(pids)
        if now == last:
            break
        last = now
    return last


def measure(src: Path, capture: bool, upstream: str, args: argparse.Namespace, workers: int = 1) -> dict[str, Any]:
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="capture-cost-"))
    argv = [sys.executable, "-m", "oaishim", "serve", "--upstream", upstream, "--profile", "vllm",
            "--served-model-name", "bench", "--port", str(port), "--log-level", "warning", "--access-log", "off"]  # fmt: skip
    if capture:
        argv += ["--capture", str(tmp / "capture")]
    if workers > 1:
        argv += ["--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(src), "XDG_STATE_HOME": str(tmp)}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, process)
        tree = sorted(procstat.tree(process.pid))
        # forked in this order: the parent, the capture process, the serving workers
        serving = tree[-workers:] if len(tree) > 1 else tree
        helpers = [p for p in tree if p not in serving]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        uvloop.run(load(url, 50, 4, args.tokens))  # warm up
        time.sleep(0.3)
        out: dict[str, Any] = {}
        for c in (1, 32):
            cpu0, side0 = procstat.cpu_seconds(serving), procstat.cpu_seconds(helpers)
            times = uvloop.run(load(url, args.requests, c, args.tokens))
            cpu1, during = procstat.cpu_seconds(serving), procstat.cpu_seconds(helpers)
            side1 = settled(helpers)  # the capture process builds what it held once the load is over
            out[f"c{c}"] = {
                "p50_ms": round(pct(times, 0.5) * 1e3, 3),
                "p99_ms": round(pct(times, 0.99) * 1e3, 3),
                "serving_cpu_us": round((cpu1 - cpu0) / len(times) * 1e6, 1),
                "other_cpu_us": round((side1 - side0) / len(times) * 1e6, 1),
                "other_cpu_during_load_us": round((during - side0) / len(times) * 1e6, 1),
            }
        return out
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)  # (a capture under load writes hundreds of MB)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, help="also measure capture on with this source folder, as before")
    parser.add_argument("--workers", type=int, default=0, help="also measure capture off and on with this many workers")
    args = parser.parse_args()
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "bench/upstream.py"), str(up_port)], stdout=subprocess.PIPE)
    assert upstream.stdout is not None
    upstream.stdout.readline()
    try:
        cases = {"off": (ROOT / "src", False, 1), "on": (ROOT / "src", True, 1)}
        if args.src:
            cases["on_before"] = (args.src, True, 1)
        if args.workers > 1:
            cases[f"off_{args.workers}w"] = (ROOT / "src", False, args.workers)
            cases[f"on_{args.workers}w"] = (ROOT / "src", True, args.workers)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
        for _ in range(args.rounds):  # interleaved, so drifting machine load touches every case alike
            for name, (src, capture, workers) in cases.items():
                results[name].append(measure(src, capture, f"http://127.0.0.1:{up_port}", args, workers))
        summary = {}
        for name, runs in results.items():
            summary[name] = {
                c: {k: sorted(r[c][k] for r in runs)[len(runs) // 2] for k in runs[0][c]} for c in ("c1", "c32")
            }
        print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    finally:
        upstream.terminate()


if __name__ == "__main__":
    main()
