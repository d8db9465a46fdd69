"""What building one record costs the capture process, in instructions (valgrind's callgrind).

``bench/callgrind.py --capture`` counts the serving process exactly, but the capture process's
figures there (``writer_*``) move with timing: that process builds records when the gateway is
quiet and checks them within a share of wall time (``server.capture_pace``), so a batch's records
are partly built during the next batch, and a record may be stored unchecked. This measures the
build itself, with nothing deferred:

1. a gateway (``oaishim serve --capture``, the source under test) in front of bench/upstream.py
   answers ``--plain`` plain requests and ``--streams`` streams of ``--tokens`` chunks; its records
   are read back and turned into the exchanges they were built from (bodies, pieces, headers and
   times as recorded; the keys the records redacted stay redacted, which costs the same);
2. a child process, under callgrind, builds N and then 2N of them, one kind at a time, the way the
   capture process does (``Recording.writer.write``: decode a frame, build, redact, check, append,
   index; the index committed every 50 records), with the checker always on (``--no-check``: off);
   the difference over N is the cost of one record, the start-up and the first record left out.

Prints one JSON object: instructions per plain record, per streamed record, and per streamed
chunk (the streamed record over its chunks, counting one chunk of each side as one).

    python bench/writer_cost.py [--src DIR] [--plain 8] [--streams 4] [--tokens 144] [-n 10] [--no-check]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def record_exchanges(src: Path, folder: Path, plain: int, streams: int, tokens: int) -> Path:
    """Run a gateway with ``--capture`` and send it the load; the capture folder."""
    import http.client

    from capture_cost import free_port, wait_up

    up_port, port = free_port(), free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "upstream.py"), str(up_port)], stdout=subprocess.PIPE
    )
    capture = folder / "capture"
    env = {**os.environ, "PYTHONPATH": str(src), "XDG_STATE_HOME": str(folder)}
    argv = [sys.executable, "-m", "oaishim", "serve", "--upstream", f"http://127.0.0.1:{up_port}", "--profile", "vllm",
            "--served-model-name", "bench", "--port", str(port), "--log-level", "warning", "--capture", str(capture)]  # fmt: skip
    gateway = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert upstream.stdout is not None
        upstream.stdout.readline()  # "ready"
        wait_up(port, gateway)
        for stream, count in ((False, plain), (True, streams)):
            body: dict[str, Any] = {
                "model": "bench",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": tokens,
            }
            if stream:
                body |= {"stream": True, "stream_options": {"include_usage": True}}
            for _ in range(count):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                assert answer.status == 200, answer.status
                conn.close()
    finally:
        gateway.terminate()  # the capture process writes what it holds, then exits
        gateway.wait(60)
        upstream.terminate()
        upstream.wait(10)
    return capture


def build_many(capture: Path, kind: str, count: int, check: bool) -> None:
    """In the child under callgrind: ``count`` records of ``kind`` built as the capture process builds them."""
    import orjson

    from oaishim.capture.files import capture_files
    from oaishim.capture.raw import RawExchange, RawRequest, RawResponse
    from oaishim.capture.timeline import is_stream
    from oaishim.server.capture_frame import decode, encode
    from oaishim.server.config import Settings
    from oaishim.server.recording import CheckBudget, recording_for

    def request(side: dict[str, Any], t0: int) -> RawRequest:
        headers = [(k.encode(), v.encode()) for k, v in side["headers"]]
        return RawRequest(t0 + round(side["t"] * 1e6), side["method"], side["target"], headers, [side["body"].encode()])

    def response(side: dict[str, Any], t0: int) -> RawResponse:
        body = side["body"].encode()
        pieces, at = [], 0
        for t_ms, size in side["reads"]:
            pieces.append((t0 + round(t_ms * 1e6), body[at : at + size]))
            at += size
        headers = [(k.encode(), v.encode()) for k, v in side["headers"]]
        return RawResponse(t0 + round(side["t"] * 1e6), side["status"], headers, pieces, side["complete"])

    frames = []
    for path in capture_files(capture):
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            if is_stream(record["client"]["response"]) != (kind == "stream"):
                continue
            t0 = time.perf_counter_ns()
            raw = RawExchange(t0, record["time"], record["mode"], profile=record["profile"], end_ns=t0 + 10**7)
            raw.client_request = request(record["client"]["request"], t0)
            raw.client_response = response(record["client"]["response"], t0)
            raw.upstream_request = request(record["upstream"]["request"], t0)
            raw.upstream_response = response(record["upstream"]["response"], t0)
            frames.append(encode(raw))
    assert frames, f"no {kind} record was captured"
    folder = Path(tempfile.mkdtemp(prefix="writer-cost-"))
    recording = recording_for(Settings(capture_dir=folder / "out"), CheckBudget(share=1.0, burst=1e9))
    assert recording is not None
    recording.run_checker = check
    writer = recording.writer
    writer.open_files()
    writer.open_index()
    writer.write(decode(frames[0]))  # the first record warms the checker up (its schemas, its memos)
    writer.commit()
    for i in range(count):
        writer.write(decode(frames[i % len(frames)]))
        if i % 50 == 49:
            writer.commit()
    writer.finish()
    assert writer.failed == 0, "a record could not be built"


def instructions(src: Path, capture: Path, kind: str, count: int, check: bool) -> int:
    out = Path(tempfile.mkdtemp(prefix="writer-cg-")) / "cg.out"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
            "--child", str(capture), kind, str(count), "1" if check else "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run(argv, env=env, check=True, capture_output=True)
    for line in out.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit("callgrind wrote no totals")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        build_many(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--src", type=Path, default=ROOT / "src", help="the source to measure (a folder holding oaishim)"
    )
    parser.add_argument("--plain", type=int, default=8, help="plain requests recorded")
    parser.add_argument("--streams", type=int, default=4, help="streams recorded")
    parser.add_argument("--tokens", type=int, default=144, help="chunks a stream (and tokens a plain answer)")
    parser.add_argument("-n", type=int, default=40, help="records built in the shorter run (the longer builds 2n)")
    parser.add_argument("--no-check", action="store_true", help="build without the checker")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    src = args.src.resolve()
    folder = Path(tempfile.mkdtemp(prefix="writer-cost-"))
    capture = record_exchanges(src, folder, args.plain, args.streams, args.tokens)
    result: dict[str, Any] = {"src": str(src), "check": not args.no_check, "tokens": args.tokens, "n": args.n}
    for kind in ("plain", "stream"):
        short = instructions(src, capture, kind, args.n, not args.no_check)
        long = instructions(src, capture, kind, 2 * args.n, not args.no_check)
        result[f"{kind}_record"] = round((long - short) / args.n)
    result["stream_chunk"] = round(result["stream_record"] / (args.tokens + 2))  # the role and usage chunks too
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
