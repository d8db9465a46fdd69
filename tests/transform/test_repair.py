"""Tests for oaishim.transform.repair (and the stream normaliser that runs it per choice).

A backend without a reasoning or tool parser sends ``<think>…</think>`` and ``<tool_call>{…}</tool_call>``
as content text; ``TextRepair`` composes the stop, special-token, reasoning and tool-call stages on it.
Each case's input is written as labelled *segments* (content, reasoning, a call, markup the repair
removes, text dropped after a stop or the end of turn): the input is exactly their concatenation, so
the expected output — which says where every character goes — accounts for the whole input and
nothing can be lost unnoticed. Every case is run whole, at every split point, one character at a
time and with random multi-point splits, through ``TextRepair`` directly and through the
``StreamNormalizer`` (one vLLM-style chunk per piece), whose output the client accumulates
(``accumulate_chat``) and the checker (``oaishim.check``) must find clean.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.transform.context import ResponseContext
from oaishim.transform.pieces import CallArgs, CallStart, Piece, Text, join_text
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan, TextRepair, plan_tool_names, repair_text
from oaishim.transform.response import normalize_completion
from oaishim.transform.special import SpecialTokens
from oaishim.wire.accumulate import accumulate_chat

CHATML = SpecialTokens.from_config(special=["<|im_start|>", "<|im_end|>"], end_of_turn=["<|im_end|>"])
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "web_search")
]


# ---------------------------------------------------------------------------------------------------
# Segments: where each character of the input goes


@dataclass(frozen=True)
class Seg:
    kind: str  # "content" | "reasoning" | "call" | "markup" (removed) | "dropped" (after a stop / end of turn)
    text: str
    name: str = ""  # calls: the name
    args: str = ""  # calls: the arguments text, as written inside the markup


def content(text: str) -> Seg:
    return Seg("content", text)


def reasoning(text: str) -> Seg:
    return Seg("reasoning", text)


def markup(text: str) -> Seg:
    return Seg("markup", text)


def dropped(text: str) -> Seg:
    return Seg("dropped", text)


def hermes(name: str, args: str, lead: str = "<tool_call>\n", trail: str = "\n</tool_call>") -> Seg:
    """A hermes call: its markup, name and arguments together make up its text exactly."""
    return Seg("call", f'{lead}{{"name": "{name}", "arguments": {args}}}{trail}', name, args)


def think(text: str) -> list[Seg]:
    """A reasoning block as Qwen3 writes it; the newlines right after each tag are framing."""
    return [markup("<think>\n"), reasoning(text), markup("</think>\n\n")]


Outcome = tuple[tuple[Any, ...], ...]


def normal(items: list[tuple[Any, ...]]) -> Outcome:
    """Ordered pieces with adjacent text of one kind (and arguments of one call) joined, empties dropped."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        if item[0] in ("content", "reasoning", "args") and not item[-1]:
            continue
        if out and item[0] in ("content", "reasoning", "args") and out[-1][:-1] == item[:-1]:
            out[-1] = (*item[:-1], out[-1][-1] + item[-1])
        else:
            out.append(item)
    return tuple(out)


def expected(segments: list[Seg]) -> Outcome:
    items: list[tuple[Any, ...]] = []
    calls = 0
    for seg in segments:
        if seg.kind in ("content", "reasoning"):
            items.append((seg.kind, seg.text))
        elif seg.kind == "call":
            items += [("call", calls, seg.name), ("args", calls, seg.args)]
            calls += 1
    return normal(items)


def outcome(pieces: list[Piece]) -> Outcome:
    """What the pieces say, ids left out (they are random): ``call_`` ids checked here instead."""
    items: list[tuple[Any, ...]] = []
    for piece in pieces:
        if isinstance(piece, Text):
            items.append((piece.kind, piece.text))
        elif isinstance(piece, CallStart):
            assert piece.id.startswith("call_") and len(piece.id) > 5
            items.append(("call", piece.index, piece.name))
        else:
            assert isinstance(piece, CallArgs)
            items.append(("args", piece.index, piece.text))
    return normal(items)


