"""Building a record (pure): redaction tables and JSON paths, the stream timeline with each event's
offset, first token, the final message, and settings that turn capture on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from _apps import backend_record, chat_chunks, sse

from oaishim.capture.build import build_record
from oaishim.capture.raw import RawResponse
from oaishim.capture.record import body_bytes, header_value
from oaishim.capture.redact import MASK, Redactor, parse_path, scrub, secret_values
from oaishim.capture.timeline import describe, final_message, first_token_ms, timed_events
from oaishim.server.config import ConfigError, build_settings

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("$.user", ("user",)),
        ("user", ("user",)),
        ("messages[*].content", ("messages", "*", "content")),
        ("$.a[2].b", ("a", 2, "b")),
        ("$.metadata.*", ("metadata", "*")),
    ],
)
def test_json_paths_parse(text: str, parts: tuple[object, ...]) -> None:
    assert parse_path(text) == parts


@pytest.mark.parametrize("text", ["", "$", "a..b", "a[x]", "a[", "$.a]"])
def test_bad_json_paths_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a JSON path"):
        parse_path(text)


def test_json_paths_redact_in_place_and_say_where() -> None:
    body = {"user": "u", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    notes: set[str] = set()
    redactor = Redactor.build(["messages[*].content", "$.absent.x"])
    assert redactor.json(body, notes)
    assert [m["content"] for m in body["messages"]] == [MASK, MASK]
    assert body["user"] == "u" and notes == {"json:$.messages[*].content"}
    assert not redactor.json(body, set())  # already redacted: nothing changes


def test_secret_headers_and_query_parameters() -> None:
    found: set[str] = set()
    notes: set[str] = set()
    redactor = Redactor()
    headers = redactor.headers(
        [("Authorization", "Bearer sk-abcdefgh12"), ("Cookie", "a=1; sid=s3cr3t-cookie"), ("Accept", "*/*")],
        found,
        notes,
    )
    assert headers == [["Authorization", MASK], ["Cookie", MASK], ["Accept", "*/*"]]
    assert {"sk-abcdefgh12", "s3cr3t-cookie"} <= found and "1" not in found
    target = redactor.target("/v1/x?api_key=k3y-value-123&keep=1", found, notes)
    assert target == "/v1/x?api_key=%5BREDACTED%5D&keep=1" and "k3y-value-123" in found
    assert notes == {"header:authorization", "header:cookie", "query:api_key"}
    assert secret_values("Bearer short") == ["Bearer short"]  # too short to scrub alone


def test_scrub_finds_a_secret_as_json_escapes_it() -> None:
    secret = 'pa"ss\\word-123'
    line = orjson.dumps({"a": f"x {secret} y"})
    notes: set[str] = set()
    assert orjson.loads(scrub(line, [secret], notes)) == {"a": f"x {MASK} y"} and notes == {"literal"}


def test_json_paths_inside_a_stream_reencode_it_with_the_original_times() -> None:
    pieces = sse(
        {"choices": [{"index": 0, "delta": {"content": "secret"}}], "object": "chat.completion.chunk"}, "[DONE]"
    )
    raw = backend_record(CHAT, pieces, step_ms=10)
    record, _ = build_record(raw, Redactor.build(["choices[*].delta.content"]))
    response = record["upstream"]["response"]
    assert b"secret" not in body_bytes(response) and MASK.encode() in body_bytes(response)
    assert [e.t_ms for e in timed_events(response)] == pytest.approx([20.0, 30.0])
    assert "json:$.choices[*].delta.content" in record["redacted"]


def test_each_event_gets_the_time_of_the_read_that_completed_it() -> None:
    data = "".join(p.decode() for p in chat_chunks(["é✓", "b"])).encode()
    # cut anywhere, including inside a multi-byte character and between \n and \n
    cuts = [5, data.index("é".encode()) + 1, data.index(b"\n\n") + 1, len(data) - 3, len(data)]
    reads, start = [], 0
    for n, cut in enumerate(sorted(set(cuts))):
        reads.append([10.0 * (n + 1), cut - start])
        start = cut
    response = {
        "t": 1.0,
        "status": 200,
        "headers": [["content-type", "text/event-stream"]],
        "body": data.decode(),
        "reads": reads,
    }
    events = timed_events(response)
    assert [e.event.data for e in events][-1] == "[DONE]" and len(events) == 5
    for event in events:
        end = data.index(event.event.data.encode()) + len(event.event.data.encode()) + 2
        completing = next(t for t, upto in zip([r[0] for r in reads], _ends(reads), strict=True) if upto >= end)
        assert event.t_ms == completing
    assert first_token_ms(events) == events[1].t_ms
    assert describe(events[0]) == "role=assistant" and describe(events[1]) == '"é✓"'
    assert describe(events[3]) == "finish_reason=stop" and describe(events[4]) == "[DONE]"
    final = final_message(response, "/v1/chat/completions")
    assert final["choices"][0]["message"]["content"] == "é✓b" and final["choices"][0]["finish_reason"] == "stop"


def _ends(reads: list[list[float]]) -> list[int]:
    out, total = [], 0
    for _, n in reads:
        total += int(n)
        out.append(total)
    return out


def test_final_message_of_a_legacy_completion_stream() -> None:
    chunk = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    body = b"".join(
        sse(
            {**chunk, "choices": [{"index": 0, "text": "ab", "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "text": "c", "finish_reason": "length"}]},
            "[DONE]",
        )
    )
    response = {"headers": [], "body": body.decode(), "reads": [[1.0, len(body)]]}
    final = final_message(response, "http://h:1/v1/completions")
    assert final["choices"][0]["text"] == "abc" and final["choices"][0]["finish_reason"] == "length"


def test_timings_of_a_record() -> None:
    raw = backend_record(CHAT, chat_chunks(["a", "b"]), step_ms=10)
    record, _ = build_record(raw, Redactor())
    timings = record["timings"]
    assert timings["ttfb_ms"] == pytest.approx(20.0) and timings["ttft_ms"] == pytest.approx(30.0)
    assert timings["upstream_ttft_ms"] == pytest.approx(30.0) and timings["total_ms"] == pytest.approx(70.0)


def test_response_headers_are_kept_in_order_with_duplicates() -> None:
    raw = backend_record(CHAT, [b"{}"], content_type="application/json")
    assert raw.upstream_response is not None
    raw.upstream_response = RawResponse(
        raw.upstream_response.t_ns, 200, [(b"x-a", b"1"), (b"X-B", b"2"), (b"x-a", b"3")], raw.upstream_response.reads
    )
    record, _ = build_record(raw, Redactor())
    assert record["upstream"]["response"]["headers"] == [["x-a", "1"], ["X-B", "2"], ["x-a", "3"]]
    assert header_value(record["upstream"]["response"], "x-b") == "2"


def test_settings_turn_capture_on_from_flags_environment_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build_settings(upstream="http://h:1").capture_dir is None
    flagged = build_settings(upstream="http://h:1", capture=tmp_path / "a", capture_redact=["$.user"])
    assert flagged.capture_dir == tmp_path / "a" and flagged.capture_redact == ("$.user",)
    monkeypatch.setenv("OAISHIM_CAPTURE", str(tmp_path / "b"))
    monkeypatch.setenv("OAISHIM_CAPTURE_REDACT", "$.user,messages[*].content")
    from_env = build_settings(upstream="http://h:1")
    assert from_env.capture_dir == tmp_path / "b" and from_env.capture_redact == ("$.user", "messages[*].content")
    with pytest.raises(ConfigError, match="capture_redact"):
        build_settings(upstream="http://h:1", capture_redact=["a[x]"])
