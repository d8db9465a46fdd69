"""tool_choice / parallel_tool_calls mean what they say (issue 15, items 3, 4, 6): the request each
profile sends, the decision on an answer, and the stream's tool-call repairs at every split point."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_late_finish import client_chunks, every_split, relay

from oaishim.profiles import get_profile
from oaishim.server.config import Settings
from oaishim.transform.choice_watch import ArgumentCheck, ChoiceWatch, plain_verdict
from oaishim.transform.context import ResponseContext
from oaishim.transform.params.tool_choice import guided_body, satisfied
from oaishim.transform.pipe import plain_answer
from oaishim.transform.plan import response_context
from oaishim.transform.request import prepare
from oaishim.wire.accumulate import accumulate_chat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
NAMED = {"type": "function", "function": {"name": "get_time"}}
BASE = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER, TIME]}


def sent(profile: str, **fields: Any) -> tuple[dict[str, Any], Any]:
    prepared = prepare("chat", {**BASE, **fields}, get_profile(profile))
    return prepared.body, prepared


# -- the request each profile sends ------------------------------------------------------------------


def test_llamacpp_named_choice_offers_only_that_tool_under_required() -> None:
    body, prepared = sent("llamacpp@b9174", tool_choice=NAMED)
    assert body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in body["tools"]] == ["get_time"]
    assert prepared.tool_check == "get_time"  # llama.cpp's grammar may not hold (L-30): checked
    assert "named_choice_as_required" in prepared.repairs


@pytest.mark.parametrize("profile", ["llamacpp@b9174", "llamacpp@b8000"])
def test_llamacpp_required_is_sent_as_it_is_and_checked(profile: str) -> None:
    body, prepared = sent(profile, tool_choice="required")
    assert body["tool_choice"] == "required" and len(body["tools"]) == 2
    assert prepared.tool_check == ""
    assert sent(profile, tool_choice="auto")[1].tool_check is None


def _as_text(profile: str) -> Any:
    """``profile`` as detection leaves it for a template that writes ``<tool_call>`` (L-34)."""
    base = get_profile(profile)
    return replace(base, tool_choice=replace(base.tool_choice, calls_as_text=True))


@pytest.mark.parametrize("choice", [None, "auto"])
def test_a_stream_under_auto_is_sent_none_with_the_tools_where_the_template_writes_calls_the_gateway_reads(
    choice: Any,
) -> None:
    """L-34: llama.cpp's partial parse can go silent at call markup it cannot read and drop the rest;
    under ``none`` every token streams as text, the tools still in the template, and the gateway parses."""
    fields: dict[str, Any] = {"stream": True} if choice is None else {"stream": True, "tool_choice": choice}
    prepared = prepare("chat", {**BASE, **fields}, _as_text("llamacpp@b9174"))
    body = prepared.body
    assert body["tool_choice"] == "none" and body["tools"] == [WEATHER, TIME]
    assert "timings_per_token" not in body  # no refused parse can end it (L-32)
    assert "calls_read_as_text" in prepared.repairs and prepared.tool_check is None
    context = response_context("chat", prepared, Settings())
    assert context.repair.tools and context.tool_mode == "auto"  # the gateway reads the calls


@pytest.mark.parametrize(
    "fields",
    [
        {"stream": False},  # a plain answer is asked again after a refused parse (L-31)
        {"stream": True, "tool_choice": "required"},  # the backend's grammar forces the call
        {"stream": True, "tool_choice": NAMED},
    ],
)
def test_only_streams_under_auto_are_read_as_text(fields: dict[str, Any]) -> None:
    as_text = prepare("chat", {**BASE, **fields}, _as_text("llamacpp@b9174"))
    plain = prepare("chat", {**BASE, **fields}, get_profile("llamacpp@b9174"))
    assert as_text.body == plain.body and as_text.repairs == plain.repairs


def test_without_the_template_a_stream_under_auto_keeps_the_backends_parser() -> None:
    body, prepared = sent("llamacpp@b9174", stream=True)
    assert "tool_choice" not in body and body["timings_per_token"] is True
    assert "calls_read_as_text" not in prepared.repairs


@pytest.mark.parametrize(
    ("profile", "fields", "asked"),
    [
        ("llamacpp@b9174", {"stream": True}, True),  # auto by default
        ("llamacpp@b9174", {"stream": True, "tool_choice": "auto"}, True),
        ("llamacpp@b9174", {"stream": False, "tool_choice": "auto"}, False),  # a plain 500 is asked again
        ("llamacpp@b9174", {"stream": True, "tool_choice": "required"}, False),  # checked and asked again
        ("vllm@0.32", {"stream": True, "tool_choice": "auto"}, False),
    ],
)
def test_llamacpp_is_asked_for_its_token_counts_where_a_refused_parse_may_end_the_stream(
    profile: str, fields: dict[str, Any], asked: bool
) -> None:
    """L-32: such a stream ends without its usage; the per-chunk counts stand in for it."""
    body, _ = sent(profile, **fields)
    assert ("timings_per_token" in body) is asked
    if asked:
        assert body["timings_per_token"] is True


def test_llamacpp_second_try_forces_one_call_with_its_json_schema_field() -> None:
    body, prepared = sent("llamacpp@b9174", tool_choice=NAMED)
    guided = guided_body(body, prepared.tool_choice, get_profile("llamacpp@b9174"))
    assert guided is not None and guided["tool_choice"] == "none"
    schema = guided["json_schema"]  # the schema itself: llama.cpp's native field
    assert schema["properties"]["name"] == {"type": "string", "enum": ["get_time"]}
    assert schema["required"] == ["name", "arguments"]
    # its grammar waits for the reasoning to end: the forced call is asked with thinking off
    assert guided["chat_template_kwargs"] == {"enable_thinking": False}
    mine = guided_body({**body, "chat_template_kwargs": {"enable_thinking": True}}, NAMED, get_profile("llamacpp"))
    assert mine is not None and mine["chat_template_kwargs"] == {"enable_thinking": True}  # the client's own win


@pytest.mark.parametrize("profile", ["llamacpp@b9174", "llamacpp@b8000"])
def test_a_forced_call_beside_a_response_format_is_guided_by_the_call_schema(profile: str) -> None:
    text_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    body, prepared = sent(profile, tool_choice=NAMED, response_format=text_format)
    guided = guided_body(body, prepared.tool_choice, get_profile(profile))
    assert guided is not None and "response_format" not in guided
    assert guided["json_schema"]["properties"]["name"]["enum"] == ["get_time"]


def test_llamacpp_is_told_parallel_calls_are_allowed_when_the_client_left_it_out() -> None:
    assert sent("llamacpp@b9174")[0]["parallel_tool_calls"] is True
    assert sent("llamacpp@b9174", parallel_tool_calls=False)[0]["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in sent("vllm@0.32")[0]  # its default is OpenAI's


@pytest.mark.parametrize("profile", ["trtllm@1.3", "trtllm@1.4", "ollama", "generic"])
def test_required_where_the_backend_cannot_force_it_is_sent_auto_and_checked(profile: str) -> None:
    body, prepared = sent(profile, tool_choice="required")
    assert body["tool_choice"] == "auto" and len(body["tools"]) == 2
    assert prepared.tool_check == ""
    assert prepared.tool_choice == "required"  # the response side still answers as for required


def test_ollama_named_choice_offers_only_that_tool_and_is_checked() -> None:
    body, prepared = sent("ollama", tool_choice=NAMED)
    assert body["tool_choice"] == "auto" and [t["function"]["name"] for t in body["tools"]] == ["get_time"]
    assert prepared.tool_check == "get_time"


@pytest.mark.parametrize("profile", ["vllm@0.32", "sglang", "trtllm@1.4"])
def test_named_choice_is_sent_as_it_is_where_the_backend_forces_it(profile: str) -> None:
    body, prepared = sent(profile, tool_choice=NAMED)
    assert body["tool_choice"] == NAMED and len(body["tools"]) == 2 and prepared.tool_check is None


@pytest.mark.parametrize("profile", ["vllm@0.32", "sglang", "trtllm@1.4", "llamacpp@b9174", "ollama", "generic"])
def test_none_hides_the_tools_from_self_hosted_backends(profile: str) -> None:
    body, prepared = sent(profile, tool_choice="none", parallel_tool_calls=True)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)
    assert prepared.tool_choice == "none"


def test_the_official_profile_sends_every_choice_as_it_is() -> None:
    for choice in ("none", "required", NAMED):
        body, prepared = sent("openai", tool_choice=choice)
        assert body["tool_choice"] == choice and len(body["tools"]) == 2 and prepared.tool_check is None


def test_guided_resend_forces_one_call_of_the_named_function() -> None:
    body, _ = sent("vllm@0.32", tool_choice=NAMED)
    guided = guided_body(body, NAMED, get_profile("vllm@0.32"))
    assert guided is not None and guided["tool_choice"] == "none"
    schema = guided["structured_outputs"]["json"]
    assert schema["properties"]["name"] == {"type": "string", "enum": ["get_time"]}
    assert schema["properties"]["arguments"] == TIME["function"]["parameters"]
    required = guided_body(sent("vllm@0.32", tool_choice="required")[0], "required", get_profile("vllm@0.32"))
    assert required is not None and len(required["structured_outputs"]["json"]["anyOf"]) == 2
    assert guided_body(body, NAMED, get_profile("sglang")) is None  # no guided field in that profile


def test_satisfied() -> None:
    assert satisfied(None, [])
    assert satisfied("", ["a"]) and not satisfied("", [])
    assert satisfied("b", ["a", "b"]) and not satisfied("b", ["a"])


# -- the stream's tool calls at every split point -----------------------------------------------------


def sse(*deltas: dict[str, Any], finish: str = "tool_calls") -> bytes:
    events = [{"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def call(index: int, args: str, name: str | None = None, cid: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name is not None:
        fn["name"] = name
    entry: dict[str, Any] = {"index": index, "function": fn}
    if cid is not None:
        entry["id"] = cid
    return {"tool_calls": [entry]}


# Two calls, both at index 0 (the symptom in the issue), each with its own id; fragments split mid-JSON
ALL_AT_ZERO = sse(
    call(0, '{"city": ', "get_weather", "u1"),
    call(0, '"Paris"}'),
    call(0, "", "get_time", "u2"),
    call(0, "{}"),
)
# No ids at all: the second call is told by its name after the first call's complete arguments
NO_IDS = sse(call(0, '{"city": "Paris"}', "get_weather"), call(0, "{", "get_time"), call(0, "}"))


def tool_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for c in chunks for ch in c["choices"] for t in ch["delta"].get("tool_calls") or ()]


@pytest.mark.parametrize("raw", [ALL_AT_ZERO, NO_IDS], ids=["ids", "no-ids"])
def test_calls_numbered_zero_by_the_backend_become_two_calls_at_every_split_point(raw: bytes) -> None:
    for pieces in every_split(raw):
        ctx = ResponseContext(model="m", tool_mode="auto")
        chunks = client_chunks(relay(pieces, ctx))
        deltas = tool_deltas(chunks)
        firsts = [d for d in deltas if "id" in d]
        assert [(d["index"], d["function"]["name"]) for d in firsts] == [(0, "get_weather"), (1, "get_time")]
        assert len({d["id"] for d in firsts}) == 2
        assert all("id" not in d and "name" not in d["function"] for d in deltas if d not in firsts)
        (choice,) = accumulate_chat(chunks)["choices"]
        calls = [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]
        ]
        assert calls == [("get_weather", {"city": "Paris"}), ("get_time", {})], pieces
        assert ctx.violations == []


def test_parallel_tool_calls_false_lets_one_call_through_at_every_split_point() -> None:
    for pieces in every_split(ALL_AT_ZERO):
        ctx = ResponseContext(model="m", tool_mode="auto", one_tool_call=True)
        chunks = client_chunks(relay(pieces, ctx))
        (choice,) = accumulate_chat(chunks)["choices"]
        assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
        assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
        assert choice["finish_reason"] == "tool_calls"
        assert ctx.repairs == {"parallel_calls_dropped"}


def test_argument_fragments_pass_through_as_they_come() -> None:
    out = relay([ALL_AT_ZERO], ResponseContext(model="m", tool_mode="auto"))
    fragments = [d["function"]["arguments"] for d in tool_deltas(client_chunks(out))]
    assert fragments == ["", '{"city": ', '"Paris"}', "", "{}"]


BROKEN = sse(call(0, '{"city": "Par', "get_weather", "u1"), call(0, "is"), finish="stop")


def test_invalid_final_arguments_are_reported_not_invented_at_every_split_point() -> None:
    for pieces in every_split(BROKEN):
        ctx = ResponseContext(model="m", tool_mode="auto")
        chunks = client_chunks(relay(pieces, ctx))
        (choice,) = accumulate_chat(chunks)["choices"]
        assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris'  # as it came
        ((index, kind, detail),) = ctx.violations  # the server logs it with the request id (server.exchange)
        assert (index, kind) == (0, "tool_arguments_invalid") and "not valid JSON" in detail


def test_arguments_cut_by_the_length_limit_are_not_a_violation() -> None:
    ctx = ResponseContext(model="m", tool_mode="auto")
    relay([sse(call(0, '{"city": "Par', "get_weather", "u1"), finish="length")], ctx)
    assert ctx.violations == []


# -- plain answers ---------------------------------------------------------------------------------


def plain(*calls: tuple[str, str]) -> bytes:
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return json.dumps(
        {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    ).encode()


def test_plain_answer_keeps_one_call_under_parallel_false_and_reports_bad_arguments() -> None:
    ctx = ResponseContext(model="m", tool_mode="auto", one_tool_call=True)
    body = plain_answer("chat", 200, plain(("get_weather", '{"city": "Paris"}'), ("get_time", "{}")), ctx)
    assert [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
    assert ctx.repairs == {"parallel_calls_dropped"} and ctx.violations == []
    ctx = ResponseContext(model="m", tool_mode="auto")
    body = plain_answer("chat", 200, plain(("get_weather", '{"city": ')), ctx)
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": '
    assert [kind for _, kind, _ in ctx.violations] == ["tool_arguments_invalid"]


# -- the decision on an answer ---------------------------------------------------------------------


def test_plain_verdict() -> None:
    ctx = ResponseContext(model="m", tool_mode="required")
    assert plain_verdict("", 200, plain(("get_weather", "{}")), ctx) == "met"
    assert plain_verdict("get_time", 200, plain(("get_weather", "{}")), ctx) == "unmet"
    text = json.dumps({"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]})
    assert plain_verdict("", 200, text.encode(), ctx) == "unmet"
    assert plain_verdict("", 500, b"{}", ctx) == "pass"
    assert ctx.repairs == set()  # judged on a copy: nothing counted twice


def test_stream_verdict_comes_as_soon_as_the_call_begins_at_every_split_point() -> None:
    raw = ALL_AT_ZERO
    first_call_ends = raw.index(b"\n\n") + 2  # the first event holds the first call's name
    for pieces in every_split(raw):
        watch = ChoiceWatch("", ResponseContext(model="m", tool_mode="required"), sse=True, max_event=1 << 20)
        verdicts = [watch.feed(p) for p in pieces]
        fed = 0
        for piece, verdict in zip(pieces, verdicts, strict=True):
            fed += len(piece)
            assert (verdict == "met") == (fed >= first_call_ends), (pieces, verdicts)
    watch = ChoiceWatch("get_time", ResponseContext(model="m", tool_mode="named"), sse=True, max_event=1 << 20)
    assert watch.feed(NO_IDS[: NO_IDS.index(b"\n\n") + 2]) is None  # another function: not yet
    assert watch.feed(NO_IDS[NO_IDS.index(b"\n\n") + 2 :]) == "met"
    watch = ChoiceWatch("", ResponseContext(model="m", tool_mode="required"), sse=True, max_event=1 << 20)
    text = sse({"content": "no call"}, finish="stop")
    assert [watch.feed(p) for p in every_split(text)[5]] == [None, None]
    assert watch.end() == "unmet"  # decided when the body ends


UNPARSED = (
    Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "llamacpp-server"
    / "ls.chat_tools_auto_unparsed_stream.body"
).read_bytes()  # fmt: skip


@pytest.mark.parametrize("phrase", [get_profile("llamacpp").tool_choice.unparsed, None, "another phrase"])
def test_stream_ending_in_the_backends_refused_parse_is_unmet_at_every_split_point(phrase: str | None) -> None:
    """The recorded L-32 stream (text, then the error event of a call that did not parse): with the
    profile's phrase it is an answer without the call; with none, or another, the client's error."""
    want = "unmet" if phrase == get_profile("llamacpp").tool_choice.unparsed else "pass"
    error_at = UNPARSED.index(b'data: {"error"')
    for pieces in every_split(UNPARSED):
        ctx = ResponseContext(model="m", tool_mode="named")
        watch = ChoiceWatch("get_weather", ctx, sse=True, max_event=1 << 20, unparsed=phrase)
        fed, verdict = 0, None
        for piece in pieces:
            verdict = watch.feed(piece)
            fed += len(piece)
            if verdict is not None:
                break
        assert fed > error_at, pieces  # not decided before the error
        assert (verdict or watch.end()) == want, pieces


# -- a named choice the backend did not enforce: only calls of that function reach the client ---------

# Another function first, then the named one; each shape the backends stream calls in
UNFORCED = {
    "ids": ALL_AT_ZERO,
    "no-ids": NO_IDS,
    # the named call's name comes after its first fragment (held until the name is known)
    "late-name": sse(
        call(0, '{"city": "Paris"}', "get_weather", "u1"),
        call(1, "{", None, "u2"),
        call(1, "", "get_time"),
        call(1, "}"),
    ),
    # the dropped call's name comes late: its fragment before the name must not leak as text
    "late-dropped-name": sse(
        call(0, '{"city": ', None, "u1"), call(0, '"Paris"}', "get_weather"), call(1, "{}", "get_time", "u2")
    ),
    "ollama": (FIXTURES / "ollama" / "chat-stream-tool-calls-unforced.sse").read_bytes(),
}
TIME_ARGS = {"ids": {}, "no-ids": {}, "late-name": {}, "late-dropped-name": {}, "ollama": {"city": "Paris"}}


def named(parallel: bool) -> ResponseContext:
    """The context the gateway plans for a named get_time choice on a backend that does not force it."""
    body = {**BASE, "tool_choice": NAMED, "parallel_tool_calls": parallel}
    return response_context("chat", prepare("chat", body, get_profile("ollama")), Settings())


@pytest.mark.parametrize("parallel", [False, True], ids=["parallel-false", "parallel-true"])
@pytest.mark.parametrize("shape", list(UNFORCED))
def test_named_choice_lets_only_calls_of_that_function_through_at_every_split_point(shape: str, parallel: bool) -> None:
    for pieces in every_split(UNFORCED[shape]):
        ctx = named(parallel)
        chunks = client_chunks(relay(pieces, ctx))
        deltas = tool_deltas(chunks)
        assert [(d["index"], d["id"], d["function"]["name"]) for d in deltas if "id" in d] == [
            (0, deltas[0]["id"], "get_time")
        ], pieces
        assert all(d["index"] == 0 and "id" not in d and "name" not in d["function"] for d in deltas[1:])
        (choice,) = accumulate_chat(chunks)["choices"]
        (only,) = choice["message"]["tool_calls"]
        assert json.loads(only["function"]["arguments"]) == TIME_ARGS[shape]
        assert (
            choice["message"]["content"] is None and choice["finish_reason"] == "stop"
        )  # as OpenAI for a named choice
        assert ctx.repairs == {"unnamed_calls_dropped"} and ctx.violations == []


def test_named_choice_keeps_every_call_of_it_numbered_without_gaps_at_every_split_point() -> None:
    raw = sse(
        call(0, "{}", "get_time", "u1"),
        call(1, '{"city": "Paris"}', "get_weather", "u2"),
        call(2, "{}", "get_time", "u3"),
    )
    for pieces in every_split(raw):
        ctx = named(True)
        deltas = tool_deltas(client_chunks(relay(pieces, ctx)))
        firsts = [d for d in deltas if "id" in d]
        assert [(d["index"], d["function"]["name"]) for d in firsts] == [(0, "get_time"), (1, "get_time")], pieces
        assert len({d["id"] for d in firsts}) == 2
        ctx = named(False)  # parallel_tool_calls false as well: the first call of it only
        deltas = tool_deltas(client_chunks(relay(pieces, ctx)))
        assert [(d["index"], d["function"]["name"]) for d in deltas if "id" in d] == [(0, "get_time")]
        assert ctx.repairs == {"unnamed_calls_dropped", "parallel_calls_dropped"}


@pytest.mark.parametrize("shape", list(UNFORCED))
def test_the_choice_watch_sees_the_named_call_the_client_gets_at_every_split_point(shape: str) -> None:
    raw = UNFORCED[shape]
    for pieces in every_split(raw):
        ctx = named(False)
        watch = ChoiceWatch("get_time", ctx, sse=True, max_event=1 << 20)
        verdicts = [watch.feed(p) for p in pieces]
        assert "met" in verdicts or watch.end() == "met", pieces
        assert ctx.repairs == set()  # judged on a copy


def test_plain_answer_under_a_named_choice_keeps_only_that_function() -> None:
    raw = (FIXTURES / "ollama" / "chat-nonstream-tool-calls-unforced.json").read_bytes()
    for parallel in (False, True):
        ctx = named(parallel)
        assert plain_verdict("get_time", 200, raw, ctx) == "met"
        (choice,) = plain_answer("chat", 200, raw, ctx)["choices"]
        (only,) = choice["message"]["tool_calls"]
        assert only["function"]["name"] == "get_time" and json.loads(only["function"]["arguments"]) == {"city": "Paris"}
        assert choice["message"]["content"] is None and choice["finish_reason"] == "stop"
        assert ctx.repairs == {"unnamed_calls_dropped"}
    ctx = named(True)  # calls of the named function only: nothing dropped, both kept
    both = plain(("get_time", "{}"), ("get_time", '{"city": "Paris"}'))
    assert len(plain_answer("chat", 200, both, ctx)["choices"][0]["message"]["tool_calls"]) == 2
    assert ctx.repairs == set()


# -- the forced call's arguments against the function's schema ----------------------------------------

CITY = ArgumentCheck(
    {"get_weather": {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]}}
)


def test_plain_verdict_checks_the_arguments_against_the_schema() -> None:
    ctx = ResponseContext(model="m", tool_mode="required")
    assert plain_verdict("", 200, plain(("get_weather", '{"city": "Paris"}')), ctx, CITY) == "met"
    assert plain_verdict("", 200, plain(("get_weather", '{"town": "Paris"}')), ctx, CITY) == "unmet"
    assert plain_verdict("get_weather", 200, plain(("get_weather", '{"city": 7}')), ctx, CITY) == "unmet"
    # one fitting call is the forced call; arguments that are not JSON are the relay's to report
    both = plain(("get_weather", "{}"), ("get_weather", '{"city": "Paris"}'))
    assert plain_verdict("", 200, both, ctx, CITY) == "met"
    assert plain_verdict("", 200, plain(("get_weather", "{")), ctx, CITY) == "met"
    assert plain_verdict("", 200, plain(("get_weather", '{"town": 1}')), ctx) == "met"  # no schema: the name


def test_stream_verdict_waits_for_the_arguments_at_every_split_point() -> None:
    good = sse(call(0, '{"city": ', "get_weather", "u1"), call(0, '"Paris"}'))
    bad = sse(call(0, '{"city": ', "get_weather", "u1"), call(0, '"Rome"}'))
    first, second = good.split(b"\n\n")[:2]
    whole = len(first) + 2 + len(second) + 1  # the end of the data line that makes them whole
    for raw, wanted in ((good, "met"), (bad, "unmet")):
        for pieces in every_split(raw):
            watch = ChoiceWatch("get_weather", ResponseContext(model="m", tool_mode="named"), sse=True,
                                max_event=1 << 20, arguments=CITY)  # fmt: skip
            fed, verdicts = 0, []
            for piece in pieces:
                fed += len(piece)
                verdicts.append((fed, watch.feed(piece)))
                if verdicts[-1][1] is not None:
                    break
            decided = [(n, v) for n, v in verdicts if v is not None]
            assert decided and decided[0][1] == wanted, (pieces, verdicts)
            assert decided[0][0] >= whole  # not before the arguments are whole