def run(chunks: list[str], plan: RepairPlan) -> tuple[Outcome, bool]:
    repair = TextRepair(plan)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += repair.feed(chunk)
        if repair.stopped:
            break  # as the stream does: the choice ends here, the rest is never fed
    pieces += repair.flush()
    assert repair.flush() == [] and repair.feed("more") == []  # once flushed, it stays finished
    return outcome(pieces), repair.stopped


def split_at(text: str, offsets: list[int]) -> list[str]:
    cuts = [0, *sorted(min(o, len(text)) for o in offsets), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


# ---------------------------------------------------------------------------------------------------
# The cases: (label, plan, segments, stopped)

TOOLS_PLAN = RepairPlan(tools=True, tool_names=plan_tool_names(TOOLS))
WEATHER = '{"city": "Paris"}'
SEARCH = '{"query": "Paris <b>weather</b> \\"now\\" </tool_call>"}'  # markup inside a string is text

CASES: list[tuple[str, RepairPlan, list[Seg], bool]] = [
    (
        "reasoning, text, then two hermes calls",
        TOOLS_PLAN,
        [
            *think("The user wants Paris. I'll check the weather and search.\n"),
            content("Let me check both.\n"),
            hermes("get_weather", WEATHER),
            markup("\n"),
            hermes("web_search", SEARCH),
            markup("\n"),
        ],
        False,
    ),
    (
        "reasoning then only a call: no content",
        TOOLS_PLAN,
        [*think("Need a tool.\n"), hermes("get_weather", WEATHER)],
        False,
    ),
    (
        "reasoning and text, tools not offered: call markup stays text",
        RepairPlan(),
        [*think("Hmm.\n"), content('Here: <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')],
        False,
    ),
    (
        "template opened <think>: starts in reasoning",
        RepairPlan(starts_in_reasoning=True, tools=True),
        [markup("\n"), reasoning("I think so.\n"), markup("</think>\n\n"), content("Done.")],
        False,
    ),
    (
        "a stop string in the content ends it before a call",
        RepairPlan(tools=True, stops=("\nObservation:",)),
        [
            *think("Plan.\n"),
            content("Answer: 42."),
            dropped('\nObservation: <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'),
        ],
        True,
    ),
    (
        "a stop string inside the reasoning",
        RepairPlan(stops=("STOP",)),
        [markup("<think>\n"), reasoning("half a thought "), dropped("STOP and more</think>\n\nAnswer")],
        True,
    ),
    (
        "include_stop_str_in_output keeps the stop string",
        RepairPlan(tools=True, stops=("END", "\n\n\n"), include_stop=True),
        [*think("x\n"), content("The answer is 42. END"), dropped(" and text the backend kept making")],
        True,
    ),
    (
        "a stop string after the calls",
        RepairPlan(tools=True, stops=("<|endoftext|>",)),
        [content("Sure."), hermes("get_weather", WEATHER, lead="<tool_call>"), dropped("<|endoftext|>junk")],
        True,
    ),
    (
        "special tokens kept whole, no cleanup; the end of turn ends the text",
        RepairPlan(special=CHATML),
        [
            *think("Short.\n"),
            content("Hi <|im_start|>x <|foo|> y <s>"),
            content("<|im_end|>"),
            dropped("<|im_start|>user\nThe backend kept going"),
        ],
        True,
    ),
    (
        "display cleanup strips the non-final special tokens, keeps other text and the end of turn",
        RepairPlan(special=CHATML, cleanup=True),
        [
            *think("Short.\n"),
            content("Hi "),
            markup("<|im_start|>"),
            content("x <|foo|> y <s> <||> a |> b <|"),
            content("<|im_end|>"),
            dropped("<|im_start|>user\nThe backend kept going"),
        ],
        True,
    ),
    (
        "display cleanup: named markup stripped from reasoning and content, never from arguments",
        RepairPlan(tools=True, special=CHATML, cleanup=True, markup=frozenset({"<|x|>"})),
        [
            markup("<think>\n"),
            reasoning("a "),
            markup("<|x|>"),
            reasoning(" b\n"),
            markup("</think>\n\n"),
            content("c "),
            markup("<|x|>"),
            content(" "),
            hermes("get_weather", '{"city": "<|x|> <|im_start|> <||>"}'),
        ],
        False,
    ),
    (
        "reasoning, text, call, end of turn, with cleanup and a stop",
        RepairPlan(tools=True, special=CHATML, cleanup=True, stops=("Observation",)),
        [
            *think("Tool time.\n"),
            content("Checking."),
            hermes("get_weather", WEATHER, lead="<tool_call>", trail="</tool_call>"),
            content("<|im_end|>"),
            dropped("<|im_start|>assistant\nObservation"),
        ],
        True,
    ),
    (
        "no end of turn: everything flows",
        RepairPlan(tools=True, special=CHATML, cleanup=True),
        [*think("a<b\n"), markup("<|im_start|>"), content("a < b |> c <<|x|>")],
        False,
    ),
]
IDS = [case[0] for case in CASES]


def text_of(segments: list[Seg]) -> str:
    return "".join(seg.text for seg in segments)


def test_segments_are_what_the_cases_say() -> None:
    """The accounting is exact: each call's text is its markup around its name and arguments."""
    for _, _, segments, stopped in CASES:
        for seg in segments:
            assert seg.text
            if seg.kind == "call":
                assert seg.text.count(f'"name": "{seg.name}"') == 1 and seg.args in seg.text
        assert any(seg.kind == "dropped" for seg in segments) == stopped


@pytest.mark.parametrize(("label", "plan", "segments", "stopped"), CASES, ids=IDS)
def test_whole_text(label: str, plan: RepairPlan, segments: list[Seg], stopped: bool) -> None:
    pieces, hit = repair_text(text_of(segments), plan)
    assert (outcome(pieces), hit) == (expected(segments), stopped)


@pytest.mark.parametrize(("label", "plan", "segments", "stopped"), CASES, ids=IDS)
def test_every_split_point(label: str, plan: RepairPlan, segments: list[Seg], stopped: bool) -> None:
    text = text_of(segments)
    want = (expected(segments), stopped)
    assert run([text], plan) == want
    for i in range(len(text) + 1):
        assert run([text[:i], text[i:]], plan) == want, i
    assert run(list(text), plan) == want


@examples(200)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 300), max_size=12))
def test_multi_point_splits(case: tuple[str, RepairPlan, list[Seg], bool], offsets: list[int]) -> None:
    _, plan, segments, stopped = case
    assert run(split_at(text_of(segments), offsets), plan) == (expected(segments), stopped)


