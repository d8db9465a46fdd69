"""What a streamed chunk costs a Python process that only moves its bytes: the floor under the
gateway's CPU per chunk, next to nginx and oaishim, measured the way `bench/run` measures them.

The relay (``relay``, below) is the least a Python proxy on uvloop can do for a chunk: each client
connection gets its own upstream connection, and whatever one side sends is written to the other in
the read callback, unparsed and unchanged (no HTTP, no SSE, no rewrite: not a usable gateway, a
floor). It runs on the gateway's interpreter with the gateway's event loop. Each round starts
nginx, the relay and ``oaishim serve`` afresh against one ``bench/upstream.py`` (chunks 1 ms apart),
in turn, and takes `bench/run`'s figure: the CPU of the path's process tree for S streams of 144
chunks less that for S streams of 16, over the S × 128 chunks between them, read from each process's
CPU-time clock (nanoseconds, `bench/procstat.py`). The user/system split comes from /proc's tick
counts, so it is given over all rounds together. `bench/run` runs the same rounds after its own
(``--floor-rounds``) and puts the table in its results; this script runs them alone, on the
gateway's interpreter (``OAISHIM_BENCH_PYTHON``, as `bench/run --python` sets it; default: this
checkout's venv).

    .venv/bin/python bench/chunk_floor.py [--rounds 5] [--streams 192] [--paths nginx,relay,oaishim]
        [--src build/compiled-core/HASH] [--out FILE]

``--src``: the oaishim source to run (a compiled core, as `bench/run` builds one; default: the
venv's install). Prints one line a round and a summary; ``--out`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
import orjson
import paths
import procstat

BENCH = Path(__file__).resolve().parent
SHORT, LONG = 16, 144  # as bench/compare.py
PATHS = ("nginx", "relay", "oaishim")
# also measured in oaishim's process, after its chat streams: the same streams through /v1/responses,
# a Responses event for each chunk (the figure `bench/run` gives as the Responses API's per event)
RESPONSES = "oaishim_responses"


# -- the relay -------------------------------------------------------------------------------------
class _Side(asyncio.Protocol):
    """One side of a relayed connection: what it reads goes to ``peer`` as it is."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.waiting: list[bytes] = []  # read before the peer's connection was made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no asyncio.Transport subclass)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.waiting.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()


class _Client(_Side):
    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(_Side, *self.upstream)
        up.peer, self.peer = self, up
        assert up.transport is not None
        for data in self.waiting:
            up.transport.write(data)
        self.waiting.clear()


def serve_relay(port: int, upstream: str) -> None:
    import uvloop

    host, _, up_port = upstream.removeprefix("http://").partition(":")
    target = (host, int(up_port))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Client(target), "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# -- the measurement -------------------------------------------------------------------------------
class Run(Protocol):
    """A started path (``compare.Running``)."""

    url: str  # its chat completions URL

    def pids(self) -> list[int]: ...

    def stop(self) -> None: ...


Start = Callable[[str], Run]  # a path by name, started and answering (``compare.Bench.start``)
Mode = Callable[[float], None]  # the upstream's pause between chunks, in ms


def loadgen(url: str, tokens: int, streams: int) -> None:
    """``streams`` streams of ``tokens`` chunks, 16 at a time; a stream that failed fails the run."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "loadgen.py"), "streams", url, "--requests", str(streams),
         "--concurrency", "16", "--tokens", str(tokens)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    errors = json.loads(done.stdout.strip().splitlines()[-1]).get("errors")
    if errors:
        raise RuntimeError(f"{errors} of {streams} streams to {url} failed")


def measure(run: Run, url: str, streams: int) -> dict[str, float]:
    """CPU seconds (clock) and user/system seconds (ticks) of the path's tree for each stream
    length, and the CPU µs a chunk from them."""
    loadgen(url, SHORT, 32)  # warm: connections open, code paths taken
    pids = run.pids()
    out: dict[str, float] = {}
    for tokens in (SHORT, LONG):
        c0, (u0, s0) = procstat.cpu_seconds(pids), procstat.cpu_split(pids)
        loadgen(url, tokens, streams)
        c1, (u1, s1) = procstat.cpu_seconds(pids), procstat.cpu_split(pids)
        out[f"cpu{tokens}"], out[f"user{tokens}"], out[f"sys{tokens}"] = c1 - c0, u1 - u0, s1 - s0
    out["us_per_chunk"] = (out[f"cpu{LONG}"] - out[f"cpu{SHORT}"]) / (streams * (LONG - SHORT)) * 1e6
    return out


def measure_rounds(start: Start, mode: Mode, names: list[str], rounds: int, streams: int) -> dict[str, Any]:
    """``rounds`` rounds of each path in ``names`` (of :data:`PATHS`), started afresh each round;
    the upstream's chunks 1 ms apart while they run, none after. Returns the summary
    (:func:`summarise`) with the rounds' figures."""
    got: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    if "oaishim" in names:
        got[RESPONSES] = []
    try:
        for r in range(rounds):
            for name in names:
                mode(0.0)
                run = start(name)
                try:
                    mode(1.0)
                    figures = {name: measure(run, run.url, streams)}
                    if name == "oaishim":
                        url = run.url.removesuffix("/chat/completions") + "/responses"
                        figures[RESPONSES] = measure(run, url, streams)
                finally:
                    run.stop()
                for key, one in figures.items():
                    got[key].append(one)
                    print(f"chunk floor, round {r + 1}/{rounds}, {key}: {one['us_per_chunk']:.2f} µs a chunk",
                          file=sys.stderr, flush=True)  # fmt: skip
    finally:
        mode(0.0)
    return summarise(got, streams)


