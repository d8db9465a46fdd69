"""Rules a and b judged once per shape (``check._shapes``): the memo must judge every instance as
the two rules do without it.

* every fixture body and stream event (official, recorded engines, documented backends), with the
  memo warm from all of them, gives the findings the unmemoised rules give; a stream's chunks after
  its first are not checked again, and a backend's unknown keys are reported again for each;
* property: any value of a fixture chunk changed to any JSON scalar (an enum's value, a huge
  integer, a boolean for an integer, a float for an integer) gives the findings the rules give,
  with the memo warm from the chunk; the same comparison, with a wrong list of free names, finds
  the difference (it can fail);
* a remembered shape's unknown keys are reported under the options of the check at hand; one that
  failed the schema over a value that holds no string or number (``null`` for a list) reports the
  findings of then, unvalidated, while one that failed over a value a mask could hide is validated
  again (its message names the value of the instance at hand);
* which names are free, sealed or kept, on hand-made schemas: a constraint in any branch or
  ``$ref``, a property named like a keyword, an open map judged by value, ``uniqueItems``;
* ``matches`` agrees with building the shape, and a shape keeps apart what Python's ``==`` would
  not (``True`` and ``1``, ``1.0`` and ``1``);
* the memo stays bounded.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from _switching import run_switching
from oaishim.check import _schema, _shapes, check, exchange_from_bytes
from oaishim.check._findings import Sink
from oaishim.wire.sse import SSEDecoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHUNK = _schema.root_name("chat.completion.chunk")
Found = list[tuple[str, str, str]]


def instances() -> Iterator[tuple[str, str, Any]]:
    """(where, schema name, instance) for every JSON body and event in the fixtures."""
    events = _schema._bundle()["events"]
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix not in {".json", ".sse", ".body"}:
            continue
        raw = path.read_bytes()
        texts: list[str] = []
        if path.suffix == ".sse" or raw.lstrip().startswith((b"data:", b"event:")):
            decoder = SSEDecoder()
            texts = [e.data for e in [*decoder.feed(raw), *decoder.flush()] if e.data.strip() != "[DONE]"]
        else:
            texts = [raw.decode(errors="replace")]
        for n, text in enumerate(texts):
            try:
                data = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(data, dict):
                continue
            kind = data.get("type")
            obj = data.get("object")
            if isinstance(kind, str) and kind in events:
                name = events[kind]
            elif obj == "response":
                name = _schema.root_name("response")
            elif obj in ("chat.completion", "chat.completion.chunk", "text_completion"):
                name = _schema.root_name(f"{obj}.chunk" if obj == "text_completion" and path.suffix == ".sse" else obj)
            elif isinstance(data.get("error"), dict):
                name = _schema.root_name("error")
            else:
                continue
            yield f"{path.relative_to(FIXTURES).as_posix()}#{n}", name, data


def reference(name: str, instance: Any) -> Found:
    sink = Sink()
    _schema.validate_def(name, instance, sink)
    _schema.report_unknown_def(name, instance, sink)
    return [(f.rule, f.path, f.message) for f in sink.findings]


def memoised(memo: _shapes.ShapeMemo, name: str, instance: Any) -> Found:
    sink = Sink()
    memo.validate_def(name, instance, sink)
    return [(f.rule, f.path, f.message) for f in sink.findings]


def test_every_fixture_is_judged_as_without_the_memo() -> None:
    named = list(instances())
    assert len(named) > 500
    memo = _shapes.ShapeMemo()
    expected = {where: reference(name, data) for where, name, data in named}
    for where, name, data in [*named, *named]:
        assert memoised(memo, name, data) == expected[where], where
    assert memo.hits > len(named)  # every one in the second pass but schema failures, and most chunks
    assert any(f[0] == "unknown-field" for found in expected.values() for f in found)  # (b reported again)


def test_a_stream_checks_its_first_chunk_and_skips_the_rest() -> None:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    chunks = [
        {
            **chunk,
            "choices": [{"index": 0, "delta": {"content": f"piece {i}"}, "logprobs": None, "finish_reason": None}],
        }
        for i in range(10)
    ]
    bad = copy.deepcopy(chunks[6])
    bad["choices"][0]["finish_reason"] = "done"  # not one of the enum's values: a shape of its own
    chunks[6] = bad
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    _shapes.MEMO.clear()
    found = check(exchange_from_bytes(body))
    assert [(f.rule, f.chunk) for f in found if f.rule == "schema"] == [("schema", 6)]
    assert (_shapes.MEMO.misses, _shapes.MEMO.hits) == (2, 8)


def fixture_chunks() -> list[dict[str, Any]]:
    found = [data for _, name, data in instances() if name == CHUNK]
    assert len(found) > 200
    assert any(reference(CHUNK, data) for data in found)  # (some with a backend's unknown keys)
    return found


CHUNKS = fixture_chunks()
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["stop", "length", "assistant", "tool", "function", "chat.completion", "auto", "default", ""]),
)


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, (*path, i))
    else:
        yield path


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return out


def agrees(memo: _shapes.ShapeMemo, seen: Any, variant: Any) -> bool:
    """With ``seen``'s shape remembered, the memo judges ``variant`` as the rules do."""
    memoised(memo, CHUNK, seen)
    return memoised(memo, CHUNK, variant) == reference(CHUNK, variant)