# Generated messages: reasoning, text (with protected tokens and stray markup), calls, an end of turn.
WORDS = st.text(alphabet="ab xy.,!你好", min_size=1, max_size=12).map(str.strip).filter(bool)
ARGS = st.dictionaries(
    st.sampled_from(["city", "q", "n"]),
    st.one_of(st.integers(-99, 99), st.booleans(), st.text(alphabet='ab <>{}[]|"\\/\n', max_size=8)),
    max_size=3,
).map(json.dumps)


@st.composite
def message(draw: st.DrawFn) -> tuple[RepairPlan, list[Seg]]:
    cleanup = draw(st.booleans())
    plan = RepairPlan(tools=True, special=CHATML, cleanup=cleanup)
    segments: list[Seg] = []
    if draw(st.booleans()):
        segments += think(draw(WORDS) + "\n")
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["words", "start", "stray"]))
        if kind == "words":
            segments.append(content(draw(WORDS)))
        elif kind == "start":  # a special token that does not end the turn: the cleanup's to strip
            segments.append(markup("<|im_start|>") if cleanup else content("<|im_start|>"))
        else:  # shaped like markup but no token: the model's text, never stripped
            segments.append(content(draw(st.sampled_from(["<|tag|>", "<||>", "<|", "|>", "<||", "||>"]))))
    if segments and segments[-1].kind == "content":
        segments.append(content(" "))  # text directly before a call keeps its trailing space
    for n in range(draw(st.integers(0, 3))):
        between = draw(st.sampled_from(["", "\n", " \n\n"]))  # whitespace between calls is framing
        if n and between:
            segments.append(markup(between))
        segments.append(hermes(draw(st.sampled_from(["get_weather", "web_search"])), draw(ARGS)))
    if draw(st.booleans()):
        segments += [content("<|im_end|>"), dropped(draw(st.sampled_from(["<|im_start|>user\nmore", "x", "\n"])))]
    return plan, segments


