"""Each rule, broken on purpose in a live OpenAI stream: that rule fires, nothing unrelated does.

Every case has a control: the same exchange without the mutation checks clean (0 errors, 0
warnings), so a rule that fires on everything cannot pass.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from _live import content_chunks, live_chunks, to_sse

from oaishim.check import RULES, CheckOptions, Exchange, check, exchange_from_bytes
from oaishim.wire.accumulate import accumulate_chat

Chunks = list[dict[str, Any]]
STREAM = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
USAGE = {**STREAM, "stream_options": {"include_usage": True}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
IM_END = CheckOptions(special_tokens=frozenset({"<|im_end|>", "<|im_start|>"}), eot_tokens=frozenset({"<|im_end|>"}))


@dataclass
class Case:
    rule: str
    fixture: str
    mutate: Callable[[Chunks], Any]  # returns chunks, or raw bytes
    request: dict[str, Any] | None = None
    control_request: dict[str, Any] | None = None  # request for the control when it differs
    options: CheckOptions = field(default_factory=CheckOptions)
    headers: dict[str, str] | None = None  # response headers of the mutated exchange only
    status: int | None = None


def _set(path: list[Any], value: Any, at: int | Callable[[Chunks], int]) -> Callable[[Chunks], Chunks]:
    def mutate(chunks: Chunks) -> Chunks:
        node: Any = chunks[at(chunks) if callable(at) else at]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return chunks

    return mutate


def _del(path: list[Any], at: int) -> Callable[[Chunks], Chunks]:
    def mutate(chunks: Chunks) -> Chunks:
        node: Any = chunks[at]
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return chunks

    return mutate


def _finish_at(chunks: Chunks) -> int:
    return next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"])


def _last_text(chunks: Chunks) -> int:
    return content_chunks(chunks)[-1]


def _finish_into_last_content(chunks: Chunks) -> Chunks:
    f = _finish_at(chunks)
    chunks[_last_text(chunks)]["choices"][0]["finish_reason"] = chunks[f]["choices"][0]["finish_reason"]
    del chunks[f]
    return chunks


def _after_finish(chunks: Chunks) -> Chunks:
    extra = copy.deepcopy(chunks[_last_text(chunks)])
    chunks.insert(_finish_at(chunks) + 1, extra)
    return chunks


def _usage_early(chunks: Chunks) -> Chunks:
    usage = chunks.pop()
    chunks.insert(_finish_at(chunks), usage)
    return chunks


def _merge_first_two(chunks: Chunks) -> Chunks:
    chunks[0]["choices"].append(chunks[1]["choices"][0])
    del chunks[1]
    return chunks


def _swap_indices(chunks: Chunks) -> Chunks:
    for c in chunks:
        for ch in c["choices"]:
            ch["index"] = {1: 2, 2: 1}.get(ch["index"], ch["index"])
    return chunks


def _retag_tool_index(chunks: Chunks) -> Chunks:
    for c in chunks:
        for ch in c["choices"]:
            for call in ch["delta"].get("tool_calls") or []:
                if call["index"] == 1:
                    call["index"] = 2
    return chunks


def _second_call_id(chunks: Chunks) -> Chunks:
    calls = [
        call for c in chunks for ch in c["choices"] for call in ch["delta"].get("tool_calls") or [] if "id" in call
    ]
    calls[1]["id"] = calls[0]["id"]
    return chunks


def _continuing_with_type(chunks: Chunks) -> Chunks:
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    calls[2]["type"] = "function"
    return chunks


def _legacy_logprobs(chunks: Chunks) -> Chunks:
    i = _last_text(chunks)
    entries = chunks[i]["choices"][0]["logprobs"]["content"]
    chunks[i]["choices"][0]["logprobs"] = {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": list(range(len(entries))),
    }
    return chunks


def _extra_alternative(chunks: Chunks) -> Chunks:
    entry = chunks[_last_text(chunks)]["choices"][0]["logprobs"]["content"][0]
    entry["top_logprobs"].append({"token": entry["token"], "logprob": entry["logprob"], "bytes": entry["bytes"]})
    return chunks


def _error_event(chunks: Chunks) -> list[Any]:
    error = {"error": {"message": "upstream died", "type": "server_error", "param": None, "code": None}}
    return [*chunks[:-2], error]


def _split_tag(chunks: Chunks) -> Chunks:
    i = _last_text(chunks)
    piece = copy.deepcopy(chunks[i])
    chunks[i]["choices"][0]["delta"]["content"] += "<|im_"
    piece["choices"][0]["delta"]["content"] = "end|>"
    chunks.insert(i + 1, piece)
    return chunks


def _append_text(text: str) -> Callable[[Chunks], Chunks]:
    def mutate(chunks: Chunks) -> Chunks:
        chunks[_last_text(chunks)]["choices"][0]["delta"]["content"] += text
        return chunks

    return mutate


def _framing(chunks: Chunks) -> bytes:
    raw = to_sse(chunks)
    return raw.replace(b"data: ", b"event: message\ndata: ", 1)


def _no_tail(chunks: Chunks) -> bytes:
    return to_sse(chunks)[:-2]


def _bad_json(chunks: Chunks) -> list[Any]:
    out: list[Any] = list(chunks)
    out[_last_text(chunks)] = b'{"id": "chatcmpl-broken'
    return out


def _same(chunks: Chunks) -> Chunks:
    return chunks


def _first_text(chunks: Chunks) -> str:
    return str(chunks[content_chunks(chunks)[0]]["choices"][0]["delta"]["content"])


CASES = [
    Case("schema", "content.sse", _set(["choices", 0, "finish_reason"], "abort", _finish_at)),
    Case("json", "content.sse", _bad_json),
    Case("unknown-field", "content.sse", _set(["choices", 0, "stop_reason"], None, 3)),
    Case("stream.framing", "content.sse", _framing),
    Case("stream.framing", "content.sse", _no_tail),
    Case("stream.content-type", "content.sse", _same, headers={"content-type": "application/json"}),
    Case("stream.id", "content.sse", _set(["id"], "chatcmpl-other", 5)),
    Case("stream.created", "content.sse", _set(["created"], 1, 5)),
    Case("stream.object", "content.sse", _set(["object"], "chat.completion", 5)),
    Case("stream.choice-count", "n3-interleaved.sse", _merge_first_two),
    Case("stream.choice-index", "n3-interleaved.sse", _swap_indices),
    Case("stream.first-delta", "content.sse", _del(["choices", 0, "delta", "content"], 0)),
    Case("stream.first-delta", "content.sse", _set(["choices", 0, "delta", "content"], None, 0)),
    Case("stream.role-repeat", "content.sse", _set(["choices", 0, "delta", "role"], "assistant", 4)),
    Case("stream.finish-once", "content.sse", _set(["choices", 0, "finish_reason"], None, _finish_at)),
    Case("stream.finish-delta", "content.sse", _finish_into_last_content),
    Case("stream.after-finish", "content.sse", _after_finish),
    Case("stream.usage", "content.sse", _same, request=STREAM, control_request=USAGE),
    Case("stream.usage", "content.sse", lambda c: c[:-1], request=USAGE),
    Case("stream.usage", "content.sse", _usage_early),
    Case("stream.done", "content.sse", lambda c: to_sse(c, done=False)),
    Case(
        "stream.tool-call-delta",
        "tool-call-a.sse",
        _del(["choices", 0, "delta", "tool_calls", 0, "function", "arguments"], 0),
    ),
    Case("stream.tool-call-delta", "tool-call-a.sse", _continuing_with_type),
    Case("stream.error-event", "content.sse", _error_event),
    Case("tool-call.id", "parallel-tool-calls.sse", _second_call_id),
    Case("id.prefix", "content.sse", lambda c: [{**x, "id": "cmpl-" + x["id"]} for x in c]),
    Case("id.prefix", "tool-call-a.sse", _set(["choices", 0, "delta", "tool_calls", 0, "id"], "chatcmpl-tool-1", 0)),
    Case("tool-call.index", "parallel-tool-calls.sse", _retag_tool_index),
    Case("message.tool-calls-empty", "content.sse", _set(["choices", 0, "delta", "tool_calls"], [], 3)),
    Case("message.content-null", "tool-call-a.sse", _set(["choices", 0, "delta", "content"], "", 0)),
    Case(
        "message.finish-reason",
        "tool-call-a.sse",
        _set(["choices", 0, "finish_reason"], "stop", _finish_at),
        request={**USAGE, "tools": TOOLS},
    ),
    Case("logprobs.shape", "content-logprobs.sse", _legacy_logprobs),
    Case("logprobs.top-n", "content-logprobs.sse", _extra_alternative, request={**USAGE, "logprobs": True}),
    Case(
        "logprobs.unrequested",
        "content-logprobs.sse",
        _same,
        request=USAGE,
        control_request={**USAGE, "logprobs": True},
    ),
    Case(
        "request.max-tokens",
        "content.sse",
        _same,
        request={**USAGE, "max_tokens": 5},
        control_request={**USAGE, "max_tokens": 500},
    ),
    Case("request.n", "content.sse", _same, request={**USAGE, "n": 2}, control_request={**USAGE, "n": 1}),
    Case("request.stream", "content.sse", _same, request={**USAGE, "stream": False}, control_request=USAGE),
    Case("eot.split-token", "content.sse", _split_tag, options=IM_END),
    Case("eot.truncated", "content.sse", _append_text("<|im_"), options=IM_END),
    Case(
        "eot.stripped",
        "content.sse",
        _same,
        request={**USAGE, "skip_special_tokens": False},
        control_request=USAGE,
        options=IM_END,
    ),
]


def _exchange(case: Case, chunks_or_raw: Any, request: dict[str, Any] | None, *, mutated: bool = False) -> Exchange:
    raw = chunks_or_raw if isinstance(chunks_or_raw, bytes) else to_sse(chunks_or_raw)
    headers = case.headers if mutated else None
    return exchange_from_bytes(raw, request=request, status=case.status, headers=headers)


def _rules(exchange: Exchange, options: CheckOptions) -> set[str]:
    return {f.rule for f in check(exchange, options) if f.severity != "note"}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)])
def test_mutation_fires_exactly_its_rule(case: Case) -> None:
    control_request = case.control_request if case.control_request is not None else case.request
    control = _exchange(case, live_chunks(case.fixture), control_request)
    assert _rules(control, case.options) == set(), "the unmutated control must be clean"
    mutated = _exchange(case, case.mutate(live_chunks(case.fixture)), case.request, mutated=True)
    assert _rules(mutated, case.options) == {case.rule}


def test_stop_string_in_text() -> None:
    chunks = live_chunks("content.sse")
    word = _first_text(chunks)
    assert _rules(_exchange(Case("", "", _same), chunks, {**USAGE, "stop": [word]}), CheckOptions()) == {"request.stop"}
    kept = {**USAGE, "stop": [word], "include_stop_str_in_output": True}
    assert _rules(_exchange(Case("", "", _same), chunks, kept), CheckOptions()) == set()


def _plain(fixture: str) -> dict[str, Any]:
    """The plain body the official API would have sent: the stream accumulated, without the
    stream-only ``index`` the SDK's accumulator leaves in each tool call."""
    body = accumulate_chat(live_chunks(fixture))
    for choice in body["choices"]:
        for call in choice["message"].get("tool_calls") or []:
            del call["index"]
    return body