@examples(200)
@given(st.data())
def test_changed_values_are_judged_as_without_the_memo(data: st.DataObject) -> None:
    memo = _shapes.ShapeMemo()
    for _ in range(5):
        seen = data.draw(st.sampled_from(CHUNKS))
        variant = seen
        for path in data.draw(st.lists(st.sampled_from(list(leaves(seen))), min_size=1, max_size=3)):
            variant = replaced(variant, path, data.draw(SCALARS))
        assert agrees(memo, seen, variant), orjson.dumps(variant)


def test_the_check_above_catches_a_wrong_free_name() -> None:
    """``object`` is a const; a memo told it is free calls a wrong value clean, and ``agrees`` says so."""
    names = dict(_shapes._names(CHUNK))
    wrong = _shapes.ShapeMemo(names=lambda root: {**names, "object": True})
    for seen in CHUNKS[:10]:
        variant = {**seen, "object": "chat.completion"}
        assert any(f[0] == "schema" for f in reference(CHUNK, variant))
        assert agrees(_shapes.ShapeMemo(), seen, variant)
        assert not agrees(wrong, seen, variant)


def test_remembered_unknown_keys_follow_the_options_of_each_check() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    choice = {
        "index": 0,
        "delta": {"content": "a", "reasoning_content": "r"},
        "finish_reason": None,
        "stop_reason": None,
    }
    memo = _shapes.ShapeMemo()
    results = []
    for options in ({}, {"extensions_as_notes": True}, {"intended": frozenset({"reasoning_content"})}):
        for text in ("a", "b"):  # the second is a hit
            sink = Sink()
            body = {**chunk, "choices": [{**choice, "delta": {"content": text, "reasoning_content": "r"}}]}
            memo.validate_def(CHUNK, body, sink, chunk=3, **options)  # type: ignore[arg-type]
            results.append([(f.rule, f.severity, f.path, f.chunk, f.message) for f in sink.findings])
        assert results[-1] == results[-2]
    assert (memo.misses, memo.hits) == (1, 5)
    assert [len(r) for r in results] == [2] * 6
    assert [f[1] for f in results[0]] == ["error", "error"]
    assert [f[1] for f in results[2]] == ["note", "note"]
    assert [f[1] for f in results[4]] == ["note", "error"]  # reasoning_content sent on purpose, stop_reason not
    assert {f[2] for f in results[0]} == {"$.choices[0].delta.reasoning_content", "$.choices[0].stop_reason"}


def defs(**props: Any) -> dict[str, Any]:
    return {"Root": {"type": "object", "properties": props}}


