"""Capture off and capture on served side by side and loaded at the same time: each worker's CPU a
request, under one and the same machine state.

`bench/capture_c32.py` runs the two one after the other, and on a VM whose speed drifts between
runs (capture off alone moved between 66 and 116 µs of user time a request at c32 on 2026-12-06)
a 10 % effect does not read. Here one gateway of each kind is started, wrk loads both at once
(``--concurrency`` connections each), and each worker's user and system time is divided by the
requests it answered. The two compete for the same cores, so the latencies printed are not
capture's cost; the CPU a request is. One line a round, then the medians.

    .venv/bin/python bench/capture_side.py [--src build/compiled-core/X] [--rounds 5] [--seconds 6] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat
from capture_c32 import BENCH, gateway
from compare import free_port, wrk


def round_once(src: Path | None, upstream: str, args: argparse.Namespace) -> dict[bool, tuple[float, float, int]]:
    with contextlib.ExitStack() as stack:
        running = {capture: stack.enter_context(gateway(src, capture, upstream))[:2] for capture in (False, True)}
        for _, url in running.values():
            wrk(url, 4, 1)  # warm up
        time.sleep(0.3)
        workers = {capture: max(procstat.tree(proc.pid)) for capture, (proc, _) in running.items()}
        before = {capture: procstat.cpu_split([pid]) for capture, pid in workers.items()}
        got: dict[bool, dict[str, Any]] = {}

        def load(capture: bool, url: str) -> None:
            got[capture] = wrk(url, args.concurrency, args.seconds)

        threads = [threading.Thread(target=load, args=(capture, url)) for capture, (_, url) in running.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        out = {}
        for capture, pid in workers.items():
            (u0, k0), (u1, k1) = before[capture], procstat.cpu_split([pid])
            n = got[capture]["requests"]
            out[capture] = ((u1 - u0) / n * 1e6, (k1 - k0) / n * 1e6, n)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", type=Path, help="a source folder (default: the venv's install)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    port = free_port()
    upstream = subprocess.Popen([sys.executable, str(BENCH / "upstream.py"), str(port)], stdout=subprocess.PIPE)
    assert upstream.stdout is not None
    upstream.stdout.readline()
    ratios: list[float] = []
    try:
        for i in range(args.rounds):
            got = round_once(args.src, f"http://127.0.0.1:{port}", args)
            (u_off, s_off, n_off), (u_on, s_on, n_on) = got[False], got[True]
            ratios.append(u_on / u_off)
            print(
                f"round {i}: off user {u_off:.1f} µs, system {s_off:.1f} µs ({n_off} requests); "
                f"on user {u_on:.1f} µs, system {s_on:.1f} µs ({n_on}); user on ÷ off {u_on / u_off:.3f}",
                flush=True,
            )
    finally:
        upstream.terminate()
    print(f"user on ÷ off: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
