"""The Responses API rules: each broken on purpose in a real recording fires its rule and nothing else.

Every case has a control: the unmutated recording checks clean (0 errors, 0 warnings).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from _live import RESPONSES_REAL, response_events, to_response_sse

from oaishim.check import RULES, Exchange, check, exchange_from_bytes

Events = list[dict[str, Any]]
TEXT = "text.sse"
TOOL = "reasoning-summary-then-function-call.sse"  # its first response: a reasoning item, then a function call
ERROR = "error-insufficient-quota.sse"


def _rules(exchange: Exchange) -> set[str]:
    return {f.rule for f in check(exchange) if f.severity != "note"}


def _at(events: Events, kind: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == kind][nth]


def _drop(kind: str, nth: int = 0) -> Callable[[Events], Events]:
    def mutate(events: Events) -> Events:
        del events[_at(events, kind, nth)]
        return events

    return mutate


def _edit(kind: str, edit: Callable[[dict[str, Any]], Any], nth: int = 0) -> Callable[[Events], Events]:
    def mutate(events: Events) -> Events:
        edit(events[_at(events, kind, nth)])
        return events

    return mutate


def _delta_before_item(events: Events) -> Events:
    delta = events.pop(_at(events, "response.output_text.delta"))
    events.insert(_at(events, "response.output_item.added"), delta)
    return events


def _sequence_gap(events: Events) -> bytes:
    framed = to_response_sse(events)
    return framed.replace(b'"sequence_number":4,', b'"sequence_number":5,', 1)


def _swap_first_two(events: Events) -> Events:
    events[0], events[1] = events[1], events[0]
    return events


def _replace(old: Callable[[Events], str], new: Callable[[Events], str]) -> Callable[[Events], bytes]:
    """Replace one id everywhere it appears in the stream."""

    def mutate(events: Events) -> bytes:
        return to_response_sse(events).replace(old(events).encode(), new(events).encode())

    return mutate


def _message_id(events: Events) -> str:
    return str(events[_at(events, "response.output_item.added")]["item"]["id"])


def _call(events: Events) -> dict[str, Any]:
    return next(e["item"] for e in events if e["type"] == "response.output_item.added" and "call_id" in e["item"])


def _usage_early(events: Events) -> Events:
    events[0]["response"]["usage"] = copy.deepcopy(events[-1]["response"]["usage"])
    return events


def _twice(events: Events) -> bytes:
    return to_response_sse(events) + to_response_sse(copy.deepcopy(events))


def _done(events: Events) -> bytes:
    return to_response_sse(events) + b"data: [DONE]\n\n"


def _no_event_line(events: Events) -> bytes:
    return to_response_sse(events).replace(b"event: response.output_text.delta\n", b"", 1)


def _wrong_event_line(events: Events) -> bytes:
    return to_response_sse(events).replace(b"event: response.output_text.done\n", b"event: message\n", 1)


def _set_final(path: list[Any], value: Any) -> Callable[[Events], Events]:
    def mutate(events: Events) -> Events:
        node: Any = events[-1]["response"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return events

    return mutate


@dataclass
class Case:
    rule: str
    fixture: str
    mutate: Callable[[Events], Events | bytes]


CASES = [
    Case("schema", TEXT, _edit("response.output_text.delta", lambda e: e.__setitem__("logprobs", "none"))),
    Case("unknown-field", TEXT, _edit("response.output_text.delta", lambda e: e.__setitem__("token_ids", [1]))),
    Case(
        "json", TEXT, lambda e: to_response_sse(e).replace(b'data: {"type":"response.output_text.done"', b"data: {", 1)
    ),
    Case("responses.framing", TEXT, _no_event_line),
    Case("responses.framing", TEXT, _wrong_event_line),
    Case("responses.done-sentinel", TEXT, _done),
    Case("responses.sequence", TEXT, _sequence_gap),
    Case("responses.lifecycle", TEXT, _swap_first_two),
    Case("responses.terminal", TEXT, _drop("response.completed")),
    Case("responses.terminal", TEXT, lambda e: [*e, copy.deepcopy(e[-1])]),
    Case("responses.concatenated", TEXT, _twice),
    Case("responses.item-open", TEXT, _delta_before_item),
    Case("responses.item-open", TEXT, _edit("response.output_text.delta", lambda e: e.__setitem__("content_index", 1))),
    Case(
        "responses.item-open",
        TOOL,
        _edit("response.reasoning_summary_text.delta", lambda e: e.__setitem__("summary_index", 1)),
    ),
    Case(
        "responses.item-open",
        TOOL,
        _edit("response.function_call_arguments.delta", lambda e: e.__setitem__("item_id", "fc_other")),
    ),
    Case("responses.item-close", TEXT, _drop("response.output_text.done")),
    Case("responses.item-close", TEXT, _drop("response.content_part.done")),
    Case("responses.item-close", TOOL, _drop("response.reasoning_summary_part.done")),
    Case("responses.item-close", TOOL, _drop("response.output_item.done")),
    Case("responses.item-close", TOOL, _drop("response.function_call_arguments.done")),
    Case(
        "responses.output-index",
        TOOL,
        _edit("response.output_item.added", lambda e: e.__setitem__("output_index", 2), 1),
    ),
    Case(
        "responses.output-index",
        TOOL,
        _edit("response.function_call_arguments.delta", lambda e: e.__setitem__("output_index", 0)),
    ),
    Case("responses.done-text", TEXT, _edit("response.output_text.done", lambda e: e.__setitem__("text", "Hello!"))),
    Case(
        "responses.done-text",
        TOOL,
        _edit("response.function_call_arguments.done", lambda e: e.__setitem__("arguments", "{}")),
    ),
    Case(
        "responses.done-text", TOOL, _edit("response.reasoning_summary_text.done", lambda e: e.__setitem__("text", "x"))
    ),
    Case("responses.id", TEXT, _set_final(["id"], "resp_other")),
    Case("responses.id", TEXT, _edit("response.output_item.done", lambda e: e["item"].__setitem__("id", "msg_other"))),
    Case("responses.output-mismatch", TEXT, _set_final(["output", 0, "id"], "msg_other")),
    Case("responses.output-mismatch", TOOL, _set_final(["output", 1, "call_id"], "call_other")),
    Case("responses.output-mismatch", TEXT, _set_final(["output"], [])),
    Case("responses.id-prefix", TEXT, _replace(_message_id, lambda e: "item_" + _message_id(e)[4:])),
    Case("responses.id-prefix", TEXT, _replace(lambda e: str(e[0]["response"]["id"]), lambda e: "chatcmpl-1")),
    Case("responses.id-prefix", TOOL, _replace(lambda e: str(_call(e)["call_id"]), lambda e: "toolu_1")),
    Case("responses.call-id", TOOL, _replace(lambda e: str(_call(e)["call_id"]), lambda e: str(_call(e)["id"]))),
    Case("responses.usage", TEXT, _usage_early),
    Case("responses.usage", TEXT, _set_final(["usage"], None)),
    Case("responses.status", TEXT, _set_final(["status"], "in_progress")),
    Case(
        "responses.status",
        TEXT,
        _edit("response.in_progress", lambda e: e["response"].__setitem__("status", "completed")),
    ),
    Case(
        "responses.status",
        TEXT,
        _edit("response.output_item.added", lambda e: e["item"].__setitem__("status", "completed")),
    ),
    Case("responses.status", ERROR, _edit("response.failed", lambda e: e["response"].__setitem__("error", None))),
    Case("responses.error-event", ERROR, _drop("response.failed")),
]


def _exchange(fixture: str, events: Events | bytes) -> Exchange:
    raw = events if isinstance(events, bytes) else to_response_sse(events)
    return exchange_from_bytes(raw)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)])
def test_mutation_fires_exactly_its_rule(case: Case) -> None:
    assert _rules(_exchange(case.fixture, response_events(case.fixture))) == set(), "the control must be clean"
    assert _rules(_exchange(case.fixture, case.mutate(response_events(case.fixture)))) == {case.rule}


def test_every_responses_rule_has_a_case() -> None:
    assert {r for r in RULES if r.startswith("responses.")} - {c.rule for c in CASES} - BODY_RULES == set()


@pytest.mark.parametrize("path", RESPONSES_REAL, ids=lambda p: p.name)
def test_real_recordings_have_no_errors(path: Any) -> None:
    found = check(exchange_from_bytes(path.read_bytes()))
    assert [f for f in found if f.severity == "error"] == []
    multi = path.name.startswith("reasoning-summary-") and path.suffix == ".sse"
    assert {f.rule for f in found} == ({"responses.concatenated"} if multi else set())


def test_the_sequence_may_restart_only_in_a_new_response() -> None:
    raw = to_response_sse(response_events(TEXT)) + to_response_sse(response_events(TOOL))
    assert _rules(exchange_from_bytes(raw)) == {"responses.concatenated"}


def _body(fixture: str = "reasoning-summary-then-text.json") -> dict[str, Any]:
    import orjson
    from _live import RESPONSES

    body: dict[str, Any] = orjson.loads((RESPONSES / fixture).read_bytes())
    return body


def _tool_body() -> dict[str, Any]:
    body: dict[str, Any] = response_events(TOOL)[-1]["response"]
    return body


BODY_RULES = {"responses.status", "responses.usage", "responses.id-prefix", "responses.call-id"}


@pytest.mark.parametrize(
    ("rule", "make", "edit"),
    [
        ("unknown-field", _body, lambda b: b["output"][1].__setitem__("reasoning_content", "hm")),
        ("schema", _body, lambda b: b.__setitem__("created_at", "now")),
        ("responses.id-prefix", _body, lambda b: b["output"][1].__setitem__("id", "item_1")),
        ("responses.id-prefix", _body, lambda b: b["output"][0].__setitem__("id", "reasoning_1")),
        ("responses.status", _body, lambda b: b.__setitem__("incomplete_details", {"reason": "max_output_tokens"})),
        ("responses.status", _body, lambda b: b.__setitem__("status", "incomplete")),
        ("responses.status", _body, lambda b: b["output"][1].__setitem__("status", "in_progress")),
        ("responses.usage", _body, lambda b: b.__setitem__("usage", None)),
        ("responses.call-id", _tool_body, lambda b: b["output"][1].__setitem__("call_id", b["output"][1]["id"])),
        ("responses.call-id", _tool_body, lambda b: b["output"].append({**b["output"][1], "id": "fc_2"})),
        ("responses.id-prefix", _tool_body, lambda b: b["output"][1].__setitem__("id", "call_x")),
    ],
)
def test_plain_body_mutations(rule: str, make: Callable[[], dict[str, Any]], edit: Callable[[Any], Any]) -> None:
    body = make()
    assert _rules(Exchange(body=copy.deepcopy(body))) == set()
    edit(body)
    assert _rules(Exchange(body=body)) == {rule}


def test_recognised_by_path_or_request_when_the_content_does_not_say() -> None:
    raw = b'data: {"hello": "world"}\n\n'
    chat = {f.rule for f in check(exchange_from_bytes(raw))}
    assert "stream.done" in chat and not any(r.startswith("responses.") for r in chat)
    by_path = {f.rule for f in check(exchange_from_bytes(raw, path="/v1/responses"))}
    by_request = {
        f.rule for f in check(exchange_from_bytes(raw, request={"model": "m", "input": "hi", "stream": True}))
    }
    assert by_path == by_request == {"responses.framing", "responses.terminal"}


def test_recognised_by_content_without_event_lines() -> None:
    raw = to_response_sse(response_events(TEXT)).replace(b"event: ", b": ")
    found = check(exchange_from_bytes(raw))
    assert {f.rule for f in found} == {"responses.framing"}
    assert len(found) == len(response_events(TEXT))