def test_a_shape_that_failed_rule_a_is_judged_again_by_its_own_values() -> None:
    """``created`` is free: a string there is masked, and the schema's message names the string."""
    memo = _shapes.ShapeMemo()
    base = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": []}
    messages = []
    for when in ("yesterday", "tomorrow"):
        found = memoised(memo, CHUNK, {**base, "created": when, "stop_reason": None})
        assert [f[:2] for f in found] == [("schema", "$.created"), ("unknown-field", "$.stop_reason")]
        messages.append(found[0][2])
    assert (memo.misses, memo.hits) == (1, 1)
    assert '"yesterday"' in messages[0]
    assert '"tomorrow"' in messages[1]


def test_a_failure_over_nulls_is_reported_again_without_validating() -> None:
    """A backend that sends ``null`` for a list fails the schema on every answer the same way: the
    findings of the first are reported for the rest, each its own text and chunk number."""
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    instances = []
    for n, text in enumerate(["one", "two", "three"]):
        choice = {"index": 0, "delta": {"content": text, "tool_calls": None}, "logprobs": None, "finish_reason": None}
        instances.append({**base, "created": n, "choices": [choice], "system_fingerprint": None})
    expected = [reference(CHUNK, instance) for instance in instances]
    memo = _shapes.ShapeMemo()
    found = []
    for n, instance in enumerate(instances):
        sink = Sink()
        memo.validate_def(CHUNK, instance, sink, chunk=n)
        found.append(sink.findings)
    assert (memo.misses, memo.hits, memo.revalidated) == (1, 2, 0)  # validated once, for the first
    assert [[(f.rule, f.path, f.message) for f in each] for each in found] == expected
    assert {f[1] for f in expected[0]} == {"$.system_fingerprint", "$.choices[0].delta.tool_calls"}
    assert [{f.chunk for f in each} for each in found] == [{0}, {1}, {2}]


def test_a_failure_over_a_masked_value_is_validated_again() -> None:
    """The object a finding is about holds numbers that a mask hides, and its message names them."""
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    instances = [
        {
            **base,
            "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1, "prompt_tokens_details": None},
        }
        for n in (5, 6, 7)
    ]
    expected = [reference(CHUNK, instance) for instance in instances]
    memo = _shapes.ShapeMemo()
    assert [memoised(memo, CHUNK, instance) for instance in instances] == expected
    assert (memo.misses, memo.hits, memo.revalidated) == (1, 2, 2)
    assert all(f'"prompt_tokens":{n}' in found[0][2] for n, found in zip((5, 6, 7), expected, strict=True))


def test_fixed_values() -> None:
    assert _shapes.fixed(None) and _shapes.fixed(True) and _shapes.fixed({"a": [None, False], "b": {}})
    for value in ("", 0, 1.5, [None, "x"], {"a": {"b": 2}}, [[[0.0]]]):
        assert not _shapes.fixed(value), value


def test_free_names_on_small_schemas() -> None:
    text = {"type": "string"}
    got = _shapes.free_names(
        "Root",
        {
            "Root": {
                "type": "object",
                "properties": {
                    "id": text,
                    "role": {"type": "string", "enum": ["assistant"]},
                    "kind": {"anyOf": [text, {"type": "string", "pattern": "^a"}]},
                    "ref": {"$ref": "#/$defs/Limited"},
                    "count": {"type": "integer"},
                    "level": {"type": "integer", "maximum": 3},
                    "twice": text,
                    "inner": {"type": "object", "properties": {"twice": {"type": "string", "maxLength": 4}}},
                    "properties": {"type": "object", "properties": {"enum": text}},  # names, not keywords
                    "attributes": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 9}},
                    "tags": {"type": "array", "items": text, "uniqueItems": True},
                    "notes": {"type": "object", "additionalProperties": text},  # open, values unjudged
                },
            },
            "Limited": {"type": "string", "format": "uri"},
        },
    )
    assert got is not None
    free = sorted(n for n, v in got.items() if v)
    sealed = sorted(n for n, v in got.items() if not v)
    assert free == ["count", "enum", "id", "inner", "notes", "properties"]
    assert sealed == ["attributes", "tags"]


def test_items_as_a_list_are_walked_too() -> None:
    """Older drafts give ``items`` as a list of schemas, one a position: a name judged there is not free."""
    schemas = {
        "Root": {
            "type": "object",
            "properties": {
                "pair": {"type": "array", "items": [{"type": "object", "properties": {"kind": {"enum": ["a"]}}}]},
                "kind": {"type": "string"},
            },
        }
    }
    assert _shapes.free_names("Root", schemas) == {"pair": True}