@pytest.mark.parametrize(
    "fixture", ["content.sse", "tool-call-a.sse", "parallel-tool-calls.sse", "refusal.sse", "content-logprobs.sse"]
)
def test_plain_bodies_rebuilt_from_live_streams_are_clean(fixture: str) -> None:
    request = {"model": "gpt-4o", "messages": []}
    if "logprobs" in fixture:
        request |= {"logprobs": True}
    assert _rules(Exchange(request, 200, body=_plain(fixture)), CheckOptions()) == set()


@pytest.mark.parametrize(
    ("rule", "fixture", "edit", "req"),
    [
        ("message.tool-calls-empty", "content.sse", lambda m: m.__setitem__("tool_calls", []), None),
        ("message.tool-calls-empty", "content.sse", lambda m: m.__setitem__("tool_calls", None), None),
        ("message.content-null", "tool-call-a.sse", lambda m: m.__setitem__("content", ""), None),
        (
            "tool-call.id",
            "parallel-tool-calls.sse",
            lambda m: m["tool_calls"][1].__setitem__("id", m["tool_calls"][0]["id"]),
            None,
        ),
        ("tool-call.id", "tool-call-a.sse", lambda m: m["tool_calls"][0].__setitem__("id", ""), None),
        ("unknown-field", "tool-call-a.sse", lambda m: m["tool_calls"][0].__setitem__("index", 0), None),
        ("unknown-field", "content.sse", lambda m: m.__setitem__("reasoning_content", "hm"), None),
        ("schema", "content.sse", lambda m: m.pop("refusal"), None),
    ],
)
def test_plain_message_mutations(rule: str, fixture: str, edit: Callable[[dict[str, Any]], Any], req: Any) -> None:
    body = _plain(fixture)
    edit(body["choices"][0]["message"])
    assert _rules(Exchange(req, 200, body=body), CheckOptions()) == {rule}


