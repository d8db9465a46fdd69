"""No request body makes the gateway fail: deep nesting, numbers and strings at JSON's edges, odd shapes.

Each body goes to the gateway app (in process, see _fake.py) as raw bytes (json.dumps would refuse or
rewrite several of them). Every answer is an official 400 (or, for what the official API accepts, a
relayed 200), never a 500 or a plain-text page.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _fake import call
from _servers import Canned, Replayer
from test_http import VLLM, official_error

from oaishim.transform.validate import MAX_DEPTH

IN_PROCESS = True  # the gateway app in process, behind _fake.FakeUpstream (conftest)

MESSAGES = b'"messages": [{"role": "user", "content": "hi"}]'


def chat_with(field: bytes) -> bytes:
    return b'{"model": "tiny", ' + MESSAGES + b", " + field + b"}"


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


DEEP_TOOL = b'{"name": "f", "parameters": ' + b'{"a": ' * 300 + b"{}" + b"}" * 300 + b"}"
# (label, raw body, the param the 400 names)
REFUSED: list[tuple[str, bytes, str | None]] = [
    # orjson decodes 1,024 levels but encodes only 254: these used to pass and fail re-encoding (500).
    ("nested 255 levels", chat_with(b'"extra": ' + nested(254)), "extra"),
    ("nested 1,024 levels", chat_with(b'"extra": ' + nested(1023)), "extra"),
    ("nested 1,025 levels", chat_with(b'"extra": ' + nested(1024)), None),
    ("nested in a tool schema", chat_with(b'"tools": [{"type": "function", "function": ' + DEEP_TOOL + b"}]"), "tools"),
    ("seed beyond int64", chat_with(b'"seed": 9223372036854775808'), "seed"),
    ("seed beyond uint64", chat_with(b'"seed": 184467440737095516160'), "seed"),
    ("n beyond uint64", chat_with(b'"n": 18446744073709551616'), "n"),
    ("lone surrogate", chat_with(b'"user": "\\ud800"'), None),
    ("NaN", chat_with(b'"temperature": NaN'), None),
    ("Infinity", chat_with(b'"temperature": Infinity'), None),
    ("number beyond double", chat_with(b'"temperature": 1e400'), None),
    ("top-level array", b'[{"model": "tiny"}]', "model"),
    ("top-level string", b'"tiny"', "model"),
    ("top-level number", b"12", "model"),
    ("top-level null", b"null", "model"),
]


@pytest.mark.parametrize(("label", "raw", "param"), REFUSED, ids=[r[0] for r in REFUSED])
def test_odd_bodies_are_400(backend: Replayer, gateways: Any, label: str, raw: bytes, param: str | None) -> None:
    url = gateways("vllm@0.32", name="tiny")
    error = official_error(*call(url + "/v1/chat/completions", "POST", raw), 400)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert backend.seen == []


def test_the_depth_limit_is_inclusive(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", name="tiny")
    # The body is level 0 and the field's array level 1: MAX_DEPTH levels below the body pass.
    deep = chat_with(b'"extra": ' + nested(MAX_DEPTH))
    error = official_error(*call(url + "/v1/chat/completions", "POST", deep), 400)
    assert (error["param"], error["code"]) == ("extra", "invalid_value")
    assert str(MAX_DEPTH) in error["message"]
    backend.push(Canned((VLLM / "s1_chat.body").read_bytes()))
    status, _, body = call(url + "/v1/chat/completions", "POST", chat_with(b'"extra": ' + nested(MAX_DEPTH - 1)))
    assert status == 200, body
    assert json.loads(backend.seen[0].body)["extra"] == json.loads(nested(MAX_DEPTH - 1))


@pytest.mark.parametrize(
    ("label", "raw"),
    [
        ("duplicate keys: the last wins", b'{"model": "tiny", "model": "tiny", ' + MESSAGES + b', "n": 1, "n": 1}'),
        ("largest int64 seed", chat_with(b'"seed": 9223372036854775807')),
        ("smallest int64 seed", chat_with(b'"seed": -9223372036854775808')),
        ("negative zero", chat_with(b'"temperature": -0.0')),
        ("huge float in a backend field", chat_with(b'"extra": 1e308')),
        ("escaped surrogate pair", chat_with(b'"user": "\\ud83d\\ude00"')),
    ],
)
def test_edge_bodies_the_official_api_accepts_go_through(
    backend: Replayer, gateways: Any, label: str, raw: bytes
) -> None:
    url = gateways("vllm@0.32", name="tiny")
    backend.push(Canned((VLLM / "s1_chat.body").read_bytes()))
    status, _, body = call(url + "/v1/chat/completions", "POST", raw)
    assert status == 200, body
    assert len(backend.seen) == 1


@pytest.mark.patches_internals
def test_a_request_is_validated_once(backend: Replayer, gateways: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway validates before it learns the profile, and the rewrite does not validate again."""
    import oaishim.transform.validate as validation

    seen: list[object] = []
    check_fields = validation.check_fields  # (every request's; the schema is not asked of a plain one)
    monkeypatch.setattr(validation, "check_fields", lambda *args: seen.append(args) or check_fields(*args))
    url = gateways("vllm@0.32", name="tiny")
    backend.push(Canned((VLLM / "s1_chat.body").read_bytes()))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    status, _, _ = call(url + "/v1/chat/completions", "POST", body)
    assert status == 200 and len(seen) == 1