@examples(300)
@given(message(), st.lists(st.integers(0, 400), max_size=10))
def test_generated_messages_lose_nothing(msg: tuple[RepairPlan, list[Seg]], offsets: list[int]) -> None:
    plan, segments = msg
    text = text_of(segments)
    stopped = any(seg.kind == "dropped" for seg in segments)
    want = (expected(segments), stopped)
    assert run([text], plan) == want
    assert run(split_at(text, offsets), plan) == want


def test_only_a_possible_tag_is_held() -> None:
    """Plain tokens go out at once; a partial tag, stop or special token waits only for what it needs."""
    repair = TextRepair(RepairPlan(tools=True, stops=("STOP",), special=CHATML))
    assert outcome(repair.feed("Hello wor")) == (("content", "Hello wor"),)
    assert outcome(repair.feed("ld <|im_")) == (("content", "ld "),)
    assert outcome(repair.feed("start|> ST")) == (("content", "<|im_start|> "),)
    assert outcome(repair.feed("ay <thi")) == (("content", "STay "),)
    assert outcome(repair.feed("nk>\nhm")) == (("reasoning", "hm"),)
    assert outcome(repair.flush()) == ()
    assert not repair.stopped


# ---------------------------------------------------------------------------------------------------
# Through the stream normaliser: one vLLM 0.32-style chunk per piece


def vllm_chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    return json.dumps(
        {"id": "chatcmpl-8064303935364555", "object": "chat.completion.chunk", "created": 1795986290}
        | {"model": "tiny", "choices": [choice]}
    )


def request_for(plan: RepairPlan) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if plan.tools:
        request |= {"tools": TOOLS, "tool_choice": "auto"}
    if plan.stops:
        request["stop"] = list(plan.stops)
    if plan.include_stop:
        request["include_stop_str_in_output"] = True
    return request


def split_events(raw: bytes) -> list[bytes]:
    """The pipe's bytes as one ``data: …\\n\\n`` event each."""
    return [event + b"\n\n" for event in raw.split(b"\n\n") if event]


def stream(pieces: list[str], plan: RepairPlan, finish: str | None = "stop") -> tuple[bytes, dict[str, Any]]:
    """Each piece in its own upstream chunk (then the finish, when the backend sends one, and
    [DONE]); the gateway's bytes and what the client accumulates from them."""
    ctx = ResponseContext(model="tiny", tool_mode="auto" if plan.tools else "none", repair=plan)
    pipe = StreamPipe(ctx)
    events = [vllm_chunk({"role": "assistant", "content": ""})]
    events += [vllm_chunk({"content": piece}) for piece in pieces]
    if finish is not None:
        events.append(vllm_chunk({"content": ""}, finish))
    events.append("[DONE]")
    raw = b""
    for event in events:
        raw += pipe.feed(b"data: " + event.encode() + b"\n\n")
        if pipe.close_upstream:
            break  # what the relay does: a stop at the gateway closes the upstream
    raw += pipe.flush()
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(line[6:]) for line in raw.split(b"\n\n") if line.startswith(b"data: {")]
    return raw, accumulate_chat(chunks)


