"""Acceptance: ``kill -9`` of the gateway during 50 concurrent streams leaves a store that loads,
with every finished exchange intact.

The gateway is a real process (``python -m oaishim serve --capture DIR``) in front of a mock backend
that streams 50 different recorded answers at their recorded pace (40 ms a piece, 0.2 to 1.6 s in
all), so streams end one after another. Once 30 clients have their whole answer the gateway gets
SIGKILL (after about 1 s); 20 streams are still running. Afterwards:

* the folder loads (at most one torn line, the last), through the index and without it;
* every stored exchange is whole: complete on both sides, and its client body is byte for byte what
  that client received;
* every exchange a client saw end at least ``LAG`` before the kill is stored (the writer keeps
  up; only what was in flight, or queued in the last moments, may be lost): the serving worker
  dies with the gateway's parent, and the capture process writes what had reached it, then exits;
* a new writer on the same folder indexes what the dead one had not committed.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from _apps import RunningApp, backend_record, chat_chunks, free_port, get, write_store

from oaishim.capture.build import build_record
from oaishim.capture.playbook import Playbook
from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes, request_json
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter
from oaishim.capture_tools.mock import MockBackend
from oaishim.profiles import get_profile
from oaishim.transform.request import prepare

STREAMS = 50
STEP_MS = 40.0
KILL_AFTER = 30  # finished streams
LAG = 0.4  # seconds the writer may need to get a finished exchange on disk (it needs ~0.1 s here)


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.add(int(entry.name))
    return found


def client_request(i: int) -> dict[str, object]:
    return {"model": "tiny", "messages": [{"role": "user", "content": f"stream {i}"}], "stream": True}


@pytest.fixture(scope="module")
def mock_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The recorded answers: stream i has 3 + 4 * (i % 10) pieces, one every 40 ms."""
    folder = tmp_path_factory.mktemp("recorded")
    profile = get_profile("llamacpp@b9174")
    exchanges = []
    for i in range(STREAMS):
        sent = prepare("chat", client_request(i), profile).body  # what the gateway will send
        pieces = chat_chunks([f"w{n} " for n in range(3 + 4 * (i % 10))])
        exchanges.append(backend_record(sent, pieces, step_ms=STEP_MS))
    write_store(folder, exchanges)
    book = Playbook.of(CaptureReader(folder).records())
    assert len(book) == STREAMS
    with RunningApp(MockBackend(book, "original")) as mock:
        yield mock.url


def start_gateway(upstream: str, capture: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "oaishim", "serve", "--upstream", upstream, "--profile", "llamacpp@b9174",
               "--served-model-name", "tiny", "--port", str(port), "--capture", str(capture),
               "--log-level", "warning"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if get(url + "/health")[0] == 200:
                return process, url
        except aiohttp.ClientError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the gateway did not start")


async def storm(url: str, process: subprocess.Popen[bytes]) -> tuple[dict[int, tuple[float, bytes]], float]:
    """50 streams at once; SIGKILL once KILL_AFTER have ended. Returns {i: (end time, bytes)} and the kill time."""
    finished: dict[int, tuple[float, bytes]] = {}
    enough = asyncio.Event()

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        try:
            async with session.post(url + "/v1/chat/completions", json=client_request(i)) as response:
                body = await response.read()
        except (TimeoutError, aiohttp.ClientError):
            return  # cut by the kill
        if body.endswith(b"data: [DONE]\n\n"):
            finished[i] = (time.monotonic(), body)
            if len(finished) >= KILL_AFTER:
                enough.set()

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=STREAMS)) as session:
        tasks = [asyncio.ensure_future(one(session, i)) for i in range(STREAMS)]
        await asyncio.wait_for(enough.wait(), 20)
        process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await asyncio.gather(*tasks)
    return finished, killed


def test_kill_9_during_50_streams_leaves_every_finished_exchange_intact(mock_backend: str, tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    process, url = start_gateway(mock_backend, capture, tmp_path / "gateway.log")
    helpers = children(process.pid)  # the serving worker and the capture process
    try:
        finished, killed = asyncio.run(storm(url, process))
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    # the worker dies with the gateway's parent; the capture process writes what reached it, then exits
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() for pid in helpers):
        assert time.monotonic() < deadline, "the gateway's processes outlived it"
        time.sleep(0.05)
    assert KILL_AFTER <= len(finished) < STREAMS, "the kill should land while streams are still running"

    reader = CaptureReader(capture)
    rows = reader.entries()  # through the index, plus what it had not committed
    records = {
        int(request_json(r["client"]["request"])["messages"][0]["content"].split()[1]): r for r in reader.records()
    }
    assert reader.torn <= 1
    assert len(rows) == len(records) and {r["id"] for r in rows} == {r["id"] for r in records.values()}
    for i, record in records.items():
        assert i in finished, f"stream {i} is stored but its client never got the end"
        assert record["client"]["response"]["complete"] and record["upstream"]["response"]["complete"]
        assert body_bytes(record["client"]["response"]) == finished[i][1]
        assert record["error"] is None
    settled = [i for i, (ended, _) in finished.items() if ended <= killed - LAG]
    missing = sorted(set(settled) - set(records))
    assert not missing, f"finished at least {LAG} s before the kill but not stored: {missing}"

    # The next writer on this folder finds what the dead one had not indexed, and starts a fresh line.
    CaptureWriter(capture, lambda raw: build_record(raw, Redactor())).start().close()
    again = CaptureReader(capture)
    assert {r["id"] for r in again.entries()} == {r["id"] for r in records.values()}
    assert all(p.read_bytes().endswith(b"\n") for p in again.files)


def test_a_torn_last_line_is_skipped_and_the_next_writer_starts_a_fresh_one(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    record = backend_record(client_request(1), chat_chunks(["a"]))
    write_store(folder, [record, record])
    (jsonl,) = CaptureReader(folder).files
    whole = jsonl.read_bytes()
    jsonl.write_bytes(whole + whole.splitlines(keepends=True)[0][:57])  # a third record, torn by a crash
    torn = CaptureReader(folder)
    assert len(list(torn.records())) == 2 and torn.torn == 1
    write_store(folder, [record])
    after = CaptureReader(folder)
    assert len(list(after.records())) == 3 and after.torn == 1  # the torn piece is a line of its own
    assert len(after.entries()) == 3
    assert orjson.loads(jsonl.read_bytes().splitlines()[-1])["v"] == 1
