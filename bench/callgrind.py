"""Instruction counts per plain request and per streamed chunk, from valgrind's callgrind.

Wall-clock and CPU-time figures move with whatever else the machine runs; the number of
instructions the gateway executes for a request does not (to a fraction of a percent). This runs
``oaishim serve`` under ``valgrind --tool=callgrind`` in front of the synthetic upstream
(bench/upstream.py, not under valgrind), drives it from this process, and reads the totals with
``callgrind_control``: zero the counters, send a batch, dump; the difference between a batch of N
and one of 2N leaves the fixed costs (timers, the first request's lazy work) out.

* per plain request: N vs 2N sequential plain chat requests on one keep-alive connection;
* per streamed chunk: S streams of 16 chunks vs S streams of 144 chunks, one at a time, the
  chunks ``--gap-ms`` apart (8 ms: under valgrind the gateway runs ~50x slower, and a shorter gap
  lets events pile up into one read, which makes the count depend on timing) so each upstream read
  holds one event, as tokens arrive; the difference over
  the chunk difference leaves the per-request cost out;
* the same two for ``/v1/responses`` (plain and streamed), where the gateway supports it.

With ``--relay``, the per-chunk count of ``bench/chunk_floor.py``'s relay instead (a Python process
that writes each read to the other side unchanged): what moving a chunk costs Python at all.

With ``--capture``, the gateway records every exchange (``serve --capture``): the counts are those
of the serving process, and the capture process's own are given beside (``writer_*``; the checker
there runs within a share of wall time, so those vary with how slow valgrind makes it).

    python bench/callgrind.py [--src DIR] [--label NAME] [--out FILE] [--requests N] [--streams S] [--capture | --relay]

Prints and (with ``--out``) writes one JSON object: instructions per request / per chunk for each
path. ``--src`` measures another copy of the source (a folder holding ``oaishim``, or its parent).
Only the gateway's own process is counted (its children, if any, are traced too and summed).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen
import procstat

ROOT = Path(__file__).resolve().parent.parent
KEY = loadgen.KEY
SHORT, LONG = 16, 144  # chunks per stream in the two stream batches


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited early ({proc.returncode})")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"nothing listening on {port} after {seconds} s")


async def batch(url: str, raw: bytes, count: int) -> None:
    client = await loadgen.connect(url)
    for _ in range(count):
        if client.lost:
            client = await loadgen.connect(url)
        await client.call(raw)
    client.transport.close()


class Gauge:
    """The gateway under callgrind, and the counters it can be asked for: those of its serving
    process, and (``writer``) of its capture process, when it has one."""

    def __init__(self, pid: int, folder: Path, writer: int | None = None) -> None:
        self.pid, self.folder, self.dumps, self.writer = pid, folder, 0, writer
        self.writer_counts: list[int] = []

    def control(self, *args: str, pid: int | None = None) -> None:
        argv = ["callgrind_control", *args, str(pid or self.pid)]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def measure(self, url: str, raw: bytes, count: int) -> int:
        """Instructions spent on ``count`` requests (sequential, one connection)."""
        pids = [self.pid] if self.writer is None else [self.pid, self.writer]
        for pid in pids:
            self.control("--zero", pid=pid)
        asyncio.run(batch(url, raw, count))
        time.sleep(0.3 if self.writer is None else 3.0)  # the tail (access log, metrics; the capture writer)
        if self.writer is not None:
            self.writer_counts.append(self._dump(self.writer))
        return self._dump(self.pid)

    def _dump(self, pid: int) -> int:
        before = set(glob.glob(str(self.folder / f"cg.out.{pid}*")))
        self.control("--dump", pid=pid)
        self.dumps += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(glob.glob(str(self.folder / f"cg.out.{pid}*"))) - before
            if new:
                total = sum(_total(Path(p)) for p in new)
                if total:
                    keep = os.environ.get("OAISHIM_CALLGRIND_KEEP")  # a folder: keep the dumps (callgrind_annotate)
                    for p in new:
                        if keep:
                            shutil.move(p, Path(keep) / f"{self.dumps:02d}-{Path(p).name}")
                        else:
                            os.unlink(p)
                    return total
            time.sleep(0.2)
        raise SystemExit("callgrind wrote no dump")


def _total(path: Path) -> int:
    for _ in range(50):
        text = path.read_text(errors="replace")
        found = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    return 0


def post_mode(url: str, gap_ms: float) -> None:
    async def go() -> None:
        body = orjson.dumps({"gap_ms": gap_ms, "hold": False})
        host = url.split("//", 1)[1]
        head = f"POST /_bench/mode HTTP/1.1\r\nhost: {host}\r\ncontent-length: {len(body)}\r\n\r\n"
        client = await loadgen.connect(url)
        await client.call(head.encode() + body)
        client.transport.close()

    asyncio.run(go())


def run(src: Path, requests: int, streams: int, responses: bool, gap_ms: float, capture: bool) -> dict[str, Any]:
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="oaishim-cg-") as tmp:
        folder = Path(tmp)
        up_port, gw_port = free_port(), free_port()
        upstream = subprocess.Popen([python, str(ROOT / "bench/upstream.py"), str(up_port)], stdout=subprocess.PIPE)
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"}
        argv = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out.%p", "--trace-children=yes",
            python, "-m", "oaishim", "serve", "--upstream", f"http://127.0.0.1:{up_port}", "--profile", "vllm",
            "--served-model-name", "bench", "--api-key", KEY, "--port", str(gw_port), "--log-level", "warning",
        ]  # fmt: skip
        if capture:
            argv += ["--capture", f"{tmp}/capture"]
            env["XDG_STATE_HOME"] = tmp
        gateway = subprocess.Popen(argv, env=env, cwd=tmp, stderr=subprocess.DEVNULL)
        try:
            wait_port(up_port, upstream, 30)
            wait_port(gw_port, gateway, 300)
            url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
            if capture:  # forked in this order: the supervisor, the capture process, the serving one
                _, writer, serving = sorted(procstat.tree(gateway.pid))
                gauge = Gauge(serving, folder, writer)
            else:
                gauge = Gauge(gateway.pid, folder)
            up = f"http://127.0.0.1:{up_port}"

            out: dict[str, Any] = {}

            def per_request(target: str, warm: int, name: str) -> float:
                """Instructions per plain request to ``target`` (N vs 2N), after ``warm`` untimed ones."""
                post_mode(up, 0.0)
                raw = loadgen.request_bytes(target, 16, False)
                asyncio.run(batch(target, raw, warm))  # warm: profile cached, code paths taken once
                one, two = gauge.measure(target, raw, requests), gauge.measure(target, raw, 2 * requests)
                if gauge.writer is not None:
                    w1, w2 = gauge.writer_counts[-2:]
                    out[f"writer_{name}"] = (w2 - w1) / requests
                return (two - one) / requests

            def per_chunk(target: str, name: str) -> tuple[float, int, bytes]:
                """Instructions per streamed chunk (SHORT vs LONG chunks a stream), with the count of
                the SHORT batch and its request, for the per-stream figure."""
                post_mode(up, gap_ms)
                short, long = loadgen.request_bytes(target, SHORT, True), loadgen.request_bytes(target, LONG, True)
                asyncio.run(batch(target, long, 2))
                a, b = gauge.measure(target, short, streams), gauge.measure(target, long, streams)
                if gauge.writer is not None:
                    w1, w2 = gauge.writer_counts[-2:]
                    out[f"writer_{name}"] = (w2 - w1) / ((LONG - SHORT) * streams)
                return (b - a) / ((LONG - SHORT) * streams), a, short

            out["plain_request"] = per_request(url, 20, "plain_request")
            out["stream_chunk"], a, short = per_chunk(url, "stream_chunk")
            one2 = gauge.measure(url, short, 2 * streams)
            out["stream_request"] = (one2 - a) / streams - SHORT * out["stream_chunk"]
            if responses:
                rurl = f"http://127.0.0.1:{gw_port}/v1/responses"
                out["responses_plain_request"] = per_request(rurl, 10, "responses_plain_request")
                out["responses_stream_chunk"] = per_chunk(rurl, "responses_stream_chunk")[0]
            return {k: round(v) for k, v in out.items()}
        finally:
            stop(gateway, upstream)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """Terminate each process, and kill what has not ended 30 s later."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_relay(streams: int, gap_ms: float) -> dict[str, Any]:
    """Instructions per streamed chunk of ``bench/chunk_floor.py``'s relay (a Python process that
    writes each read to the other side unchanged), measured as :func:`run` measures the gateway's."""
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="oaishim-cg-relay-") as tmp:
        folder = Path(tmp)
        up_port, relay_port = free_port(), free_port()
        upstream = subprocess.Popen([python, str(ROOT / "bench/upstream.py"), str(up_port)], stdout=subprocess.PIPE)
        argv = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out.%p", python,
            str(ROOT / "bench/chunk_floor.py"), "--serve-relay", str(relay_port), f"http://127.0.0.1:{up_port}",
        ]  # fmt: skip
        relay = subprocess.Popen(argv, cwd=tmp, stderr=subprocess.DEVNULL)
        try:
            wait_port(up_port, upstream, 30)
            wait_port(relay_port, relay, 300)
            url = f"http://127.0.0.1:{relay_port}/v1/chat/completions"
            gauge = Gauge(relay.pid, folder)
            post_mode(f"http://127.0.0.1:{up_port}", gap_ms)
            short, long = loadgen.request_bytes(url, SHORT, True), loadgen.request_bytes(url, LONG, True)
            asyncio.run(batch(url, long, 2))
            a, b = gauge.measure(url, short, streams), gauge.measure(url, long, streams)
            return {"relay_stream_chunk": round((b - a) / ((LONG - SHORT) * streams))}
        finally:
            stop(relay, upstream)


def source(path: Path) -> Path:
    for candidate in (path / "src", path):
        if (candidate / "oaishim" / "__init__.py").exists():
            return candidate.resolve()
    raise SystemExit(f"--src: no oaishim package in {path} or {path / 'src'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=8.0)
    parser.add_argument("--no-responses", action="store_true")
    parser.add_argument("--capture", action="store_true", help="serve --capture: the serving process counted")
    parser.add_argument(
        "--relay", action="store_true", help="bench/chunk_floor.py's relay instead of the gateway: per chunk only"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    began = time.monotonic()
    result: dict[str, Any] = {"label": args.label, "requests": args.requests, "streams": args.streams}
    result["python"] = f"{sys.version.split()[0]} {sys.executable}"  # the interpreter counted
    if args.relay:
        result |= {"gap_ms": args.gap_ms, **run_relay(args.streams, args.gap_ms)}
    else:
        result |= {
            "gap_ms": args.gap_ms,
            "capture": args.capture,
            **run(source(args.src), args.requests, args.streams, not args.no_responses, args.gap_ms, args.capture),
        }
    result["seconds"] = round(time.monotonic() - began)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
