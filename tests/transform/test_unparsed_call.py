"""llama.cpp's stream under ``tool_choice: "auto"`` when the model began a call its final parse refuses
(L-32): its partial parses streamed every token as content, then an error event stands where the
finish belongs. Recorded from the real ``llama-server`` (tests/fixtures/recorded/llamacpp-server,
``ls.chat_tools_auto_unparsed_stream*``). The client already has the whole answer as text, so with
the profile's phrase the stream ends as an answer, at every split point of the upstream bytes;
without it (or for another error) the error event stays the stream's end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _pipes import every_split, run

from oaishim.check import check, exchange_from_bytes
from oaishim.profiles import get_profile
from oaishim.transform.context import ResponseContext
from oaishim.transform.repair import RepairPlan
from oaishim.wire.accumulate import accumulate_chat

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "llamacpp-server"
PHRASE = get_profile("llamacpp").tool_choice.unparsed


def recorded(name: str) -> tuple[bytes, dict[str, object]]:
    return (RECORDED / f"ls.{name}.body").read_bytes(), json.loads((RECORDED / f"ls.{name}.request.json").read_text())


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def upstream_text(raw: bytes) -> str:
    """Every content delta the backend sent, joined."""
    return "".join(c["delta"].get("content") or "" for e in chunks(raw) for c in e.get("choices", []))


def ctx(unparsed: str | None, *, include_usage: bool = False) -> ResponseContext:
    plan = RepairPlan(tools=True, tool_names=frozenset({"shell"}))
    return ResponseContext("tiny", tool_mode="auto", repair=plan, unparsed_call=unparsed, include_usage=include_usage)


def test_the_profile_names_the_phrase_the_recording_carries() -> None:
    raw, _ = recorded("chat_tools_auto_unparsed_stream")
    assert PHRASE is not None and PHRASE.encode() in raw


@pytest.mark.parametrize("name", ["chat_tools_auto_unparsed_stream", "chat_tools_auto_unparsed_stream_first"])
def test_the_refused_parse_ends_the_stream_as_an_answer_at_every_split(name: str) -> None:
    raw, request = recorded(name)
    want = upstream_text(raw)
    assert "<tool_call>" in want  # the model began a call in the template's format
    for pieces in every_split(raw):
        context = ctx(PHRASE)
        out, pipe = run(pieces, context)
        assert pipe.ended and pipe.normalizer.error is None, pieces
        assert out.endswith(b"data: [DONE]\n\n")
        message = accumulate_chat(chunks(out))["choices"][0]
        assert message["finish_reason"] == "stop"
        assert message["message"]["content"] == want  # nothing of what the model wrote is lost
        assert not message["message"].get("tool_calls")
        assert "unparsed_call_finished" in context.repairs
        exchange = exchange_from_bytes(out, request=request, status=200, headers={"content-type": "text/event-stream"})
        assert [(f.rule, f.message) for f in check(exchange) if f.severity == "error"] == []


def test_without_the_phrase_the_error_stays_the_streams_end() -> None:
    raw, _ = recorded("chat_tools_auto_unparsed_stream")
    out, pipe = run([raw], ctx(None))
    last = json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))
    assert "does not match" in last["error"]["message"] and b"[DONE]" not in out
    assert pipe.normalizer.error is not None


def test_another_error_in_the_same_place_stays_an_error() -> None:
    raw, _ = recorded("chat_tools_auto_unparsed_stream")
    message = b"The model produced output that does not match the expected peg-native format"
    assert message in raw
    other = raw.replace(message, b"slot unavailable")
    out, pipe = run([other], ctx(PHRASE))
    assert pipe.normalizer.error is not None and b"[DONE]" not in out
    assert json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))["error"]["message"] == "slot unavailable"


def test_the_usage_is_the_backends_last_counts_when_the_refusal_took_its_place() -> None:
    """The gateway asks for llama.cpp's per-chunk counts on such a stream (``timings_per_token``,
    in the recording): the prompt is the cached plus the processed tokens, the completion the
    tokens predicted at the last chunk."""
    raw, request = recorded("chat_tools_auto_unparsed_stream")
    assert request.get("timings_per_token") is True
    last = [e["timings"] for e in chunks(raw) if "timings" in e][-1]
    prompt = last["cache_n"] + last["prompt_n"]
    for pieces in every_split(raw):
        out, _ = run(pieces, ctx(PHRASE, include_usage=True))
        usage = chunks(out)[-1]["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt, last["predicted_n"]), pieces
        assert usage["total_tokens"] == prompt + last["predicted_n"]
        assert b'"timings"' not in out  # the counts are the gateway's to read, not the client's


GRAMMAR_DONE = get_profile("llamacpp").tool_choice.grammar_done


@pytest.mark.parametrize("mode", ["auto", "named"])
def test_an_error_after_a_completed_grammar_ends_the_stream_as_the_answer_at_every_split(mode: str) -> None:
    """L-33 (recorded): the grammar had completed, one more token came, llama.cpp's error stands
    where the finish belongs; seen live on a forced choice's guided second try, so under any mode."""
    raw, request = recorded("chat_tools_auto_grammar_end_stream")
    assert GRAMMAR_DONE is not None and GRAMMAR_DONE.encode() in raw
    want = upstream_text(raw)
    assert want
    for pieces in every_split(raw):
        plan = RepairPlan(tools=True, tool_names=frozenset({"shell"}))
        context = ResponseContext("tiny", tool_mode=mode, repair=plan, grammar_done=GRAMMAR_DONE)  # type: ignore[arg-type]
        out, pipe = run(pieces, context)
        assert pipe.ended and pipe.normalizer.error is None, pieces
        message = accumulate_chat(chunks(out))["choices"][0]
        assert (message["message"]["content"], message["finish_reason"]) == (want, "stop")
        assert "grammar_end_finished" in context.repairs
        exchange = exchange_from_bytes(out, request=request, status=200, headers={"content-type": "text/event-stream"})
        assert [(f.rule, f.message) for f in check(exchange) if f.severity == "error"] == []


def test_without_the_grammar_phrase_that_error_stays_the_streams_end() -> None:
    raw, _ = recorded("chat_tools_auto_grammar_end_stream")
    out, pipe = run([raw], ctx(PHRASE))  # the unparsed phrase alone does not cover it
    assert pipe.normalizer.error is not None and b"[DONE]" not in out
    assert (
        "empty grammar stack" in json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))["error"]["message"]
    )
