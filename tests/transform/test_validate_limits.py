"""Bodies built in Python that JSON, or the backend, cannot carry are refused with 400 before anything else.

orjson refuses to encode them (nesting past 254 levels, integers past 64 bits, lone surrogates) or
writes something else (NaN becomes null), so before this check such a body either failed when the
gateway re-encoded it or reached the backend changed. Bodies over HTTP are covered in
tests/server/test_odd_bodies.py.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from oaishim.transform.validate import MAX_DEPTH, validate
from oaishim.wire.errors import OpenAIError

USER = {"role": "user", "content": "Hi"}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


def deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def refused(body: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        validate("chat", body)
    err = info.value
    assert (err.status, err.type) == (400, "invalid_request_error")
    orjson.dumps(err.body())  # the error itself can always be sent
    return err


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    # (label, body, param, code)
    ("nested past the limit", chat(extra=deep(MAX_DEPTH)), "extra", "invalid_value"),
    ("nested past orjson's encoder", chat(extra=deep(300)), "extra", "invalid_value"),
    (
        "deep inside a message",
        {"model": "m", "messages": [{**USER, "x": deep(MAX_DEPTH)}]},
        "messages",
        "invalid_value",
    ),
    ("int64 max + 1", chat(seed=2**63), "seed", "integer_above_max_value"),
    ("int64 min - 1", chat(seed=-(2**63) - 1), "seed", "integer_below_min_value"),
    ("beyond 64 bits in a backend field", chat(extra={"a": [2**64]}), "extra.a[0]", "integer_above_max_value"),
    ("huge negative in logit_bias", chat(logit_bias={"1": -(2**80)}), "logit_bias.1", "integer_below_min_value"),
    ("NaN", chat(temperature=float("nan")), "temperature", "invalid_value"),
    ("infinity in a backend field", chat(extra=[1.0, float("-inf")]), "extra[1]", "invalid_value"),
    (
        "lone surrogate in content",
        {"model": "m", "messages": [{**USER, "content": "a\ud800"}]},
        "messages[0].content",
        "invalid_value",
    ),
    ("lone surrogate in a key", chat(extra={"\udc00": 1}), "extra.\\udc00", "invalid_value"),
    ("a key that is not a string", chat(extra={1: "x"}), "extra", "invalid_type"),
    ("a value that is not JSON", chat(extra=[{"a": {1, 2}}]), "extra[0].a", "invalid_type"),
]


@pytest.mark.parametrize(("label", "body", "param", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(label: str, body: dict[str, Any], param: str, code: str) -> None:
    err = refused(body)
    assert (err.param, err.code) == (param, code)


def test_depth_wording() -> None:
    assert refused(chat(extra=deep(MAX_DEPTH))).message == (
        f"Invalid 'extra': too deeply nested. Expected at most {MAX_DEPTH} levels of nested arrays and objects "
        "in the request body."
    )


def test_int64_wording() -> None:
    assert refused(chat(seed=2**63)).message == (
        "Invalid 'seed': integer above maximum value. Expected a value <= 9223372036854775807, "
        "but got 9223372036854775808 instead."
    )


@pytest.mark.parametrize(
    "body",
    [
        chat(extra=deep(MAX_DEPTH - 1)),
        chat(seed=2**63 - 1),
        chat(seed=-(2**63)),
        chat(extra=1e308, temperature=-0.0),
        {"model": "m", "messages": [{"role": "user", "content": "é 😀 \u2028 \x00"}]},
    ],
    ids=["deepest allowed", "int64 max", "int64 min", "big and negative-zero floats", "non-ASCII"],
)
def test_accepted_and_encodable(body: dict[str, Any]) -> None:
    assert validate("chat", body) is body
    orjson.dumps(body)


@pytest.mark.parametrize("text", ['"a\\ud800"', '"\\udfff b"', '{"\\udc00": 1}', '["\\ud83d"]'])
def test_orjson_refuses_a_lone_surrogate(text: str) -> None:
    """What lets the gateway skip the surrogate search (``validate(..., from_json=True)``): a body
    it parsed cannot hold one. A pair is still a character."""
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    assert orjson.loads('"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize(("label", "body", "param", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_from_json_but_for_surrogates(label: str, body: dict[str, Any], param: str, code: str) -> None:
    """With ``from_json`` every other limit holds; a lone surrogate (which orjson never gives) passes."""
    if "surrogate" in label:
        assert validate("chat", body, from_json=True) is body
        return
    with pytest.raises(OpenAIError) as err:
        validate("chat", body, from_json=True)
    assert (err.value.param, err.value.code) == (param, code)