def client_result(body: dict[str, Any]) -> tuple[Any, ...]:
    """(content, reasoning, calls as (name, arguments), finish_reason) of choice 0; ids checked, left out."""
    (choice,) = body["choices"]
    message = choice["message"]
    calls = message.get("tool_calls") or []
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    named = tuple((c["function"]["name"], c["function"]["arguments"]) for c in calls)
    return message["content"], message.get("reasoning_content"), named, choice["finish_reason"]


def expected_client(segments: list[Seg]) -> tuple[Any, ...]:
    items = expected(segments)
    text = "".join(i[1] for i in items if i[0] == "content")
    thought = "".join(i[1] for i in items if i[0] == "reasoning")
    calls = tuple(
        (i[2], "".join(a[2] for a in items if a[0] == "args" and a[1] == i[1])) for i in items if i[0] == "call"
    )
    # No content delta when no text came (only calls, or only reasoning: the role chunk then says
    # content null); a turn with calls under tool_choice auto finishes with tool_calls.
    return (
        text or None,
        thought or None,
        calls,
        "tool_calls" if calls else "stop",
    )


def assert_clean(raw: bytes, plan: RepairPlan) -> None:
    options = CheckOptions(
        extensions_as_notes=True,  # reasoning_content: the one extension the gateway adds on purpose
        special_tokens=plan.special.special if plan.special else frozenset(),
        eot_tokens=plan.special.end_of_turn if plan.special else frozenset(),
    )
    exchange = exchange_from_bytes(
        raw, request=request_for(plan), status=200, headers={"content-type": "text/event-stream"}
    )
    findings = [(f.rule, f.path, f.chunk, f.message) for f in check(exchange, options) if f.severity == "error"]
    assert findings == []


@pytest.mark.parametrize(("label", "plan", "segments", "stopped"), CASES, ids=IDS)
def test_stream_every_split_point(label: str, plan: RepairPlan, segments: list[Seg], stopped: bool) -> None:
    """The client's accumulated result is the expected one, and the output checks clean, for the
    text in one chunk, cut in two at every point, and one character per chunk."""
    text = text_of(segments)
    want = expected_client(segments)
    raw, body = stream([text], plan)
    assert client_result(body) == want
    assert_clean(raw, plan)
    for i in range(len(text) + 1):
        pieces = [p for p in (text[:i], text[i:]) if p]
        raw, body = stream(pieces, plan)
        assert client_result(body) == want, i
        assert_clean(raw, plan)
    raw, body = stream(list(text), plan)
    assert client_result(body) == want
    assert_clean(raw, plan)


@examples(100)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 300), max_size=12), st.booleans())
def test_stream_multi_point_splits(
    case: tuple[str, RepairPlan, list[Seg], bool], offsets: list[int], upstream_finish: bool
) -> None:
    """Also: a text the gateway ends (a stop string, an end of turn) needs no finish from upstream."""
    _, plan, segments, stopped = case
    finish = "stop" if upstream_finish or not stopped else None
    raw, body = stream([p for p in split_at(text_of(segments), offsets) if p], plan, finish)
    assert client_result(body) == expected_client(segments)
    assert_clean(raw, plan)


def test_end_of_turn_split_across_chunks_arrives_whole() -> None:
    """A cleanup regex once ate this: ``<|im_`` + ``end|>`` in two chunks reaches the client as one delta, then the finish."""
    for cleanup in (False, True):
        plan = RepairPlan(special=CHATML, cleanup=cleanup)
        raw, body = stream(["Hello", " there<|im_", "end|>"], plan)
        deltas = [
            c["choices"][0]["delta"].get("content")
            for c in (json.loads(line[6:]) for line in raw.split(b"\n\n") if line.startswith(b"data: {"))
        ]
        assert "<|im_end|>" in deltas
        assert body["choices"][0]["message"]["content"] == "Hello there<|im_end|>"
        assert body["choices"][0]["finish_reason"] == "stop"
        assert_clean(raw, plan)


