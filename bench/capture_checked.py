"""How many of a burst's records the capture process leaves unchecked, and what it spends on them.

A gateway with ``--capture`` (one worker, `bench/upstream.py`), wrk at ``--connections`` (32) for
``--seconds`` (4) after a second of warm-up; then the gateway is left quiet until its capture
process idles (`compare.settle`). Prints one line a build and round: the requests, the serving
process's CPU a request (µs), the capture process's a request while the load ran and in all (µs,
its records counted whole), and how many of the records in the capture folder are stored
unchecked (``findings: null``, past the checker's budget).

    .venv/bin/python bench/capture_checked.py [--src build/compiled-core/A,build/compiled-core/B] [--rounds 2]

``--src``: source folders (a compiled core, or a ``git archive``'s ``src``) run on this
checkout's venv; none: the venv's own install.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import procstat
from capture_c32 import gateway
from compare import free_port, settle, wrk


def unchecked(folder: Path) -> tuple[int, int]:
    """(records, of which unchecked) in a capture folder."""
    lines = [line for path in sorted(folder.glob("*.jsonl")) for line in path.read_bytes().splitlines()]
    return len(lines), sum(1 for line in lines if b'"findings":null' in line)


def one(src: Path | None, upstream: str, connections: int, seconds: float) -> str:
    with gateway(src, True, upstream, wait=60) as (proc, url, tmp):

        def pids() -> list[int]:
            return procstat.tree(proc.pid)

        wrk(url, connections, 1)
        settle(pids)
        tree = sorted(pids())
        serving, rest = tree[-1:], tree[:-1]
        s0, r0 = procstat.cpu_seconds(serving), procstat.cpu_seconds(rest)
        figures = wrk(url, connections, seconds)
        s1, r1 = procstat.cpu_seconds(serving), procstat.cpu_seconds(rest)
        settled = settle(pids)
        r2 = procstat.cpu_seconds(rest)
        proc.terminate()  # the records it still holds are written as it stops
        proc.wait(60)
        records, left = unchecked(tmp / "capture")
    n = figures["requests"]
    return (
        f"{n} requests: serving {(s1 - s0) / n * 1e6:.1f} µs a request, capture process {(r1 - r0) / n * 1e6:.1f}"
        f" while the load ran, {(r2 - r0) / n * 1e6:.1f} in all{'' if settled else ' (not settled)'};"
        f" {left} of {records} records unchecked"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default="", help="comma-separated source folders (default: the venv's install)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4)
    args = parser.parse_args()
    sources: list[Path | None] = [Path(s) for s in args.src.split(",") if s] or [None]
    port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "upstream.py"), str(port)], stdout=subprocess.PIPE
    )
    try:
        assert upstream.stdout is not None
        upstream.stdout.readline()
        for round_ in range(args.rounds):
            for src in sources:
                line = one(src, f"http://127.0.0.1:{port}", args.connections, args.seconds)
                print(f"round {round_ + 1}, {src or 'installed'}: {line}", flush=True)
    finally:
        upstream.terminate()


if __name__ == "__main__":
    main()