def summarise(got: dict[str, list[dict[str, float]]], streams: int) -> dict[str, Any]:
    chunks = streams * (LONG - SHORT)
    paths_: dict[str, Any] = {}
    for name, figures in got.items():
        if not figures:
            continue
        per = sorted(f["us_per_chunk"] for f in figures)
        total = chunks * len(figures)
        paths_[name] = {
            "median": statistics.median(per),
            "min": per[0],
            "max": per[-1],
            "user": sum(f[f"user{LONG}"] - f[f"user{SHORT}"] for f in figures) / total * 1e6,
            "system": sum(f[f"sys{LONG}"] - f[f"sys{SHORT}"] for f in figures) / total * 1e6,
        }
    over = {}
    if "relay" in got and "oaishim" in got:  # the gateway's own work: over the relay in the same round
        for name in ("oaishim", RESPONSES):
            diffs = sorted(g["us_per_chunk"] - f["us_per_chunk"] for f, g in zip(got["relay"], got[name], strict=False))
            if diffs:
                over[name] = {"median": statistics.median(diffs), "min": diffs[0], "max": diffs[-1]}
    return {"params": {"streams": streams, "chunks_per_run": chunks, "chunk_gap_ms": 1, "rounds": len(got[next(iter(got))])},
            "paths": paths_, "over_relay": over, "rounds": got}  # fmt: skip


def markdown(floor: dict[str, Any] | None) -> list[str]:
    """The table under `bench/run`'s main one."""
    if not floor:
        return []
    p = floor["params"]
    lines = [
        "",
        f"CPU per streamed chunk against its floor (bench/chunk_floor.py: {p['rounds']} rounds of {p['chunks_per_run']:,} "
        "chunks 1 ms apart, each path started afresh; the relay is a Python process on the gateway's interpreter and "
        "event loop that writes each read to the other side unchanged; oaishim's over the relay: each round's "
        "difference; user and system: the kernel's split over all rounds):",
        "",
        "| path | µs a chunk, median (min – max) | over the relay | user | system |",
        "|---|---|---|---|---|",
    ]
    for name, f in floor["paths"].items():
        o = floor["over_relay"].get(name)
        over = f"{o['median']:.2f} ({o['min']:.2f} – {o['max']:.2f})" if o else "—"
        lines.append(
            f"| {name} | {f['median']:.2f} ({f['min']:.2f} – {f['max']:.2f}) | {over} | {f['user']:.2f} | {f['system']:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=192, help="streams per run (each of 16, then 144 chunks)")
    parser.add_argument("--src", type=Path, help="the oaishim source to run (default: the venv's install)")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve-relay", nargs=2, metavar=("PORT", "UPSTREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_relay:
        serve_relay(int(args.serve_relay[0]), args.serve_relay[1])
        return
    from compare import Running, free_port, post, start_path  # (compare imports this module)

    sources = {"oaishim": paths.source_folder(args.src)} if args.src else {}
    folder = Path(tempfile.mkdtemp(prefix="chunk-floor-"))
    port = free_port()
    up = subprocess.Popen([sys.executable, str(BENCH / "upstream.py"), str(port)], stdout=subprocess.PIPE, text=True)
    assert up.stdout is not None
    up.stdout.readline()
    upstream = f"http://127.0.0.1:{port}"

    def start(name: str) -> Running:
        return start_path(name, upstream, sources, folder)

    def mode(gap_ms: float) -> None:
        post(upstream + "/_bench/mode", orjson.dumps({"gap_ms": gap_ms}))

    try:
        floor = measure_rounds(start, mode, args.paths.split(","), args.rounds, args.streams)
    finally:
        up.terminate()
        shutil.rmtree(folder, ignore_errors=True)
    floor["params"] |= {"python": paths.gateway_python(), "src": str(args.src or "venv")}
    print("\n".join(markdown(floor)))
    if args.out:
        args.out.write_text(json.dumps(floor, indent=1) + "\n")


if __name__ == "__main__":
    main()
