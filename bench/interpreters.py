"""The gateway on two or more interpreters, interleaved round by round on the same machine.

`bench/run --python PY` measures everything on one interpreter; between two such runs the host
moves by more than some of what an interpreter changes. Here each round starts ``oaishim serve``
(one worker, the vLLM profile, as ``bench/run``'s ``oaishim`` path) on each interpreter in turn,
each with the core compiled for it, and measures wrk's c1 and c32 latency (whole, not added: the
direct path is the same for all) and the gateway's CPU a plain request at c32 (as ``bench/run`` counts it).

    .venv/bin/python bench/interpreters.py /usr/bin/python3.11 [.venv/bin/python ...] [--rounds 8]

Each interpreter gets the venv ``bench/run --python`` makes (this checkout's venv is used as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paths
from compare import PY, compiled_source, free_port, gateway_venv, start_path, with_cpu, wrk


def prepare(python: Path) -> tuple[str, Path]:
    """The venv interpreter for ``python`` and the core compiled for it."""
    venv = PY if python.resolve() == Path(PY).resolve() else str(gateway_venv(python))
    os.environ["OAISHIM_BENCH_PYTHON"] = venv  # (compiled_source compiles with the gateway's interpreter)
    core = compiled_source()
    if core is None:
        raise SystemExit(f"the core could not be compiled for {python}")
    return venv, core


def measure(upstream: str, venv: str, core: Path, seconds: float) -> dict[str, float]:
    os.environ["OAISHIM_BENCH_PYTHON"] = venv  # (paths.launch runs the gateway on it)
    folder = Path(tempfile.mkdtemp(prefix="oaishim-interp-"))
    run = start_path("oaishim", upstream, {"oaishim": core}, folder)
    try:
        wrk(run.url, 32, 1)  # warm
        c1 = wrk(run.url, 1, seconds)
        c32 = with_cpu(run.pids, False, wrk, run.url, 32, seconds)
        return {"c1_p50_us": c1["p50_us"], "c1_p99_us": c1["p99_us"], "c32_p50_us": c32["p50_us"],
                "c32_p99_us": c32["p99_us"], "cpu_us_per_request": c32["cpu_s"] / c32["requests"] * 1e6}  # fmt: skip
    finally:
        run.stop()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "pythons", nargs="+", type=Path, help="the interpreters (this checkout's venv: .venv/bin/python)"
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per wrk run")
    args = parser.parse_args()
    prepared = [(str(python), *prepare(python)) for python in args.pythons]
    up = free_port()
    upstream = subprocess.Popen([PY, str(paths.ROOT / "bench/upstream.py"), str(up)], stdout=subprocess.PIPE)
    assert upstream.stdout is not None
    upstream.stdout.readline()
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in prepared}
    try:
        for r in range(args.rounds):
            turn = prepared[r % len(prepared) :] + prepared[: r % len(prepared)]  # none always first
            for name, venv, core in turn:
                got = measure(f"http://127.0.0.1:{up}", venv, core, args.seconds)
                rounds[name].append(got)
                print(f"round {r + 1}: {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in got.items()), file=sys.stderr)
    finally:
        upstream.terminate()
    summary = {
        name: {key: statistics.median(got[key] for got in runs) for key in runs[0]} for name, runs in rounds.items()
    }
    print(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "median": summary, "runs": rounds}, indent=1))


if __name__ == "__main__":
    main()
