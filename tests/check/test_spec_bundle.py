"""The schema bundle: up to date with the official spec, and fixed up where the spec is wrong."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from oaishim.check import specgen
from oaishim.check._findings import Sink
from oaishim.check._schema import defs, root_name, unknown_keys, validate

# The official openapi.yaml, vendored in spec/ (spec/SOURCE.md). OAISHIM_OPENAPI_SPEC points at another
# copy, e.g. a newer upstream one before it is vendored; the test never skips: a missing spec fails it.
SPEC_ENV = "OAISHIM_OPENAPI_SPEC"
VENDORED = Path(__file__).resolve().parents[2] / "spec" / "openapi.yaml"


@pytest.fixture(scope="module")
def spec() -> tuple[dict[str, Any], bytes]:
    path = Path(os.environ.get(SPEC_ENV) or VENDORED)
    if not path.is_file():
        pytest.fail(f"the official spec is missing: {path} (see spec/SOURCE.md)")
    raw = path.read_bytes()
    return yaml.load(raw, Loader=yaml.CSafeLoader), raw


def test_bundle_matches_a_fresh_build_from_the_spec(spec: tuple[dict[str, Any], bytes]) -> None:
    assert specgen.render(specgen.build(*spec)) == specgen.BUNDLE_PATH.read_bytes()


def test_request_bundle_matches_a_fresh_build_from_the_spec(spec: tuple[dict[str, Any], bytes]) -> None:
    assert specgen.render(specgen.build_requests(*spec)) == specgen.REQUEST_BUNDLE_PATH.read_bytes()


def test_nullable_becomes_a_null_union() -> None:
    node = specgen._clean({"type": "string", "enum": ["a"], "nullable": True, "description": "x"})
    assert node == {"type": ["string", "null"], "enum": ["a", None]}
    wrapped = specgen._clean({"$ref": "#/components/schemas/X", "nullable": True})
    assert wrapped == {"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]}


def test_property_names_that_look_like_keywords_survive_cleaning() -> None:
    node = specgen._clean({"type": "object", "properties": {"description": {"type": "string", "description": "d"}}})
    assert node == {"type": "object", "properties": {"description": {"type": "string"}}}


def _errors(kind: str, instance: object) -> list[str]:
    sink = Sink()
    validate(kind, instance, sink)
    return [f.path for f in sink.findings]


CHUNK = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}


def test_legacy_chunks_may_carry_a_null_finish_reason_but_plain_bodies_may_not() -> None:
    body = {**CHUNK, "choices": [{"index": 0, "text": "a", "logprobs": None, "finish_reason": None}]}
    assert _errors("text_completion.chunk", body) == []
    assert set(_errors("text_completion", body)) == {"$.choices[0].finish_reason"}


def test_echoed_legacy_logprobs_may_start_with_null() -> None:
    logprobs = {
        "tokens": ["a", "b"],
        "token_logprobs": [None, -1.0],
        "top_logprobs": [None, {"b": -1.0}],
        "text_offset": [0, 1],
    }
    body = {**CHUNK, "choices": [{"index": 0, "text": "ab", "logprobs": logprobs, "finish_reason": "stop"}]}
    assert _errors("text_completion", body) == []


def test_unknown_keys_follow_the_matching_union_branch() -> None:
    # A function tool call may not borrow the custom tool call's "custom" key.
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}, "custom": {}}]
    found = list(unknown_keys([{"$ref": "#/$defs/ChatCompletionMessageToolCalls"}], calls, "$"))
    assert found == [("$[0]", "custom")]


def test_unknown_keys_at_every_depth_carry_their_full_path_in_the_instance_order() -> None:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "timings": {},
        "choices": [
            {"index": 0, "delta": {"content": "a", "stray": 1}, "finish_reason": None},
            {
                "index": 1,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "type": "function", "function": {"name": "f", "deep": True}},
                        {"index": 1, "function": {"arguments": "{}"}, "custom": {}},
                    ]
                },
                "finish_reason": None,
            },
        ],
    }
    root = [{"$ref": "#/$defs/" + root_name("chat.completion.chunk")}]
    want = [
        ("$", "timings"),
        ("$.choices[0].delta", "stray"),
        ("$.choices[1].delta.tool_calls[0].function", "deep"),
        ("$.choices[1].delta.tool_calls[1]", "custom"),
    ]
    assert unknown_keys(root, chunk, "$") == want
    # a second walk of the same shapes goes through the memo and finds the same keys, on another base
    assert unknown_keys(root, chunk, "$.x") == [("$.x" + path[1:], key) for path, key in want]
    assert unknown_keys(root, "not an object", "$") == []


def test_open_maps_allow_any_key() -> None:
    assert "Metadata" in defs()
    assert list(unknown_keys([{"$ref": "#/$defs/Metadata"}], {"anything": "x"}, "$")) == []


def test_recursive_refs_become_plain_refs_to_their_own_schema() -> None:
    node = {"$recursiveAnchor": True, "type": "object", "properties": {"f": {"items": {"$recursiveRef": "#"}}}}
    assert specgen._recursive_refs(node, "Filter") == {
        "type": "object",
        "properties": {"f": {"items": {"$ref": "#/$defs/Filter"}}},
    }


def test_each_responses_event_type_has_its_own_schema_in_the_bundle() -> None:
    from oaishim.check._schema import event_root

    assert event_root("response.output_text.delta") == "ResponseTextDeltaEvent"
    assert event_root("response.completed") == "ResponseCompletedEvent"
    assert event_root("response.made_up") is None