def test_a_root_that_is_a_judged_map_masks_nothing() -> None:
    judged = {"Root": {"type": "object", "additionalProperties": {"type": "string", "enum": ["a"]}}}
    assert _shapes.free_names("Root", judged) is None
    unique = {"Root": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}
    assert _shapes.free_names("Root", unique) is None


@examples(200)
@given(st.data())
def test_matches_is_building_the_shape(data: st.DataObject) -> None:
    names = _shapes._names(CHUNK)
    one = data.draw(st.sampled_from(CHUNKS))
    two = data.draw(st.sampled_from(CHUNKS))
    for path in data.draw(st.lists(st.sampled_from(list(leaves(two))), max_size=2)):
        two = replaced(two, path, data.draw(SCALARS))
    form = _shapes.shape(one, names)
    assert _shapes.matches(one, form, names)
    assert _shapes.matches(two, form, names) == (_shapes.shape(two, names) == form)


def test_shapes_keep_apart_what_equality_would_not() -> None:
    names = {"n": True, "sealed": False}
    shape = _shapes.shape
    assert shape({"n": "a"}, names) == shape({"n": "b"}, names)
    assert shape({"n": 1}, names) == shape({"n": 2}, names)
    assert shape({"n": "1"}, names) != shape({"n": 1}, names)
    assert shape({"x": True}, names) != shape({"x": 1}, names)
    assert shape({"x": 1.0}, names) != shape({"x": 1}, names)
    assert shape({"n": True}, names) != shape({"n": 1}, names)
    assert shape({"n": 2**64}, names) != shape({"n": 2**64 + 1}, names)  # past the validator's integers
    assert shape({"x": "a"}, names) != shape({"x": "b"}, names)  # not a free name: kept
    assert shape({"sealed": {"n": "a"}}, names) != shape({"sealed": {"n": "b"}}, names)
    assert shape({"a": [1]}, names) != shape({"a": [1, 1]}, names)
    assert shape({"a": {}}, names) != shape({"a": []}, names)
    assert shape({"a": 1, "b": 2}, names) != shape({"b": 2, "a": 1}, names)  # (the walk reports in order)


def test_the_memo_is_bounded() -> None:
    memo = _shapes.ShapeMemo(limit=5)
    choice = {"index": 0, "delta": {"content": "a"}, "finish_reason": None}
    for i in range(50):  # an integral float is kept in the shape: each chunk a shape of its own
        top = {"token": "a", "logprob": -float(i), "bytes": None, "top_logprobs": []}
        chunk = {**CHUNKS[0], "choices": [{**choice, "logprobs": {"content": [top], "refusal": None}}]}
        memoised(memo, CHUNK, chunk)
        assert 0 < len(memo.recent[CHUNK]) <= 5
    assert (memo.misses, memo.hits) == (50, 0)
    memoised(memo, CHUNK, chunk)
    assert memo.hits == 1


def test_threads_sharing_the_memo_judge_alike() -> None:
    """Several threads check through one memo (the capture writer beside a probe, say), taking turns
    as often as the interpreter lets them: each gets the rules' findings, and none fails."""
    memo = _shapes.ShapeMemo(limit=3)  # fewer slots than shapes: entries move and fall out all along
    sample = CHUNKS[:40]
    expected = [reference(CHUNK, data) for data in sample]
    failures: list[str] = []

    def work(offset: int) -> None:
        for round_ in range(20):
            for n in range(len(sample)):
                k = (n * 7 + offset + round_) % len(sample)
                try:
                    if memoised(memo, CHUNK, sample[k]) != expected[k]:
                        failures.append(f"{offset}: {k} judged otherwise")
                except Exception as exc:  # (a thread's exception would not fail the test by itself)
                    failures.append(f"{offset}: {k} {exc!r}")

    run_switching([threading.Thread(target=work, args=(i,)) for i in range(4)])  # turns as often as they can
    assert failures == []
    assert memo.hits > 0