def test_finish_reason_must_match_calls_under_auto() -> None:
    body = _plain("tool-call-a.sse")
    body["choices"][0]["finish_reason"] = "stop"
    auto = {"model": "m", "messages": [], "tools": TOOLS}
    named = {**auto, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert _rules(Exchange(auto, 200, body=body), CheckOptions()) == {"message.finish-reason"}
    assert _rules(Exchange(named, 200, body=body), CheckOptions()) == set()
    plain = _plain("content.sse")
    plain["choices"][0]["finish_reason"] = "tool_calls"
    assert _rules(Exchange(None, 200, body=plain), CheckOptions()) == {"message.finish-reason"}


OFFICIAL_ERROR = {"error": {"message": "bad", "type": "invalid_request_error", "param": "messages", "code": None}}


@pytest.mark.parametrize(
    ("rule", "body", "status"),
    [
        ("error.shape", {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}, 400),
        ("error.shape", {"error": {"message": "bad", "type": "invalid_request_error", "code": None}}, 400),
        (
            "error.shape",
            {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": 400}},
            400,
        ),
        ("error.shape", {"error": {"message": "bad", "type": "BadRequestError", "param": None, "code": None}}, 400),
        ("error.status", OFFICIAL_ERROR, 500),
        ("error.status", OFFICIAL_ERROR, 200),
        ("error.status", {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}, 400),
    ],
)
def test_error_rules(rule: str, body: dict[str, Any], status: int) -> None:
    assert _rules(Exchange(None, 400, body=OFFICIAL_ERROR), CheckOptions()) == set()
    assert _rules(Exchange(None, status, body=body), CheckOptions()) == {rule}


def test_every_rule_has_a_test() -> None:
    tested = {c.rule for c in CASES} | {"request.stop", "error.shape", "error.status"}
    responses = {rule for rule in RULES if rule.startswith("responses.")}  # their cases: test_responses.py
    assert set(RULES) - tested - responses == set()


def test_vendor_extensions_can_be_lowered_to_notes() -> None:
    chunks = _set(["choices", 0, "delta", "reasoning_content"], "hmm", 3)(live_chunks("content.sse"))
    exchange = _exchange(Case("", "", _same), chunks, None)
    strict = check(exchange)
    assert [(f.rule, f.severity) for f in strict] == [("unknown-field", "error")]
    lenient = check(exchange, CheckOptions(extensions_as_notes=True))
    assert [(f.rule, f.severity) for f in lenient] == [("unknown-field", "note")]