def test_the_plain_body_path_agrees_with_the_stream() -> None:
    """``repair_text`` (plain bodies) and the stream give one result for every case."""
    for _, plan, segments, _ in CASES:
        pieces, _ = repair_text(text_of(segments), plan)
        _, body = stream(list(text_of(segments)), plan)
        content_, thought, calls, _ = client_result(body)
        assert (content_ or "", thought or "") == (join_text(pieces, "content"), join_text(pieces, "reasoning"))
        assert [name for name, _ in calls] == [p.name for p in pieces if isinstance(p, CallStart)]


def _piped(text: str, plan: RepairPlan) -> tuple[list[Piece], bool, set[str]]:
    """``repair_text`` as it was: the whole pipeline built, fed and flushed, whatever the text."""
    repair = TextRepair(plan)
    pieces = repair.feed(text) + repair.flush()
    return pieces, repair.stopped, set(repair.applied())


PLANS = [
    RepairPlan(),
    RepairPlan(starts_in_reasoning=True),
    RepairPlan(tools=True, tool_names=plan_tool_names(TOOLS)),
    RepairPlan(stops=("STOP",)),
    RepairPlan(special=CHATML),
    RepairPlan(cleanup=True, markup=frozenset({"<b>"})),
    RepairPlan(reasoning=False, stops=("x",)),
]


@given(
    st.lists(
        st.sampled_from(["a", " ", "\n", "<", "/", ">", "think", "STOP", "<|im_end|>", "é", "x"]), max_size=20
    ).map("".join),
    st.sampled_from(PLANS),
)
@examples(300)
def test_repair_text_gives_what_the_whole_pipeline_gives(text: str, plan: RepairPlan) -> None:
    """A text with no tag character under a plan that only splits reasoning skips building the
    pipeline; for every text and plan the pieces, the stop and the repairs it reports are the
    pipeline's own."""
    applied: set[str] = set()
    pieces, stopped = repair_text(text, plan, applied)
    assert (pieces, stopped, applied) == _piped(text, plan)


def test_the_shortcut_is_taken_only_when_nothing_could_change() -> None:
    # (the shortcut's answer is checked above; here, that both sides of its condition are reached)
    assert repair_text("plain words", RepairPlan()) == ([Text("content", "plain words")], False)
    applied: set[str] = set()
    pieces, _ = repair_text("<think>why</think>so", RepairPlan(), applied)
    assert pieces == [Text("reasoning", "why"), Text("content", "so")]
    assert applied == {"think_split"}


def legacy_chunk(text: str, finish: str | None = None) -> str:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return json.dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "tiny", "choices": [choice]})


LEGACY = "Hi <|x|>there<|im_end|>more text the backend made END"
LEGACY_CASES = [
    ("end of turn ends the text", RepairPlan(reasoning=False, special=CHATML), "Hi <|x|>there<|im_end|>"),
    (
        "a cleanup strips no text shaped like a tag",
        RepairPlan(reasoning=False, special=CHATML, cleanup=True),
        "Hi <|x|>there<|im_end|>",
    ),
    (
        "and the cleanup strips the markup it is told",
        RepairPlan(reasoning=False, special=CHATML, cleanup=True, markup=frozenset({"<|x|>"})),
        "Hi there<|im_end|>",
    ),
    ("a stop string", RepairPlan(reasoning=False, stops=("END", "x|")), "Hi <|"),
]


