"""A capture of the gateway's own client side judges it with its settings: the reasoning field it was
told to send (``--reasoning-field``) is a note, not an ``unknown-field`` error on every reasoning
chunk; a field it did not mean to send is still an error. The backend here writes ``<think>`` into
its content, as a reasoning model served without a reasoning parser does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _apps import RunningApp, chat_chunks, post

from oaishim.capture.reader import CaptureReader
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import gateway_check_options

STREAM = b"".join(chat_chunks(["<think>", "Let me see.", "</think>", "Hello", "!"]))
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def thinking_backend(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": STREAM})


def client_findings(tmp_path: Path, **settings: Any) -> list[dict[str, Any]]:
    folder = tmp_path / "capture"
    with RunningApp(thinking_backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="trtllm")
        with RunningApp(Gateway(Settings(models=(route,), capture_dir=folder, **settings))) as gw:
            status, body = post(gw.url + "/v1/chat/completions", CHAT)
            assert status == 200 and b"Let me see." in body
    (record,) = CaptureReader(folder).records()
    findings: list[dict[str, Any]] = record["findings"]["client"]
    return findings


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "both"])
def test_the_reasoning_field_it_was_told_to_send_is_a_note(tmp_path: Path, field: str) -> None:
    findings = client_findings(tmp_path, reasoning_field=field)
    assert [f for f in findings if f["severity"] == "error"] == []
    notes = [f for f in findings if f["rule"] == "unknown-field"]
    assert notes and all(f["severity"] == "note" and "sent on purpose" in f["message"] for f in notes)
    sent = {f["path"].rsplit(".", 1)[-1] for f in notes}
    assert sent == ({"reasoning_content", "reasoning"} if field == "both" else {field})


def test_a_field_it_did_not_mean_to_send_is_still_an_error() -> None:
    """Judged by the options as built from the settings: under ``drop`` a reasoning field is an error."""
    from oaishim.check import check, exchange_from_bytes

    head = b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,'
    deltas = [b'"delta":{"role":"assistant","content":""}', b'"delta":{"reasoning_content":"x"}', b'"delta":{}']
    finishes = [b"null", b"null", b'"stop"']
    raw = b"".join(
        b"data: " + head + d + b',"logprobs":null,"finish_reason":' + f + b"}]}\n\n"
        for d, f in zip(deltas, finishes, strict=True)
    )
    raw += b"data: [DONE]\n\n"
    for field, severity in (("drop", "error"), ("reasoning", "error"), ("reasoning_content", "note")):
        options = gateway_check_options(Settings(reasoning_field=field))  # type: ignore[arg-type]
        found = [f for f in check(exchange_from_bytes(raw), options) if f.rule == "unknown-field"]
        assert [f.severity for f in found] == [severity], field
