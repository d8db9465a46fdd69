"""The unknown-key walk's memo (``check._schema._plan``): a node is expanded once per schema and
shape, so it must judge every instance as the walk without it does.

* every fixture body and stream event (official, recorded engines, documented backends), judged
  with the memo cleared before each one and then again with it warm, gives the same findings;
* two objects with the same keys that differ only in a discriminating value (a tool call's
  ``type``) are judged by their own union branch, in any order;
* the memo stays bounded: past its size it starts again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from oaishim.check import _schema, check, exchange_from_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def bodies() -> Iterator[tuple[str, bytes]]:
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix in {".json", ".sse", ".body"} and path.is_file():
            yield path.relative_to(FIXTURES).as_posix(), path.read_bytes()


def findings(body: bytes) -> list[tuple[str, str, int | None]]:
    try:
        found = check(exchange_from_bytes(body))
    except (TypeError, ValueError):
        return []
    return [(f.rule, f.path, f.chunk) for f in found if f.rule == "unknown-field"]


def test_every_fixture_is_judged_alike_cold_and_warm() -> None:
    named = list(bodies())
    assert len(named) > 100
    cold: dict[str, list[tuple[str, str, int | None]]] = {}
    for name, body in named:
        _schema.clear_plans()
        cold[name] = findings(body)
    for name, body in [*named, *named]:  # warm: plans left by every other body
        assert findings(body) == cold[name], name
    assert any(cold.values())  # some fixture has unknown keys (a backend's extensions): the walk ran


def chat_with(call: dict[str, Any]) -> bytes:
    message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
    choice = {"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": message}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return orjson.dumps({**body, "usage": usage})


@pytest.mark.parametrize("first", ["function", "custom"])
def test_same_keys_different_discriminator_take_their_own_branch(first: str) -> None:
    """The keys are the same; ``type`` alone says whether ``custom`` is a field of this call."""
    custom = {"name": "grep", "input": "x"}
    calls = {kind: {"id": "call_1", "type": kind, "custom": custom} for kind in ("function", "custom")}
    second = "custom" if first == "function" else "function"
    _schema.clear_plans()
    expected = {"function": [("unknown-field", "$.choices[0].message.tool_calls[0].custom", None)], "custom": []}
    for kind in (first, second, first):
        assert findings(chat_with(calls[kind])) == expected[kind], kind


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_schema, "_MAX_PLANS", 50)
    _schema.clear_plans()
    for i in range(200):  # metadata is an open map: each set of keys is a shape of its own
        body = orjson.loads(chat_with({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}))
        body["metadata"] = {f"k{i}": "v"}
        findings(orjson.dumps(body))
        assert 0 < _schema.plans_held() <= 50