@pytest.mark.parametrize(("label", "plan", "want"), LEGACY_CASES, ids=[c[0] for c in LEGACY_CASES])
def test_legacy_completions_plain_agrees_with_the_stream(label: str, plan: RepairPlan, want: str) -> None:
    """``/v1/completions`` (the gateway plans no reasoning or tools there): a plain body is repaired
    as its stream is, special tokens included (the plain path used to apply only stop strings)."""
    ctx = ResponseContext(model="tiny", chat=False, repair=plan)
    plain = normalize_completion({"choices": [{"index": 0, "text": LEGACY, "finish_reason": "length"}]}, ctx)
    assert (plain["choices"][0]["text"], plain["choices"][0]["finish_reason"]) == (want, "stop")
    for cut in range(len(LEGACY) + 1):
        pipe = StreamPipe(ResponseContext(model="tiny", chat=False, repair=plan))
        events = [legacy_chunk(p) for p in (LEGACY[:cut], LEGACY[cut:]) if p] + [legacy_chunk("", "length"), "[DONE]"]
        out = split_events(b"".join(pipe.feed(b"data: " + e.encode() + b"\n\n") for e in events) + pipe.flush())
        chunks = [json.loads(b[6:]) for b in out if b.startswith(b"data: {")]
        assert "".join(c["choices"][0]["text"] for c in chunks) == want, cut
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert out[-1] == b"data: [DONE]\n\n"


def test_nothing_upstream_matters_after_a_stop_at_the_gateway() -> None:
    """Once a stop string ends every choice the relay stops reading; the cut-off event its decoder
    then flushes (or any later event) must not turn the finished answer into an error event."""
    plan = RepairPlan(stops=("END",))
    pipe = StreamPipe(ResponseContext(model="tiny", repair=plan))
    raw = pipe.feed(b"data: " + vllm_chunk({"role": "assistant", "content": ""}).encode() + b"\n\n")
    raw += pipe.feed(b"data: " + vllm_chunk({"content": "one END two"}).encode() + b"\n\ndata: ")
    assert pipe.close_upstream and pipe.ended  # the stream's end is already out
    assert pipe.feed(b'{"id":"chatcmpl-80643039') == b""  # half an event
    assert pipe.feed(b"\n\ndata: " + vllm_chunk({"content": " three"}).encode() + b"\n\n") == b""
    assert pipe.flush() == b""
    out = split_events(raw)
    assert out[-1] == b"data: [DONE]\n\n"
    (choice,) = accumulate_chat(json.loads(b[6:]) for b in out[:-1])["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("one ", "stop")


# ---------------------------------------------------------------------------------------------------
# The model's text inside a tool call is never cleaned (hypothesis found {"city": "<||>"} -> {"city": ""})

ISSUE_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "<||>"}}\n</tool_call>'
NEIGHBOURS = ["<||>", "<|x|>", "<||", "||>", "<|", "|>", "<|im_start|>", "<|im_sta", "rt|>"]
CLEANUP_PLANS = [
    RepairPlan(tools=True, special=CHATML, cleanup=True, tool_formats=formats)
    for formats in (("hermes",), ("hermes", "minimax", "llama3", "mistral"))
]


@pytest.mark.parametrize("plan", CLEANUP_PLANS)
@pytest.mark.parametrize("value", NEIGHBOURS)
def test_arguments_reach_the_client_byte_for_byte(plan: RepairPlan, value: str) -> None:
    text = ISSUE_CALL.replace("<||>", value)
    args = json.dumps({"city": value})
    want = ((("call", 0, "get_weather"), ("args", 0, args)), False)
    for i in range(len(text) + 1):
        assert run([text[:i], text[i:]], plan) == want, i
    assert run(list(text), plan) == want


def test_the_issue_input_through_the_stream() -> None:
    """What the client accumulates from the gateway's stream: the arguments as the model wrote them."""
    plan = CLEANUP_PLANS[1]
    for i in range(len(ISSUE_CALL) + 1):
        raw, body = stream([ISSUE_CALL[:i], ISSUE_CALL[i:]], plan)
        _, _, calls, _ = client_result(body)
        assert [(name, json.loads(args)) for name, args in calls] == [("get_weather", {"city": "<||>"})], i
        assert_clean(raw, plan)
