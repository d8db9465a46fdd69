"""Responses API exchanges in captures: checked, shown on the timeline, the final response rebuilt,
served again by the mock and compared by replay's diff, like chat ones.

Recorded streams from OpenAI (``tests/fixtures/openai-live-responses/``) and a capture of the
gateway's own ``/v1/responses`` in front of a chat backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from _apps import RunningApp, backend_record, chat_chunks, post, write_store

from oaishim.capture.diff import compare, observe
from oaishim.capture.playbook import Playbook
from oaishim.capture.reader import CaptureReader
from oaishim.capture.render import render_exchange
from oaishim.capture.timeline import describe, final_message, timed_events
from oaishim.capture_tools.mock import MockBackend
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings

LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "openai-live-responses"
REQUEST = {"model": "gpt-5.1", "input": "Say hello.", "stream": True}


def _events(raw: bytes) -> list[bytes]:
    """The recording cut at every event boundary, one read each (as a socket may deliver them)."""
    return [piece + b"\n\n" for piece in raw.split(b"\n\n") if piece.strip()]


def _terminal(raw: bytes) -> dict[str, Any]:
    for piece in reversed(_events(raw)):
        data = orjson.loads(piece.split(b"data: ", 1)[1])
        if data["type"] in ("response.completed", "response.incomplete", "response.failed"):
            response: dict[str, Any] = data["response"]
            return response
    raise AssertionError("no terminal event")


def _stored(tmp_path: Path, name: str, request: dict[str, Any] = REQUEST) -> dict[str, Any]:
    raw = (LIVE / name).read_bytes()
    folder = tmp_path / name
    write_store(folder, [backend_record(request, _events(raw), path="/v1/responses", step_ms=5)])
    (record,) = CaptureReader(folder).records()
    return record


@pytest.mark.parametrize("name", ["text.sse", "reasoning-summary-then-function-call.sse"])
def test_official_streams_have_no_finding_and_show_their_events(tmp_path: Path, name: str) -> None:
    record = _stored(tmp_path, name)
    assert [f for f in record["findings"]["upstream"] if f["severity"] == "error"] == []
    lines = [describe(e) for e in timed_events(record["upstream"]["response"])]
    assert lines[0].startswith("response.created status=in_progress")
    assert lines[-1].startswith("response.completed status=completed usage {")
    deltas = [line for line in lines if line.startswith("response.output_text.delta ")]
    final = _terminal((LIVE / name).read_bytes())
    text = "".join(p["text"] for i in final["output"] if i["type"] == "message" for p in i["content"])
    assert "".join(orjson.loads(line.split(" ", 1)[1]) for line in deltas) == text
    assert record["timings"]["ttft_ms"] is not None or not text  # the first delta is the first token
    assert final_message(record["upstream"]["response"], "/v1/responses") == final


def test_a_non_official_stream_gets_responses_findings(tmp_path: Path) -> None:
    """LM Studio's stream (recorded there too) breaks the Responses grammar: the capture says so."""
    record = _stored(tmp_path, "lmstudio-reasoning-text-then-function-call.sse")
    rules = {f["rule"] for f in record["findings"]["upstream"] if f["severity"] == "error"}
    assert rules and all(r.startswith("responses.") or r in ("schema", "unknown-field") for r in rules)
    assert any(r.startswith("responses.") for r in rules)


def test_inspect_shows_the_final_response(tmp_path: Path) -> None:
    record = _stored(tmp_path, "text.sse")
    shown = render_exchange(record, "upstream")
    final = _terminal((LIVE / "text.sse").read_bytes())
    assert final["id"] in shown and "response.output_text.delta" in shown
    assert '"object": "response"' in shown or '"object":"response"' in shown


def test_replay_diff_reads_text_and_terminal_status(tmp_path: Path) -> None:
    record = _stored(tmp_path, "text.sse")
    seen = observe(record["client"]["request"], record["upstream"]["response"])
    final = _terminal((LIVE / "text.sse").read_bytes())
    assert seen.finish == {0: "completed"} and seen.texts[0] and seen.texts[0] in orjson.dumps(final).decode()
    assert "$.response.output[*].content[*].text" in seen.fields
    other = observe(
        record["client"]["request"],
        _stored(tmp_path, "reasoning-summary-then-function-call.sse")["upstream"]["response"],
    )
    kinds = {d.kind for d in compare(seen, other)}
    assert {"text", "fields"} <= kinds


def test_the_mock_serves_a_recorded_responses_stream(tmp_path: Path) -> None:
    raw = (LIVE / "text.sse").read_bytes()
    write_store(tmp_path / "store", [backend_record(REQUEST, _events(raw), path="/v1/responses")])
    playbook = Playbook.of(CaptureReader(tmp_path / "store").records())
    with RunningApp(MockBackend(playbook, "fast")) as mock:
        status, body = post(mock.url + "/v1/responses", REQUEST)
        assert (status == 200 and body == raw.rstrip(b"\n") + b"\n\n") or body.strip() == raw.strip()
        status, _ = post(mock.url + "/v1/responses", {**REQUEST, "input": "something else"})
        assert status == 404


def test_a_gateway_capture_of_a_responses_exchange(tmp_path: Path) -> None:
    folder = tmp_path / "capture"
    usage = {
        "id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000, "model": "tiny", "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }  # fmt: skip
    chunks = chat_chunks(["Hel", "lo"])
    stream = b"".join(chunks[:-1]) + b"data: " + orjson.dumps(usage) + b"\n\n" + chunks[-1]

    async def backend(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": stream})

    with RunningApp(backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="generic")
        settings = Settings(models=(route,), capture_dir=folder, state="memory")
        with RunningApp(Gateway(settings)) as gw:
            status, body = post(gw.url + "/v1/responses", {"model": "tiny", "input": "hi", "stream": True})
    assert status == 200 and b"response.completed" in body
    (record,) = CaptureReader(folder).records()
    assert record["client"]["request"]["target"] == "/v1/responses"
    assert record["profile"] == "generic"  # the profile the request was prepared for (exchange.note)
    assert record["upstream"]["request"]["target"].endswith("/v1/chat/completions")  # what the bridge sent
    assert [f for f in record["findings"]["client"] if f["severity"] in ("error", "warning")] == []
    final = final_message(record["client"]["response"], record["client"]["request"]["target"])
    assert final["object"] == "response" and final["status"] == "completed"
    assert [p["text"] for i in final["output"] for p in i["content"]] == ["Hello"]
    lines = [describe(e) for e in timed_events(record["client"]["response"])]
    assert 'response.output_text.delta "Hel"' in lines and 'response.output_text.delta "lo"' in lines
    assert "Hello" in render_exchange(record, "client")
