"""The whole comparison in one run: every path against the same synthetic upstream, in rounds.

Each round starts each path afresh (timing its start-up), warms it, then measures: plain requests
at concurrency 1, 32 and 64 (wrk), time to first token on streams (loadgen, sequential), CPU per
streamed chunk (two stream runs that differ only in length, so the per-request cost cancels),
memory idle and with 500 streams held open, the saturation throughput (the requests/s and chunks/s
at the highest load whose p99 is at most twice the lightest load's), and, on paths that serve it,
the same plain and streamed figures for ``/v1/responses``. Once per run, the gateway's instruction
counts per request and per chunk (bench/callgrind.py) are added, beside the stored baseline's. Added figures are the path's minus the direct path's
from the same round; the result is the median over rounds, with the min and max as the spread.

    .venv/bin/python bench/compare.py [--rounds 3] [--label before] [--paths direct,oaishim]

``--python PY`` runs the gateway (its paths, its instruction counts and its pure work) on another
interpreter: a venv of PY is made once under ``~/.cache/oaishim/bench-python/`` with this checkout
and the same versions of its dependencies as this checkout's venv, and the core is compiled for it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import capture_pairs
import chunk_floor
import paths
import procstat
import report
from loadgen import request_body, responses_body

ROOT = paths.ROOT
PY = str(ROOT / ".venv/bin/python")
BENCH = ROOT / "bench"
PLAIN_TOKENS = 128  # a plain answer of ~1.3 KB
SHORT, LONG = 16, 144  # the two stream lengths whose CPU difference gives the cost per chunk
CONCURRENCY = (1, 32, 64)  # plain requests (wrk connections)
SATURATION_PLAIN = (1, 2, 4, 8, 16, 32, 64, 128)  # wrk connections, stepped until p99 doubles
SATURATION_STREAMS = (4, 16, 64, 128, 256)  # concurrent streams of SATURATION_TOKENS chunks
SATURATION_TOKENS = 32
RESPONSES_PATHS = (*paths.OAISHIM_PATHS, "litellm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(method: str, url: str, body: bytes | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """One request to ``url`` with the bench's key: its status and body."""
    host, _, rest = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        headers = {"authorization": f"Bearer {paths.KEY}"}
        if body is not None:
            headers["content-type"] = "application/json"
        conn.request(method, "/" + rest, body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post(url: str, body: bytes, timeout: float = 5.0) -> int:
    return call("POST", url, body, timeout)[0]


def wrk(url: str, connections: int, seconds: float) -> dict[str, Any]:
    """wrk's figures (bench/wrk.lua) for the plain request of ``url``'s endpoint, one thread."""
    body = responses_body(PLAIN_TOKENS, False) if url.endswith("/responses") else request_body(PLAIN_TOKENS, False)
    env = {**os.environ, "BENCH_BODY": body.decode()}
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(BENCH / "wrk.lua"), url],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


def capture_cpu(pids: Callable[[], list[int]]) -> float:
    """CPU seconds so far of the capture path's processes but the serving one: the parent and the
    capture process, both forked before the worker (the parent idles: what they spend is the
    capture process's)."""
    return procstat.cpu_seconds(sorted(pids())[:-1])


def settle(pids: Callable[[], list[int]], limit: float = 120) -> bool:
    """Wait until the capture process is idle: it builds most records once the gateway is quiet, so
    without this a load's CPU figures would count the records of the load before. True once idle
    (its CPU grew under 3 ms in 0.3 s), False after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = capture_cpu(pids)
        time.sleep(0.3)
        if capture_cpu(pids) - before < 0.003:
            return True
    return False


def with_cpu(
    pids: Callable[[], list[int]], capture: bool, load: Callable[..., dict[str, Any]], *args: Any
) -> dict[str, Any]:
    """``load(*args)``'s figures with ``cpu_s``, the CPU the path's processes spent on it. On the capture
    path the load starts with the capture process idle, and its records count whole: what it built
    while the load ran (``capture_cpu_during_s``) and once it ended, waited for (``capture_cpu_s``,
    the whole, added to ``cpu_s``; ``capture_settled``: False if the wait ran out)."""
    if capture:
        settle(pids)
    cpu0, side0 = procstat.cpu_seconds(pids()), capture_cpu(pids) if capture else 0.0
    got = load(*args)
    got["cpu_s"] = procstat.cpu_seconds(pids()) - cpu0
    if capture:
        got["capture_cpu_during_s"] = capture_cpu(pids) - side0
        got["capture_settled"] = settle(pids)
        got["capture_cpu_s"] = capture_cpu(pids) - side0
        got["cpu_s"] += got["capture_cpu_s"] - got["capture_cpu_during_s"]
    return got


def capture_dropped(url: str) -> float | None:
    """The gateway's count of exchanges its capture had no room for (``/metrics``), or None."""
    try:
        text = call("GET", url.removesuffix("/v1/chat/completions") + "/metrics")[1].decode()
    except (OSError, http.client.HTTPException):
        return None
    counts = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("oaishim_capture_dropped_total")]
    return sum(counts) if counts else None


