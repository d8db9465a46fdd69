"""Malformed requests are accepted or refused with an official 400, never anything else; valid ones pass.

Bounded and seeded: the same few hundred bodies on every run, in a few seconds. Each is a valid
request with one part broken (a value replaced by another type, a deep nest, odd Unicode, a big
number, a key deleted), or random JSON. Whatever validation accepts must also go through the request
rewrite and be encodable, as the gateway encodes it for the backend: otherwise it would be a 500.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_request import ACCEPTED as REQUEST_ACCEPTED
from test_validate_schema import ACCEPTED as SCHEMA_ACCEPTED

from _props import examples
from oaishim.profiles._base import Profile
from oaishim.transform.request import prepare
from oaishim.transform.validate import _fields, validate
from oaishim.transform.validate._covered import COVERED_FIELDS, covered
from oaishim.transform.validate._limits import check_limits
from oaishim.transform.validate._schema import _validator
from oaishim.wire.errors import OpenAIError

BASE = Profile(name="test")

# Requests shaped like the official spec's examples for the three endpoints (written out here).
SPEC_LIKE: list[tuple[str, dict[str, Any]]] = [
    ("chat", {"model": "gpt-4.1", "messages": [{"role": "developer", "content": "You are a helpful assistant."},
                                              {"role": "user", "content": "Hello!"}]}),
    ("chat", {"model": "gpt-4.1", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]}], "max_tokens": 300}),
    ("chat", {"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
              "messages": [{"role": "user", "content": "Hello!"}]}),
    ("chat", {"model": "gpt-4.1", "messages": [{"role": "user", "content": "Weather in Boston?"}],
              "tools": [{"type": "function", "function": {"name": "get_current_weather", "description": "d",
                         "parameters": {"type": "object", "properties": {"location": {"type": "string"},
                                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                        "required": ["location"]}}}], "tool_choice": "auto"}),
    ("chat", {"model": "gpt-4.1", "messages": [{"role": "user", "content": "Hello!"}], "logprobs": True,
              "top_logprobs": 2}),
    ("completions", {"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test", "max_tokens": 7,
                     "temperature": 0}),
    ("completions", {"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test", "max_tokens": 7,
                     "temperature": 0, "stream": True}),
    ("embeddings", {"model": "text-embedding-ada-002", "input": "The food was delicious and the waiter...",
                    "encoding_format": "float"}),
]  # fmt: skip
VALID: list[tuple[str, dict[str, Any]]] = [
    *SPEC_LIKE,
    *[(endpoint, body) for _, endpoint, body in REQUEST_ACCEPTED],
    *[(endpoint, body) for _, endpoint, body in SCHEMA_ACCEPTED],
]

ODD_STRINGS = ["", "\ud800", "a\udfff", "\x00", "\u2028", "😀", "é", "\ufeff", " " * 3, "null", "1e999"]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**63, -(2**63) - 1, 2**64, 1e308, -0.0, 0.5, 2.0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(ODD_STRINGS)
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def nest(levels: int, as_object: bool) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": value} if as_object else [value]
    return value


odd_values = json_values | st.builds(nest, st.integers(1, 400), st.booleans())


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``node`` (the body itself excluded)."""
    found: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((*path, key))
        found += _paths(value, (*path, key))
    return found


def _parent(body: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        body = body[key]
    return body


@st.composite
def broken_requests(draw: st.DrawFn) -> tuple[str, Any]:
    endpoint, valid = draw(st.sampled_from(VALID))
    if draw(st.integers(0, 9)) == 0:
        return endpoint, draw(odd_values)  # random JSON, not even an object sometimes
    body = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 2))):
        paths = _paths(body)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(body, path)
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "delete":
            parent.pop(path[-1])
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from([*ODD_STRINGS, "type", "role", "name", "content", "x"]))] = draw(odd_values)
        else:
            parent[path[-1]] = draw(odd_values)
    return endpoint, body


def assert_official_400(err: OpenAIError) -> None:
    assert (err.status, err.type) == (400, "invalid_request_error")
    body = orjson.loads(orjson.dumps(err.body()))  # encodable, whatever the request held
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(err.message, str) and err.message
    assert err.param is None or isinstance(err.param, str)
    assert err.code is None or isinstance(err.code, str)


@settings(examples(400), suppress_health_check=[HealthCheck.too_slow])
@given(broken_requests())
def test_broken_requests_are_accepted_or_refused_with_an_official_400(case: tuple[str, Any]) -> None:
    endpoint, body = case
    try:
        validate(endpoint, body)  # type: ignore[arg-type]
    except OpenAIError as err:
        assert_official_400(err)
        return
    # Accepted: the gateway must be able to rewrite it and encode it for the backend.
    try:
        prepared = prepare(endpoint, body, BASE)  # type: ignore[arg-type]
    except OpenAIError as err:
        assert_official_400(err)
        return
    orjson.dumps(prepared.body)


