"""Tests for oaishim.wire.errors: the error type and its constructors.

Expected statuses, types, params and codes are written by hand from openai-wire-format.md §5 (the
official shape and the SDK's status classes) and backend-quirks.md (what each backend sends), not
copied from running the code. Every mapped body must also pass the project's strict checker.
"""

from __future__ import annotations

import pickle

import orjson
import pytest

from oaishim.check import Exchange, check
from oaishim.wire.errors import (
    OpenAIError,
    bad_request,
    error_event,
    internal_error,
    not_found,
    timeout,
    too_large,
    unauthorized,
    unavailable,
    upstream_error,
)
from oaishim.wire.sse import SSEDecoder


def strict_errors(err: OpenAIError) -> list[str]:
    findings = check(Exchange(None, err.status, body=err.body()))
    return [f"{f.rule} {f.path} {f.message}" for f in findings if f.severity == "error"]


# ---------------------------------------------------------------------------------------------------
# The shape


def test_body_has_exactly_the_four_keys() -> None:
    err = OpenAIError(400, "bad", "invalid_request_error", "n", "invalid_type")
    assert err.body() == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "n", "code": "invalid_type"}
    }
    assert orjson.loads(err.to_bytes()) == err.body()


def test_param_and_code_default_to_null() -> None:
    assert OpenAIError(500, "x", "server_error").body()["error"] == {
        "message": "x",
        "type": "server_error",
        "param": None,
        "code": None,
    }


def test_behaves_as_an_exception() -> None:
    with pytest.raises(OpenAIError) as info:
        raise bad_request("Nope.", "model")
    assert str(info.value) == "Nope."
    assert info.value.args == ("Nope.",)
    assert info.value.status == 400


def test_notes_can_be_added_to_the_frozen_exception() -> None:
    # pytest and hypothesis add notes to exceptions; a frozen dataclass would refuse setattr
    err = bad_request("x")
    err.add_note("first")
    err.add_note("second")
    assert err.__notes__ == ["first", "second"]


def test_pickles() -> None:
    err = OpenAIError(404, "gone", "invalid_request_error", "model", "model_not_found")
    assert pickle.loads(pickle.dumps(err)) == err


def test_is_immutable() -> None:
    err = bad_request("x")
    with pytest.raises(AttributeError):
        err.status = 500  # type: ignore[misc]


@pytest.mark.parametrize(
    ("err", "status", "kind", "param", "code"),
    [
        (bad_request("m", "n", "invalid_type"), 400, "invalid_request_error", "n", "invalid_type"),
        (bad_request("m"), 400, "invalid_request_error", None, None),
        (not_found("m", code="model_not_found"), 404, "invalid_request_error", None, "model_not_found"),
        (unauthorized(), 401, "authentication_error", None, "invalid_api_key"),
        (too_large(1024), 413, "invalid_request_error", None, "request_too_large"),
        (upstream_error("m"), 502, "server_error", None, None),
        (upstream_error("m", status=503), 503, "server_error", None, None),
        (timeout(), 504, "server_error", None, "timeout"),
        (timeout("client too slow", status=408), 408, "timeout_error", None, "timeout"),
        (timeout("slow", code="upstream_timeout"), 504, "server_error", None, "upstream_timeout"),
        (internal_error("m"), 500, "server_error", None, None),
        (unavailable("m", code="too_many_connections"), 503, "server_error", None, "too_many_connections"),
    ],
)
def test_helpers(err: OpenAIError, status: int, kind: str, param: str | None, code: str | None) -> None:
    assert (err.status, err.type, err.param, err.code) == (status, kind, param, code)
    assert strict_errors(err) == []


def test_unauthorized_reads_like_openai() -> None:
    assert unauthorized().message.startswith("Incorrect API key provided")


def test_too_large_names_the_limit() -> None:
    assert "1024" in too_large(1024).message


def test_error_event_is_one_sse_data_event() -> None:
    err = OpenAIError(500, "boom", "server_error")
    raw = error_event(err)
    assert raw == b'data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}\n\n'
    events = SSEDecoder().feed(raw)
    assert len(events) == 1
    assert orjson.loads(events[0].data) == err.body()


def test_error_event_escapes_line_ends_in_the_message() -> None:
    raw = error_event(OpenAIError(500, "line one\nline two", "server_error"))
    assert raw.count(b"\n") == 2  # only the event's own terminator
    assert orjson.loads(SSEDecoder().feed(raw)[0].data)["error"]["message"] == "line one\nline two"
