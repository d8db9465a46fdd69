"""What ``serve --capture`` costs under `bench/run`'s plain load: wrk at concurrency 32, capture off
and on, one worker, for one or more builds of oaishim, rounds interleaved.

`bench/capture_cost.py` asks the same question with streams and its own load generator; this one
uses the load `bench/run` judges the goal by (wrk, a plain chat request, `bench/upstream.py`), and
splits the CPU time between the serving process and the rest of the gateway's tree (the capture
process) while the load runs, from /proc.

    .venv/bin/python bench/capture_c32.py [--src build/compiled-core/A,build/compiled-core/B] [--rounds 3] [--seconds 5]

``--src``: source folders (a compiled core, or a ``git archive``'s ``src``) run on this
checkout's venv; none: the venv's own install. Prints one line a case: the wall-clock p50 and p99
(ms, the direct path's not subtracted; the p99 is what `bench/run` judges capture by at
``--concurrency 1``), the serving process's CPU a request (µs), the rest of the tree's (µs), and
requests a second, each as the sorted values of the rounds. The serving process's CPU is also
given as its user and system parts: what a capture adds in the process's own code shows in the
first, its frames' copy into the socket in the second.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paths
import procstat
from compare import free_port, post, request_body, wrk

BENCH = Path(__file__).resolve().parent


def start(src: Path | None, capture: bool, upstream: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """oaishim from ``src`` (None: the venv's), capture on or off, once it answers; ``tmp``: its
    folder (the capture goes to ``tmp / "capture"``)."""
    name = "oaishim_capture" if capture else "oaishim"
    port = free_port()
    sources = {name: paths.source_folder(src)} if src is not None else {}
    spec = paths.launch(name, upstream, port, tmp, sources)
    proc = subprocess.Popen(
        spec.argv, env=spec.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError, http.client.HTTPException):
            if post(url, request_body(4, False), timeout=2) == 200:
                return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"oaishim ({src or 'venv'}) did not start")
        time.sleep(0.02)


@contextlib.contextmanager
def gateway(
    src: Path | None, capture: bool, upstream: str, wait: float = 30
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """:func:`start` in a new folder; on the way out the gateway is stopped (``wait`` seconds at
    most; stopping it first inside the block is fine) and the folder removed: a c32 capture writes
    about 600 MB, and runs that left theirs under /tmp filled a VM's disk."""
    tmp = Path(tempfile.mkdtemp(prefix="capture-c32-"))
    try:
        proc, url = start(src, capture, upstream, tmp)
        try:
            yield proc, url, tmp
        finally:
            proc.terminate()
            proc.wait(wait)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(src: Path | None, capture: bool, upstream: str, args: argparse.Namespace) -> tuple[float, ...]:
    with gateway(src, capture, upstream) as (proc, url, _):
        wrk(url, 4, 1)  # warm up
        time.sleep(0.3)
        tree = sorted(procstat.tree(proc.pid))
        serving, rest = tree[-1:], tree[:-1]  # forked in this order: the parent, the capture process, the worker
        (u0, k0), r0 = procstat.cpu_split(serving), procstat.cpu_seconds(rest)
        got = wrk(url, args.concurrency, args.seconds)
        (u1, k1), r1 = procstat.cpu_split(serving), procstat.cpu_seconds(rest)
        n = got["requests"]
        serving_us, user_us = (u1 + k1 - u0 - k0) / n * 1e6, (u1 - u0) / n * 1e6
        rest_us, p99 = (r1 - r0) / n * 1e6, got["p99_us"] / 1000
        return got["p50_us"] / 1000, serving_us, user_us, serving_us - user_us, rest_us, n / args.seconds, p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", default="", help="comma-separated source folders (default: the venv's install)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    sources: list[Path | None] = [Path(s) for s in args.src.split(",") if s] or [None]
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(BENCH / "upstream.py"), str(up_port)], stdout=subprocess.PIPE)
    assert upstream.stdout is not None
    upstream.stdout.readline()
    results: dict[str, list[tuple[float, ...]]] = {}
    try:
        for _ in range(args.rounds):  # interleaved: a drifting machine touches every case alike
            for src in sources:
                for capture in (False, True):
                    key = f"{src.name if src else 'venv'} capture {'on' if capture else 'off'}"
                    results.setdefault(key, []).append(measure(src, capture, f"http://127.0.0.1:{up_port}", args))
    finally:
        upstream.terminate()
    for key, runs in results.items():
        p50, serving, user, system, rest, rate, p99 = (
            sorted(round(run[i], 3 if i in (0, 6) else 1) for run in runs) for i in range(7)
        )
        print(
            f"{key}: p50 ms {p50}  p99 ms {p99}  serving µs {serving} (user {user}, system {system})  rest µs {rest}"
            f"  requests/s {rate}"
        )


if __name__ == "__main__":
    main()