@pytest.mark.parametrize(("endpoint", "body"), VALID, ids=[f"{e}-{i}" for i, (e, _) in enumerate(VALID)])
def test_valid_requests_are_accepted(endpoint: str, body: dict[str, Any]) -> None:
    assert validate(endpoint, body) is body  # type: ignore[arg-type]


safe_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@examples(200)
@given(st.sampled_from(VALID), st.dictionaries(st.text(max_size=8).map(lambda k: "x_" + k), safe_values, max_size=3))
def test_valid_requests_with_backend_fields_are_accepted(
    case: tuple[str, dict[str, Any]], extra: dict[str, Any]
) -> None:
    endpoint, body = case
    body = {**body, **extra}
    assert validate(endpoint, body) is body  # type: ignore[arg-type]


# -- the documented scalars, looked at from the body's side ------------------------------------------

_ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-300, 300),
    st.floats(-5, 300, allow_nan=False),
    st.text(max_size=2),
    st.just({}),
    st.just([]),
)


def _first_refusal(endpoint: Any, body: dict[str, Any]) -> str | None:
    """The message of the first documented field, in the table's order, that ``_check_field`` refuses."""
    for spec in _fields._FIELDS_OF[endpoint]:
        value = body.get(spec.name)
        if value is not None:
            try:
                _fields._check_field(spec, value)
            except OpenAIError as error:
                return error.message
    return None


@given(
    st.sampled_from(["chat", "completions", "embeddings"]),
    st.dictionaries(st.sampled_from([f.name for f in _fields._FIELDS] + ["vendor_x", "model"]), _ODD_SCALARS),
)
@examples(400)
def test_the_documented_fields_report_the_first_refusal_in_the_tables_order(
    endpoint: Any, body: dict[str, Any]
) -> None:
    """``_check_known`` looks up the body's own keys; what it refuses, and with which message, is what a
    pass over every documented field in order refuses first, whatever order the body's keys come in."""
    expected = _first_refusal(endpoint, body)
    for keys in (list(body), list(reversed(body))):
        try:
            _fields._check_known(endpoint, {k: body[k] for k in keys})
        except OpenAIError as error:
            assert error.message == expected
        else:
            assert expected is None


def test_a_field_is_documented_once_per_endpoint() -> None:
    for endpoint, specs in _fields._FIELDS_OF.items():
        assert len(_fields._NAMED[endpoint]) == len(specs)


# -- the plain chat requests the hand checks cover, which skip the schema ------------------------------

_INTERESTING: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    5,
    20,
    21,
    128,
    129,
    -2,
    -3,
    0.0,
    0.5,
    1.0,
    1.5,
    2.0,
    2.5,
    -2.0,
    -2.5,
    1e3,
    2**63 - 1,
    -(2**63),
    1e19,
    -1e19,
    2**64 - 1,
    "",
    "x",
    "gpt-4o",
    [],
    {},
    [1],
    {"a": 1},
]
_ROLES = [*_fields.ROLES, "robot", "", None, 1]
_CHAT_BASE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _hand_checks_pass(body: dict[str, Any]) -> bool:
    try:
        check_limits(body)
        _fields.check_fields("chat", body)
    except OpenAIError:
        return False
    return True


@pytest.mark.parametrize("key", sorted(COVERED_FIELDS - {"messages"}))
def test_each_value_of_a_covered_field_the_hand_checks_pass_the_schema_passes(key: str) -> None:
    passed = 0
    for value in _INTERESTING:
        body = {**_CHAT_BASE, key: value}
        if covered("chat", body) and _hand_checks_pass(body):
            passed += 1
            assert _validator("chat").is_valid(body), (key, value)
    assert passed  # (every field has values that get this far)


@given(
    st.sampled_from(["m", "", 1, None, "gpt-4o"]),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(_ROLES), "content": st.text(max_size=3) | st.sampled_from(_INTERESTING)}
        ),
        max_size=3,
    ),
    st.dictionaries(st.sampled_from(sorted(COVERED_FIELDS - {"model", "messages"})), st.sampled_from(_INTERESTING)),
)
@examples(1500)
def test_a_covered_body_the_hand_checks_pass_the_schema_passes(
    model: Any, messages: list[dict[str, Any]], scalars: dict[str, Any]
) -> None:
    body = {"model": model, "messages": messages, **scalars}
    if covered("chat", body) and _hand_checks_pass(body):
        assert _validator("chat").is_valid(body)


@pytest.mark.parametrize(
    "body",
    [
        {**_CHAT_BASE, "stop": "x"},  # another field
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},  # parts
        {"model": "m", "messages": [{"role": "user", "content": "hi", "name": "a"}]},  # a name
        {"model": "m", "messages": [{"role": "tool", "content": "hi"}]},  # a role with more to it
        {"model": "m", "messages": [{"role": "assistant", "content": None}]},
    ],
)
def test_anything_else_is_asked_of_the_schema(body: dict[str, Any]) -> None:
    assert not covered("chat", body)


def test_only_chat_is_covered() -> None:
    assert covered("chat", _CHAT_BASE)
    assert not covered("completions", {"model": "m", "prompt": "hi"})
