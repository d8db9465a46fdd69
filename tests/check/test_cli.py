"""``oaishim check`` as a user runs it: exit codes, formats, and the time budget."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from _live import LIVE_FILES, RESPONSES, RESPONSES_REAL, live_chunks, to_sse

from oaishim.commands.main import main

OAISHIM = [sys.executable, "-m", "oaishim"]


def test_live_fixtures_check_clean_in_a_fresh_process_within_two_seconds() -> None:
    started = time.perf_counter()
    proc = subprocess.run([*OAISHIM, "check", *map(str, LIVE_FILES)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": 0 error(s), 0 warning(s), 0 note(s)") == 12
    assert elapsed < 2.0


def test_error_findings_exit_one_and_json_lists_them(tmp_path: Path, capsys: object) -> None:
    chunks = live_chunks("content.sse")
    chunks[3]["choices"][0]["stop_reason"] = None
    body = tmp_path / "vendor.sse"
    body.write_bytes(to_sse(chunks))
    assert main(["check", str(body), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    [report] = out["files"]
    assert report["counts"] == {"error": 1, "warning": 0, "note": 0}
    assert report["findings"][0]["rule"] == "unknown-field"
    assert report["findings"][0]["chunk"] == 3
    assert main(["check", str(body), "--extensions-as-notes"]) == 0


def test_request_file_enables_request_rules(tmp_path: Path) -> None:
    body = tmp_path / "b.sse"
    body.write_bytes(to_sse(live_chunks("content.sse")))
    request = tmp_path / "r.json"
    request.write_text(json.dumps({"model": "m", "messages": [], "stream": True}))
    assert main(["check", str(body)]) == 0
    assert main(["check", str(body), "--request", str(request)]) == 1  # a usage chunk nobody asked for


def test_unusable_input_exits_two(tmp_path: Path) -> None:
    body = tmp_path / "b.sse"
    body.write_bytes(b"data: [DONE]\n\n")
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    assert main(["check", str(body), "--request", str(bad)]) == 2
    assert main(["check", str(tmp_path / "missing.sse")]) == 2


def test_json_error_body_with_status(tmp_path: Path) -> None:
    body = tmp_path / "e.json"
    body.write_text(
        json.dumps({"object": "error", "message": "bad", "type": "BadRequestError", "param": None, "code": 400})
    )
    assert main(["check", str(body), "--status", "400"]) == 1


def test_a_stream_of_json_that_is_not_chunks_is_reported_not_crashed_on(tmp_path: Path) -> None:
    body = tmp_path / "odd.sse"
    body.write_bytes(b'data: {"hello": "world"}\n\ndata: [DONE]\n\n')
    assert main(["check", str(body)]) == 1  # schema findings, and no ValueError from accumulating nothing


def test_responses_recordings_are_recognised_and_the_real_ones_have_no_errors() -> None:
    proc = subprocess.run([*OAISHIM, "check", *map(str, RESPONSES_REAL)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": 0 error(s), ") == len(RESPONSES_REAL)
    other = RESPONSES / "lmstudio-reasoning-text-then-function-call.sse"
    assert main(["check", str(other)]) == 1  # another server: unknown fields, arguments never streamed
