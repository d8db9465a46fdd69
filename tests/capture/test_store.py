"""The store: JSONL plus its SQLite index, rotation by size, drops when the queue is full, the
record format's versions and migrations, and reading back a folder or a single file."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from _apps import backend_record, chat_chunks, write_store

from oaishim.capture import record as fmt
from oaishim.capture.build import build_record
from oaishim.capture.index import INDEX_NAME
from oaishim.capture.raw import RawExchange
from oaishim.capture.reader import CaptureReader
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter
from oaishim.commands.capture import add_parsers


def chat(i: int, *, stream: bool = True) -> dict[str, Any]:
    return {"model": f"m{i % 2}", "messages": [{"role": "user", "content": f"q{i}"}], "stream": stream}


def exchanges(n: int, pieces: int = 3) -> list[RawExchange]:
    return [backend_record(chat(i), chat_chunks([f"t{k}" for k in range(pieces)]), step_ms=1) for i in range(n)]


def test_records_are_indexed_and_read_back(tmp_path: Path) -> None:
    write_store(tmp_path, exchanges(5))
    reader = CaptureReader(tmp_path)
    rows = reader.entries()
    assert [r["model"] for r in rows] == ["m0", "m1", "m0", "m1", "m0"]
    assert {(r["method"], r["path"], r["status"], r["stream"]) for r in rows} == {
        ("POST", "/v1/chat/completions", 200, True)
    }
    assert all(r["duration_ms"] is not None for r in rows)
    # a proxy record: both sides hold llama.cpp's first chunk (content: null), which the checker reports
    assert all(r["findings"] == r["upstream_findings"] == 1 for r in rows)
    db = sqlite3.connect(tmp_path / INDEX_NAME)
    assert db.execute("SELECT count(*) FROM exchanges").fetchone() == (5,)
    db.close()
    one = reader.get(rows[2]["id"][:15])
    assert one["id"] == rows[2]["id"] and fmt.request_json(one["client"]["request"]) == chat(2)
    with pytest.raises(KeyError):
        reader.get("ffffffff")


def test_files_rotate_by_size_and_every_record_stays_reachable(tmp_path: Path) -> None:
    line = len(build_record(exchanges(1)[0], Redactor())[1])
    write_store(tmp_path, exchanges(10), max_file_bytes=int(line * 3.5))
    reader = CaptureReader(tmp_path)
    assert [p.name for p in reader.files] == [f"capture-0000{n}.jsonl" for n in (1, 2, 3, 4)]
    assert all(p.stat().st_size <= line * 3.5 for p in reader.files)
    rows = reader.entries()
    assert len(rows) == 10 and len({r["file"] for r in rows}) == 4
    assert [reader.get(r["id"])["id"] for r in rows] == [r["id"] for r in rows]
    # A later writer continues the last file, not a new one, while it has room.
    write_store(tmp_path, exchanges(1))
    assert [p.name for p in CaptureReader(tmp_path).files][-1] == "capture-00004.jsonl"


def test_a_full_queue_drops_counts_and_reports_without_blocking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = threading.Event()

    def slow_build(raw: RawExchange) -> tuple[fmt.Record, bytes]:
        gate.wait(10)  # the writer is stuck on its first record
        return build_record(raw, Redactor())

    writer = CaptureWriter(tmp_path, slow_build, queue_size=2).start()
    caplog.set_level(logging.WARNING, "oaishim.capture")
    items = exchanges(8)
    accepted = [writer.submit(x) for x in items]  # never blocks
    # one taken by the (stuck) writer, at most two queued: the rest are dropped and counted
    assert accepted.count(False) >= 5 and writer.dropped == accepted.count(False)
    assert any("capture queue full" in r.getMessage() for r in caplog.records)
    gate.set()
    writer.close()
    reader = CaptureReader(tmp_path)
    assert len(reader.entries()) == accepted.count(True)
    assert reader.dropped == writer.dropped


def test_one_record_that_cannot_be_built_does_not_stop_the_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def build(raw: RawExchange) -> tuple[fmt.Record, bytes]:
        if raw.client_request and b"q1" in b"".join(raw.client_request.body):
            raise RuntimeError("boom")
        return build_record(raw, Redactor())

    writer = CaptureWriter(tmp_path, build).start()
    for x in exchanges(3):
        writer.submit(x)
    writer.close()
    assert (writer.written, writer.failed) == (2, 1)
    assert "could not build" in caplog.text


def test_a_single_jsonl_file_reads_without_its_index(tmp_path: Path) -> None:
    write_store(tmp_path, exchanges(3))
    (tmp_path / INDEX_NAME).unlink()
    (jsonl,) = CaptureReader(tmp_path).files
    assert len(CaptureReader(jsonl).entries()) == 3
    assert len(CaptureReader(tmp_path).entries()) == 3  # a folder without its index: the files alone


def test_index_lagging_behind_the_files_is_completed_from_them(tmp_path: Path) -> None:
    write_store(tmp_path, exchanges(4))
    db = sqlite3.connect(tmp_path / INDEX_NAME)
    db.execute("DELETE FROM exchanges WHERE rowid > 1")  # as if the writer died before committing
    upto = db.execute("SELECT offset + length FROM exchanges").fetchone()[0]
    db.execute("UPDATE files SET indexed_upto = ?", (upto,))
    db.commit()
    db.close()
    assert len(CaptureReader(tmp_path).entries()) == 4  # in memory
    CaptureWriter(tmp_path, lambda raw: build_record(raw, Redactor())).start().close()
    db = sqlite3.connect(tmp_path / INDEX_NAME)
    assert db.execute("SELECT count(*) FROM exchanges").fetchone() == (4,)  # for good
    db.close()


# -- format versions -------------------------------------------------------------------------------
def test_current_records_need_no_migration() -> None:
    record = {"v": fmt.VERSION, "id": "x"}
    assert fmt.migrate(record) == record
    assert fmt.MIGRATIONS == {} and fmt.VERSION == 1


def test_migrations_run_one_version_at_a_time() -> None:
    def rename(record: fmt.Record) -> fmt.Record:
        out = {k: v for k, v in record.items() if k != "old"}
        return {**out, "renamed": record["old"]}

    table: dict[int, fmt.Migration] = {1: rename, 2: lambda r: {**r, "added": True}}
    assert fmt.migrate({"v": 1, "old": 7}, table) == {"v": 3, "renamed": 7, "added": True}
    assert fmt.migrate({"v": 2, "renamed": 1}, table) == {"v": 3, "renamed": 1, "added": True}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"v": 99}', "newer"),
        (b'{"id": "x"}', "no format version"),
        (b'{"v": 0}', "no migration"),
        (b"[1]", "not a JSON object"),
        (b'{"v": 1', "not JSON"),
    ],
)
def test_what_is_not_a_record_says_why(line: bytes, message: str) -> None:
    with pytest.raises(fmt.RecordError, match=message):
        fmt.parse_line(line)


def test_bodies_round_trip_as_text_or_base64() -> None:
    for data in (b'{"a": 1}', "é✓".encode(), b"\xff\xfe\x00 binary", b""):
        stored = fmt.encode_body(data)
        assert fmt.body_bytes(stored) == data
        assert ("body_b64" in stored) == (data == b"\xff\xfe\x00 binary")


def test_a_record_line_is_one_json_object_holding_both_sides(tmp_path: Path) -> None:
    record, line = build_record(exchanges(1)[0], Redactor())
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert orjson.loads(line) == record
    assert set(record) == {
        "v", "id", "time", "mode", "profile", "model", "client", "upstream", "timings", "error", "findings", "redacted"
    }  # fmt: skip
    response = record["upstream"]["response"]
    assert sum(n for _, n in response["reads"]) == len(fmt.body_bytes(response))
    assert [t for t, _ in response["reads"]] == sorted(t for t, _ in response["reads"])


def test_cli_parsers_are_added() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    for argv in (
        ["capture", "--upstream", "http://x", "--out", "d"],
        ["replay", "d", "--to", "http://x", "--concurrency", "3"],
        ["mock", "d", "--timing", "fast"],
        ["inspect", "d", "--id", "abc"],
    ):
        assert parser.parse_args(argv).command == argv[0]


def test_the_checker_budget_refills_at_its_share_of_wall_time() -> None:
    from oaishim.server.recording import CheckBudget

    now = [0.0]
    budget = CheckBudget(share=0.1, burst=0.05, clock=lambda: now[0])
    assert budget.allow()
    budget.spend(0.2)  # one expensive check: the budget is overdrawn
    assert not budget.allow() and budget.skipped == 1
    now[0] = 1.0  # 0.1 s back per second of wall time: still 0.05 s short
    assert not budget.allow()
    now[0] = 2.0
    assert budget.allow()
    now[0] = 100.0  # a long idle spell refills only up to the burst
    assert budget.allow() and budget.tokens == pytest.approx(0.05)


def test_a_free_budget_allows_every_check_and_keeps_its_share_for_later() -> None:
    """While the capture process's gateway is quiet its checks are free: allowed however overdrawn
    the budget, and not paid from it (a check allowed free and ended after the quiet is not either)."""
    from oaishim.server.recording import CheckBudget

    now = [0.0]
    budget = CheckBudget(share=0.1, burst=0.05, clock=lambda: now[0])
    budget.spend(0.2)
    assert not budget.allow()
    budget.free = True
    for _ in range(100):
        assert budget.allow()
        budget.spend(0.2)
    assert budget.allow()
    budget.free = False  # the gateway busy again while that check ran
    budget.spend(0.2)
    assert budget.tokens == pytest.approx(-0.15) and budget.skipped == 1  # as before the quiet
    assert not budget.allow()
    now[0] = 2.0
    assert budget.allow()
    budget.spend(0.2)  # paid again
    assert budget.tokens == pytest.approx(-0.15)


def test_the_checker_budget_follows_the_idle_cores() -> None:
    """A busy machine (no idle core) stops the checker; idle cores give back the share, never more."""
    from oaishim.server.recording import CheckBudget

    now, idle = [0.0], [0.0]
    readings: list[float | None] = []

    def cores() -> float | None:
        readings.append(idle[0])
        return idle[0]

    budget = CheckBudget(share=0.2, burst=0.01, clock=lambda: now[0], idle=cores, window=0.5)
    budget.spend(0.02)  # overdrawn by one check
    now[0] = 1.0
    assert not budget.allow() and budget.rate == 0.0  # the cores were busy: nothing accrues
    now[0] = 100.0
    assert not budget.allow()
    idle[0] = 0.2  # a fifth of a core idle from now on
    now[0] = 100.05
    assert not budget.allow() and len(readings) == 2  # within the window: not read again
    now[0] = 100.6
    assert budget.allow() and budget.rate == pytest.approx(0.1)  # half the idle: 0.055 s back
    budget.spend(0.05)
    now[0] = 100.8
    assert not budget.allow()  # 0.02 s back of 0.04
    idle[0] = 1.5  # plenty idle: the share, not more
    now[0] = 101.2
    assert budget.allow() and budget.rate == pytest.approx(0.2)
    cores_gone: list[float | None] = [None]  # /proc/stat unreadable: the share alone
    budget.idle = lambda: cores_gone[0]
    budget.rate = 0.0
    now[0] = 102.0
    assert budget.allow() and budget.rate == pytest.approx(0.2)


def test_idle_cores_are_read_from_proc_stat(tmp_path: Path) -> None:
    from oaishim.server.knobs import IdleCores

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n")
    cores = IdleCores(str(stat))
    stat.write_text("cpu  200 0 200 1500 100 0 0 0 0 0\ncpu0 1 2 3 4\n")  # 1,000 ticks: 800 idle
    assert cores() == pytest.approx(0.8 * (os.cpu_count() or 1))
    assert cores() is None  # no tick since: nothing to say
    assert IdleCores(str(tmp_path / "absent"))() is None
    real = IdleCores()
    time.sleep(0.05)
    found = real()
    assert found is None or 0.0 <= found <= (os.cpu_count() or 1)


def test_records_over_the_checker_budget_are_checked_when_shown(tmp_path: Path) -> None:
    from oaishim.capture.render import render_exchange
    from oaishim.server.recording import CheckBudget, Recording

    recording = Recording(tmp_path, mode="proxy", check_budget=CheckBudget(share=0.0, burst=0.0))
    recording.start()
    recording.writer.submit(exchanges(1)[0])
    recording.close()
    reader = CaptureReader(tmp_path)
    (row,) = reader.entries()
    assert row["findings"] is None and row["upstream_findings"] is None  # not checked: not "none found"
    record = reader.get(row["id"])
    assert record["findings"] is None
    shown = render_exchange(record)
    assert "(not checked while recording; checked now)" in shown and "stream.first-delta" in shown


def test_listing_with_findings_checks_records_stored_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from oaishim.server.recording import CheckBudget, Recording

    clean = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    recording = Recording(tmp_path, mode="proxy", check_budget=CheckBudget(share=0.0, burst=0.0))
    recording.start()
    recording.writer.submit(exchanges(1)[0])  # a stream with no role delta first: a finding
    recording.writer.submit(
        backend_record(chat(1, stream=False), [orjson.dumps(clean)], content_type="application/json")
    )
    recording.close()

    def inspect(*extra: str) -> str:
        parser = argparse.ArgumentParser()
        add_parsers(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["inspect", str(tmp_path), *extra])
        assert args.run(args) == 0
        return capsys.readouterr().out

    listing = inspect().splitlines()
    assert len(listing) == 4 and all(line.endswith("unchecked") for line in listing[1:3])  # not "0"
    rows = orjson.loads(inspect("--with-findings", "--format", "json"))["exchanges"]
    assert [(bool(r["stream"]), r["checked_now"]) for r in rows] == [(True, True)]
    assert rows[0]["findings"] >= 1 and rows[0]["upstream_findings"] == rows[0]["findings"]
    listed = inspect("--with-findings").splitlines()
    assert len(listed) == 3 and listed[1].endswith(
        f"{rows[0]['findings']} (upstream {rows[0]['findings']}), checked now"
    )