@dataclass
class Running:
    name: str
    url: str  # the chat completions URL clients use
    proc: subprocess.Popen[bytes] | None
    start_s: float | None

    def pids(self) -> list[int]:
        return procstat.tree(self.proc.pid) if self.proc is not None else []

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the child we started, nothing else
            self.proc.wait()


def start_path(name: str, upstream: str, sources: dict[str, Path], folder: Path) -> Running:
    """Start ``name`` (``paths.launch``; its log in a folder of its own under ``folder``) and wait
    until it answers: ready is the first proxied chat completion answered 200."""
    if name == "direct":
        return Running(name, upstream + "/v1/chat/completions", None, None)
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix=name + "-", dir=folder))
    spec = paths.launch(name, upstream, port, tmp, sources)
    log = open(tmp / "log", "wb")  # noqa: SIM115  (closed with the directory)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    probe = request_body(4, False)
    t0 = time.perf_counter()
    proc = subprocess.Popen(spec.argv, env=spec.env, cwd=spec.cwd, stdout=log, stderr=log, start_new_session=True)
    while True:
        with contextlib.suppress(OSError, http.client.HTTPException):
            if post(url, probe, timeout=2) == 200:
                break
        if proc.poll() is not None or time.perf_counter() - t0 > 180:
            raise RuntimeError(f"{name} did not start; see {tmp / 'log'}: {(tmp / 'log').read_text()[-2000:]}")
        time.sleep(0.01)
    return Running(name, url, proc, time.perf_counter() - t0)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="oaishim-bench-"))
        self.upstream_port = free_port()
        self.upstream = f"http://127.0.0.1:{self.upstream_port}"
        self.upstream_proc: subprocess.Popen[str] | None = None
        self.sources: dict[str, Path] = {}
        if args.oaishim_src is not None:
            self.sources |= dict.fromkeys(paths.OURS, args.oaishim_src)
        if args.before_src is not None:
            self.sources["oaishim_before"] = args.before_src

    # -- processes -------------------------------------------------------------------------------
    def start_upstream(self) -> None:
        self.upstream_proc = subprocess.Popen(
            [PY, str(BENCH / "upstream.py"), str(self.upstream_port)], stdout=subprocess.PIPE, text=True
        )
        assert self.upstream_proc.stdout is not None
        if self.upstream_proc.stdout.readline().strip() != "ready":
            raise SystemExit("the synthetic upstream did not start")

    def mode(self, gap_ms: float = 0.0, hold: bool = False) -> None:
        post(self.upstream + "/_bench/mode", orjson.dumps({"gap_ms": gap_ms, "hold": hold}))

    def release(self) -> None:
        post(self.upstream + "/_bench/release", b"{}")

    def start(self, name: str) -> Running:
        return start_path(name, self.upstream, self.sources, self.tmp)

    # -- load ------------------------------------------------------------------------------------
    def loadgen(self, *argv: str) -> dict[str, Any]:
        out = subprocess.run([PY, str(BENCH / "loadgen.py"), *argv], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def hold(self, run: Running, count: int) -> tuple[int, int]:
        """Open ``count`` streams that stay open after their first token; (streams open, RSS kB then)."""
        self.mode(hold=True)
        gen = subprocess.Popen(
            [PY, str(BENCH / "loadgen.py"), "hold", run.url, "--requests", str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert gen.stdin is not None and gen.stdout is not None
        opened = int(gen.stdout.readline().split()[1])
        time.sleep(0.5)
        rss = procstat.rss_kb(run.pids())
        gen.stdin.write("\n")
        gen.stdin.flush()
        gen.wait(60)
        self.release()
        self.mode()
        return opened, rss

    # -- one path, one round ---------------------------------------------------------------------
    def measure(self, name: str) -> dict[str, Any]:
        a = self.args
        t = time.perf_counter()

        def lap(what: str) -> None:
            nonlocal t
            if a.verbose:
                print(f"  {what}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
            t = time.perf_counter()

        run = self.start(name)
        try:
            lap("start")
            pids = run.pids
            fresh = procstat.rss_kb(pids())
            self.mode()
            wrk(run.url, 4, 1)
            self.loadgen("streams", run.url, "--requests", "32", "--concurrency", "4", "--tokens", str(SHORT))
            time.sleep(0.3)
            lap("warm-up")
            m: dict[str, Any] = {"start_s": run.start_s, "rss_fresh_kb": fresh, "rss_idle_kb": procstat.rss_kb(pids())}
            capture = name == "oaishim_capture"
            for c in CONCURRENCY:
                m[f"c{c}"] = with_cpu(pids, capture, wrk, run.url, c, a.duration)
                lap(f"plain c{c}")
            if a.saturation:
                if capture:
                    settle(pids)
                m["saturation"] = self.saturation(run)
                lap("saturation")
            self.mode(gap_ms=1)
            if capture:
                settle(pids)
            m["ttft"] = self.loadgen("ttft", run.url, "--requests", str(a.ttft_requests), "--tokens", "8")
            lap("ttft")
            for tokens in (SHORT, LONG):
                m[f"streams{tokens}"] = with_cpu(pids, capture, self.loadgen, "streams", run.url, "--requests",
                                                 str(a.streams), "--concurrency", "16", "--tokens", str(tokens))  # fmt: skip
                lap(f"streams of {tokens}")
            self.mode()
            if name in RESPONSES_PATHS and a.responses:
                m["responses"] = self.responses(run)
                lap("responses")
            if name == "oaishim_capture":  # recorded whole, or the figures above leave work out
                m["capture_dropped"] = capture_dropped(run.url)
            if run.proc is not None:
                time.sleep(0.3)
                m["rss_before_hold_kb"] = procstat.rss_kb(pids())
                m["hold_open"], m["rss_hold_kb"] = self.hold(run, a.hold)
                lap(f"{m['hold_open']} streams held")
            return m
        finally:
            run.stop()

    def saturation(self, run: Running) -> dict[str, Any]:
        """Plain requests: wrk at stepped concurrency; streams: loadgen at stepped concurrency, chunks
        1 ms apart. Each step's throughput and p99 (for streams: of the whole stream's duration); the
        saturation figure is the throughput of the highest step whose p99 is at most twice the
        first step's (it stops one step past that)."""
        plain: list[dict[str, Any]] = []
        for c in SATURATION_PLAIN:
            got = wrk(run.url, c, 1)  # (wrk takes whole seconds)
            plain.append({"c": c, "rps": got["requests"] / (got["duration_us"] / 1e6), "p99_us": got["p99_us"]})
            if got["p99_us"] > 2 * plain[0]["p99_us"]:
                break
        self.mode(gap_ms=1)
        streams: list[dict[str, Any]] = []
        for c in SATURATION_STREAMS:
            got = self.loadgen("streams", run.url, "--requests", str(2 * c), "--concurrency", str(c),
                               "--tokens", str(SATURATION_TOKENS))  # fmt: skip
            durations = got["durations_us"] or [0.0]
            p99 = report.pct(durations, 99) if len(durations) > 1 else durations[0]
            streams.append(
                {"c": c, "chunks_per_s": got["events"] / got["wall_s"], "p99_us": p99, "errors": got["errors"]}
            )
            if p99 > 2 * streams[0]["p99_us"] or got["errors"]:
                break
        self.mode()
        return {"plain": plain, "streams": streams}

    def responses(self, run: Running) -> dict[str, Any] | None:
        """``/v1/responses``: plain at c1 and c32 (latency, CPU per request) and CPU per streamed
        event, as for chat; None where the path does not serve it."""
        url = run.url.removesuffix("/chat/completions") + "/responses"
        pids = run.pids
        if post(url, responses_body(16, False)) != 200:  # (the official minimum of max_output_tokens)
            return None
        out: dict[str, Any] = {}
        capture = run.name == "oaishim_capture"
        for c in (1, 32):
            out[f"c{c}"] = with_cpu(pids, capture, wrk, url, c, self.args.duration)
        self.mode(gap_ms=1)
        for tokens in (SHORT, LONG):
            got = with_cpu(pids, capture, self.loadgen, "streams", url, "--requests", str(self.args.streams // 2),
                           "--concurrency", "16", "--tokens", str(tokens))  # fmt: skip
            got.pop("durations_us", None)
            out[f"streams{tokens}"] = got
        self.mode()
        return out

    def callgrind(self, src: Path | None) -> dict[str, Any] | None:
        """Instructions per plain request and per chunk (bench/callgrind.py), once per run."""
        if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
            return None
        argv = [paths.gateway_python(), str(BENCH / "callgrind.py"), "--label", self.args.label or "run"]
        if src is not None:
            argv += ["--src", str(src)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
        if done.returncode != 0:
            print(f"  callgrind failed, left out: {done.stderr[-500:]}", file=sys.stderr, flush=True)
            return None
        return dict(json.loads(done.stdout[done.stdout.index("{") :]))

    def run(self) -> dict[str, Any]:
        names = [n for n in self.args.paths.split(",") if n]
        if "oaishim_before" in self.sources and "oaishim_before" not in names:
            names.append("oaishim_before")
        skipped = {n: why for n in names if (why := paths.unavailable(n, self.sources))}
        live = [n for n in names if n not in skipped]
        if "direct" not in live:
            raise SystemExit("the direct path is the baseline; it must be measured")
        self.start_upstream()
        rounds: list[dict[str, Any]] = []
        failed: dict[str, str] = {}
        load: list[list[float]] = [list(os.getloadavg())]
        pairs: dict[str, Any] | None = None
        floor: dict[str, Any] | None = None
        t0 = time.perf_counter()
        try:
            for r in range(self.args.rounds):
                order = live[r % len(live) :] + live[: r % len(live)]  # no path always runs first
                results: dict[str, Any] = {}
                for name in order:
                    if name in failed:
                        continue
                    print(f"round {r + 1}/{self.args.rounds}: {name}", file=sys.stderr, flush=True)
                    try:
                        results[name] = self.measure(name)
                    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
                        if name == "direct":
                            raise
                        print(f"  {name} failed, left out: {exc}", file=sys.stderr, flush=True)
                        failed[name] = f"failed in round {r + 1}: {str(exc)[:300]}"
                rounds.append(results)
                load.append(list(os.getloadavg()))
            if self.args.capture_pairs and all(n in live and n not in failed for n in capture_pairs.TRIO):
                print(f"capture on against off, paired: {self.args.capture_pairs} blocks", file=sys.stderr, flush=True)
                self.mode()
                blocks = capture_pairs.measure(
                    self.start, wrk, self.args.capture_pairs, self.args.duration, dropped=capture_dropped
                )
                pairs = capture_pairs.summarise(blocks)
            if self.args.floor_rounds and all(n in live and n not in failed for n in ("nginx", "oaishim")):
                print(f"CPU per chunk against the relay: {self.args.floor_rounds} rounds", file=sys.stderr, flush=True)
                try:
                    floor = chunk_floor.measure_rounds(
                        self.start, self.mode, list(chunk_floor.PATHS), self.args.floor_rounds, self.args.floor_streams
                    )
                except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:  # the rest is kept
                    print(f"  the floor rounds failed, left out: {exc}", file=sys.stderr, flush=True)
        finally:
            if self.upstream_proc is not None:
                self.upstream_proc.terminate()
                self.upstream_proc.wait()
            shutil.rmtree(self.tmp, ignore_errors=True)
        for results in rounds:  # a path that failed once is left out of every round
            for name in failed:
                results.pop(name, None)
        skipped |= failed
        meta = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "label": self.args.label,
            "wall_s": round(time.perf_counter() - t0, 1),
            "rounds": self.args.rounds,
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "loadavg_per_round": load,
            "versions": _versions(),
            "skipped": skipped,
            "oaishim_src": {n: str(self.sources.get(n, ROOT / "src")) for n in names if n.startswith("oaishim")},
            "oaishim_build": self.args.build,  # compiled: the core built with mypyc, as a wheel installs it
            "params": {
                "duration_s": self.args.duration,
                "plain_tokens": PLAIN_TOKENS,
                "ttft_requests": self.args.ttft_requests,
                "streams": self.args.streams,
                "stream_concurrency": 16,
                "stream_lengths": [SHORT, LONG],
                "chunk_gap_ms": 1,
                "hold_streams": self.args.hold,
                "concurrency": list(CONCURRENCY),
                "saturation_plain": list(SATURATION_PLAIN),
                "saturation_streams": list(SATURATION_STREAMS),
                "saturation_tokens": SATURATION_TOKENS,
                "capture_pairs": self.args.capture_pairs,
                "floor_rounds": self.args.floor_rounds,
            },
        }
        result = report.summarise(rounds, meta, names)
        result["capture_pairs"] = pairs
        result["chunk_floor"] = floor
        result["capture_dropped"] = {  # exchanges capture had no room for: none, or capture on's figures flatter it
            "rounds": [r["oaishim_capture"].get("capture_dropped") for r in rounds if "oaishim_capture" in r],
            "pairs": [b["oaishim_capture"].get("capture_dropped") for b in pairs["blocks"]] if pairs else [],
        }
        result["micro"] = self.micro(self.sources.get("oaishim"))
        if "oaishim_before" in self.sources:
            result["micro_before"] = self.micro(self.sources["oaishim_before"])
        if self.args.callgrind:
            print("callgrind: instruction counts (a few minutes)", file=sys.stderr, flush=True)
            result["callgrind"] = self.callgrind(self.sources.get("oaishim"))
            if self.args.build == "compiled":  # the same counts for the source run as Python, for the record
                result["callgrind_pure"] = self.callgrind(ROOT / "src")
            baseline = BENCH / "results" / "callgrind-baseline.json"
            result["callgrind_baseline"] = json.loads(baseline.read_text()) if baseline.exists() else None
        return result

    def micro(self, src: Path | None) -> dict[str, Any]:
        """The gateway's pure work in CPU time (bench/micro.py): steadier than the end-to-end
        figures when other jobs share the machine."""
        env = {**os.environ}
        if src is not None:
            env["PYTHONPATH"] = str(src)
        out = subprocess.run(
            [paths.gateway_python(), str(BENCH / "micro.py")], capture_output=True, text=True, check=True, env=env
        )
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def _first_line(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    except OSError:
        return "absent"
    return (done.stdout + done.stderr).strip().split("\n")[0].split(" [")[0]


def _versions() -> dict[str, str]:
    def cmd(*argv: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        except OSError:
            return "absent"
        return (done.stdout + done.stderr).strip().splitlines()[-1] if (done.stdout + done.stderr).strip() else "?"

    git = cmd("git", "-C", str(ROOT), "describe", "--always", "--dirty")
    return {
        "oaishim": git,
        "python": sys.version.split()[0],
        "gateway_python": _interpreter(paths.gateway_python()),
        "nginx": cmd("nginx", "-v"),
        "wrk": _first_line("wrk", "-v"),
        "litellm": cmd(
            str(paths.LITELLM_VENV / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"
        ),
    }


def _interpreter(python: str) -> str:
    """What the gateway's interpreter is: its version, its executable, and whether that executable
    loads libpython as a shared library (pyenv's default build; an executable linked with it, as
    Debian's is, calls the C API directly rather than through the library's indirections) and was
    configured with ``--enable-optimizations`` (a distribution may optimise by its own rules)."""
    probe = (
        "import sys, sysconfig as s;"
        "shared = any('libpython' in line for line in open('/proc/self/maps'));"
        "opt = '--enable-optimizations' in (s.get_config_var('CONFIG_ARGS') or '');"
        "link = 'libpython shared' if shared else 'libpython linked in';"
        "conf = 'with' if opt else 'without';"
        "print(f'{sys.version.split()[0]} {sys._base_executable} ({link}, configured {conf} --enable-optimizations)')"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False, timeout=30)
    return done.stdout.strip() or f"? ({python})"


def gateway_venv(python: Path) -> Path:
    """A venv of ``python`` with this checkout installed (editable) and its dependencies at the
    versions this checkout's venv has, made once under ``~/.cache/oaishim/bench-python/``; its
    interpreter."""
    real = python.resolve()
    version = subprocess.run(
        [str(real), "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    key = hashlib.sha256(f"{real}\n{version}".encode()).hexdigest()[:12]
    venv = Path.home() / ".cache/oaishim/bench-python" / key
    py = venv / "bin/python"
    ready = venv / ".oaishim-ready"
    if ready.exists() and ready.read_text() == str(ROOT):
        return py
    print(f"bench: making a venv of {real} for the gateway ({venv}, once)", file=sys.stderr, flush=True)
    subprocess.run([str(real), "-m", "venv", "--clear", str(venv)], check=True)
    pins = subprocess.run(
        [PY, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(pins)
    try:
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", constraints.name]
        subprocess.run([*pip, "-e", str(ROOT), "mypy", "setuptools"], check=True)  # mypy, setuptools: mypyc
    finally:
        os.unlink(constraints.name)
    ready.write_text(str(ROOT))
    return py


def compiled_source() -> Path | None:
    """This checkout's ``src`` with its core compiled for the gateway's interpreter (hatch_build.py:
    what a wheel installs), or None (measured as Python then) when mypyc or the compiler fails."""
    print("bench: compiling the core (mypyc, cached under build/compiled-core/)", file=sys.stderr, flush=True)
    done = subprocess.run(
        [paths.gateway_python(), str(ROOT / "hatch_build.py")], capture_output=True, text=True, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        print(f"bench: the core could not be compiled; measuring it as Python ({done.stderr[-500:]})", file=sys.stderr)
        return None
    return Path(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    parser.add_argument("--ttft-requests", type=int, default=300)
    parser.add_argument("--streams", type=int, default=96, help="streams per CPU-per-chunk run")
    parser.add_argument("--hold", type=int, default=500, help="streams held open for the memory figure")
    parser.add_argument("--paths", default=",".join(paths.NAMES))
    parser.add_argument(
        "--oaishim-src", type=Path, help="run oaishim from this src folder (e.g. a `git archive` of another commit)"
    )
    parser.add_argument(
        "--before-src",
        type=Path,
        help="also measure oaishim from this src folder, as oaishim_before, in the same rounds",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="run this checkout's oaishim as Python (default: its core compiled, as a wheel)",
    )
    parser.add_argument(
        "--python",
        type=Path,
        help="run the gateway on this interpreter (a venv of it is made once; default: this checkout's venv)",
    )
    parser.add_argument("--label", default="", help="a name for the dated copy (before, after, …)")
    parser.add_argument(
        "--capture-pairs",
        type=int,
        default=5,
        help="blocks of capture on against off, measured in pairs after the rounds (bench/capture_pairs.py; 0: none)",
    )
    parser.add_argument(
        "--floor-rounds",
        type=int,
        default=5,
        help="rounds of CPU per chunk for nginx, a bare Python relay and oaishim after the rounds (bench/chunk_floor.py; 0: none)",
    )
    parser.add_argument("--floor-streams", type=int, default=192, help="streams per run in those rounds")
    parser.add_argument("--no-saturation", dest="saturation", action="store_false", help="skip the saturation steps")
    parser.add_argument("--no-responses", dest="responses", action="store_false", help="skip /v1/responses")
    parser.add_argument("--no-callgrind", dest="callgrind", action="store_false", help="skip the instruction counts")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("-v", "--verbose", action="store_true", help="time each phase")
    parser.add_argument("--no-readme", action="store_true", help="leave the table in bench/README.md alone")
    args = parser.parse_args()
    if args.python is not None:
        os.environ["OAISHIM_BENCH_PYTHON"] = str(gateway_venv(args.python))  # (paths.gateway_python)
    args.build = "given" if args.oaishim_src is not None else "pure" if args.pure else "compiled"
    if args.oaishim_src is not None:
        args.oaishim_src = paths.source_folder(args.oaishim_src)
    elif not args.pure:
        args.oaishim_src = compiled_source()
        if args.oaishim_src is None:
            args.build = "pure"
    if args.before_src is not None:
        args.before_src = paths.source_folder(args.before_src)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk); bench/run installs it")
    result = Bench(args).run()
    report.write(result, args.out, args.label, readme=None if args.no_readme else BENCH / "README.md")


if __name__ == "__main__":
    main()
