"""Tests for oaishim.transform.upstream_errors: every backend's error bodies in the official shape.

Expected statuses, types, params and codes are written by hand from openai-wire-format.md §5 (the
official shape and the SDK's status classes) and backend-quirks.md (what each backend sends), not
copied from running the code. Every mapped body must also pass the project's strict checker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.check import Exchange, check
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.wire.errors import OpenAIError

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMACPP = RECORDED / "llamacpp-server"


def recorded_status(body_path: Path) -> int:
    """The status line of the recording (``HTTP/1.1 404 Not Found``), where one was saved."""
    return int(body_path.with_suffix(".headers").read_text().split()[1])


def strict_errors(err: OpenAIError) -> list[str]:
    findings = check(Exchange(None, err.status, body=err.body()))
    return [f"{f.rule} {f.path} {f.message}" for f in findings if f.severity == "error"]


# ---------------------------------------------------------------------------------------------------
# Recorded backend bodies (real servers: tests/fixtures/recorded/*/README.md)

# name -> (status, type, param, code) the client must see
VLLM_CASES: dict[str, tuple[int, str, str | None, str | None]] = {
    # "Stream options can only be defined when `stream=True`." with param stream_options
    "s1_chat_nostream_streamopts": (400, "invalid_request_error", "stream_options", None),
    "s3_chat_nostream_streamopts": (400, "invalid_request_error", "stream_options", None),
    # 403 PermissionDeniedError -> permission_error
    "s1_chat_render": (403, "permission_error", None, None),
    "s3_chat_render": (403, "permission_error", None, None),
    # "auto" tool choice needs server flags: the request's problem at this server, 400
    "s1_tools_auto": (400, "invalid_request_error", None, None),
    "s1_tools_named": (400, "invalid_request_error", None, None),
    "s1_tools_named_stream": (400, "invalid_request_error", None, None),
    "s1_tools_required": (400, "invalid_request_error", None, None),
    "s1_force_regex_toolcall": (400, "invalid_request_error", None, None),
    "s1_force_regex_toolcall_stream": (400, "invalid_request_error", None, None),
    # unknown model: OpenAI's 404 invalid_request_error / model_not_found; vLLM names param "model"
    "s1_invalid_bad_model": (404, "invalid_request_error", "model", "model_not_found"),
    "s3_invalid_bad_model": (404, "invalid_request_error", "model", "model_not_found"),
    # pydantic json_invalid with param "body.1": a JSON position, not a field
    "s1_invalid_json": (400, "invalid_request_error", None, None),
    "s3_invalid_json": (400, "invalid_request_error", None, None),
    # max_tokens above max_model_len: a bad max_tokens, not a context overflow
    "s1_invalid_maxtokens": (400, "invalid_request_error", "max_tokens", None),
    "s3_invalid_maxtokens": (400, "invalid_request_error", "max_tokens", None),
    # "body.messages" -> "messages"
    "s1_invalid_missing_messages": (400, "invalid_request_error", "messages", None),
    "s3_invalid_missing_messages": (400, "invalid_request_error", "messages", None),
}


@pytest.mark.parametrize("name", sorted(VLLM_CASES))
def test_recorded_vllm_errors(name: str) -> None:
    path = VLLM / f"{name}.body"
    raw = path.read_bytes()
    err = normalize_upstream_error(recorded_status(path), raw)
    assert (err.status, err.type, err.param, err.code) == VLLM_CASES[name]
    assert err.message == orjson.loads(raw)["error"]["message"]  # vLLM's own words are kept
    assert strict_errors(err) == []


def test_every_recorded_vllm_error_is_covered() -> None:
    recorded = {p.stem for p in VLLM.glob("*.body") if p.read_bytes().startswith(b'{"error"')}
    assert recorded == set(VLLM_CASES)


LLAMACPP_CASES: dict[str, tuple[int, int, str, str | None, str | None]] = {
    # name -> (upstream status, status, type, param, code)
    "ls.err_bad_json": (400, 400, "invalid_request_error", None, None),
    "ls.err_ctx_overflow": (400, 400, "invalid_request_error", "messages", "context_length_exceeded"),
    "ls.err_no_messages": (400, 400, "invalid_request_error", "messages", None),
    # recorded without headers; the README's request was a GET on an unknown path
    "ls.notfound": (404, 404, "invalid_request_error", None, None),
    "ls.chat_tools_forced_stream_logprobs": (400, 400, "invalid_request_error", None, None),
}


@pytest.mark.parametrize("name", sorted(LLAMACPP_CASES))
def test_recorded_llamacpp_errors(name: str) -> None:
    upstream, *expected = LLAMACPP_CASES[name]
    path = LLAMACPP / f"{name}.body"
    if path.with_suffix(".headers").exists():
        assert recorded_status(path) == upstream
    err = normalize_upstream_error(upstream, path.read_bytes())
    assert [err.status, err.type, err.param, err.code] == expected
    assert strict_errors(err) == []


def test_llamacpp_context_overflow_is_said_as_openai_says_it() -> None:
    err = normalize_upstream_error(400, (LLAMACPP / "ls.err_ctx_overflow.body").read_bytes())
    # the body carries n_ctx 4096 and n_prompt_tokens 5011
    assert err.message == (
        "This model's maximum context length is 4096 tokens. However, your messages resulted in 5011 tokens. "
        "Please reduce the length of the messages."
    )


def test_context_overflow_blames_the_prompt_on_completions() -> None:
    err = normalize_upstream_error(400, (LLAMACPP / "ls.err_ctx_overflow.body").read_bytes(), context_param="prompt")
    assert (err.param, err.code) == ("prompt", "context_length_exceeded")
    assert "your prompt resulted in 5011 tokens" in err.message


def test_llamacpp_int_code_never_reaches_the_client() -> None:
    err = normalize_upstream_error(400, (LLAMACPP / "ls.err_bad_json.body").read_bytes())
    assert err.code is None


# ---------------------------------------------------------------------------------------------------
# Bodies described in backend-quirks.md (one per shape)


def j(value: Any) -> bytes:
    return orjson.dumps(value)


FLAT = {"object": "error", "param": None}

SHAPES: list[tuple[str, int, bytes, tuple[int, str, str | None, str | None]]] = [
    (
        "old vLLM flat, pydantic extra_forbidden: param from the loc tuple",
        400,
        j(
            {
                **FLAT,
                "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'store'), 'msg': 'Extra inputs are not permitted'}]",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (400, "invalid_request_error", "store", None),
    ),
    (
        "vLLM 2026 pydantic error with type 'Bad Request' and a nested loc",
        400,
        j(
            {
                "error": {
                    "message": "1 validation error",
                    "type": "Bad Request",
                    "param": "body.messages.2.role",
                    "code": 400,
                }
            }
        ),
        (400, "invalid_request_error", "messages[2].role", None),
    ),
    (
        "vLLM context overflow",
        400,
        j(
            {
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
                    "(100 in the messages, 2000 in the completion). Please reduce the length of the messages or completion.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            }
        ),
        (400, "invalid_request_error", "messages", "context_length_exceeded"),
    ),
    (
        "vLLM 2026 context overflow wording",
        400,
        j(
            {
                "error": {
                    "message": "Input length (3000) exceeds model's maximum context length (2048).",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            }
        ),
        (400, "invalid_request_error", "messages", "context_length_exceeded"),
    ),
    (
        "SGLang context overflow, flat",
        400,
        j(
            {
                **FLAT,
                "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (400, "invalid_request_error", "messages", "context_length_exceeded"),
    ),
    (
        "SGLang flat 500",
        500,
        j(
            {
                **FLAT,
                "message": "Internal server error: CUDA out of memory.",
                "type": "InternalServerError",
                "code": 500,
            }
        ),
        (500, "server_error", None, None),
    ),
    (
        "TensorRT-LLM: an engine failure answered as 400",
        400,
        j(
            {
                **FLAT,
                "message": "Executor error: the engine died while processing the request",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (500, "server_error", None, None),
    ),
    (
        "TensorRT-LLM: CUDA out of memory as 400",
        400,
        j(
            {
                **FLAT,
                "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (500, "server_error", None, None),
    ),
    (
        "TensorRT-LLM: a Python traceback as 400",
        400,
        j(
            {
                **FLAT,
                "message": "Traceback (most recent call last):\n  File ...",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (500, "server_error", None, None),
    ),
    (
        "TensorRT-LLM: a real client error stays 400",
        400,
        j(
            {
                **FLAT,
                "message": "Multiple response is not supported in PyTorch workflow",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        (400, "invalid_request_error", None, None),
    ),
    (
        "a server-fault type sent with 400",
        400,
        j({"error": {"message": "something broke", "type": "InternalServerError", "param": None, "code": 400}}),
        (500, "server_error", None, None),
    ),
    (
        "llama.cpp model loading",
        503,
        j({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
        (503, "server_error", None, None),
    ),
    (
        "llama.cpp not_supported_error 501: the request asked for what this server cannot do",
        501,
        j(
            {
                "error": {
                    "code": 501,
                    "message": "This server does not support embeddings.",
                    "type": "not_supported_error",
                }
            }
        ),
        (400, "invalid_request_error", None, None),
    ),
    (
        "Ollama, already official apart from the type",
        404,
        j(
            {
                "error": {
                    "message": 'model "llama3" not found, try pulling it first',
                    "type": "not_found_error",
                    "param": None,
                    "code": None,
                }
            }
        ),
        (404, "invalid_request_error", "model", "model_not_found"),
    ),
    (
        "Ollama api_error",
        500,
        j(
            {
                "error": {
                    "message": "llama runner process has terminated",
                    "type": "api_error",
                    "param": None,
                    "code": None,
                }
            }
        ),
        (500, "server_error", None, None),
    ),
    (
        "Ollama native {'error': str}",
        404,
        j({"error": "model 'qwen3' not found"}),
        (404, "invalid_request_error", "model", "model_not_found"),
    ),
    (
        "vLLM API-key middleware",
        401,
        j({"error": "Unauthorized"}),
        (401, "authentication_error", None, None),
    ),
    (
        "FastAPI validation list, 422",
        422,
        j(
            {
                "detail": [
                    {"loc": ["body", "messages", 0, "content"], "msg": "field required", "type": "value_error.missing"}
                ]
            }
        ),
        (400, "invalid_request_error", "messages[0].content", None),
    ),
    (
        "FastAPI HTTPException",
        404,
        j({"detail": "Not Found"}),
        (404, "invalid_request_error", None, None),
    ),
    (
        "FastAPI 405",
        405,
        j({"detail": "Method Not Allowed"}),
        (400, "invalid_request_error", None, None),
    ),
    (
        "a string code from an OpenAI-compatible proxy is kept",
        429,
        j(
            {
                "error": {
                    "message": "slow down",
                    "type": "rate_limit_error",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            }
        ),
        (429, "rate_limit_error", None, "rate_limit_exceeded"),
    ),
    (
        "nginx HTML page",
        502,
        b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><center><h1>502 Bad Gateway</h1></center></body></html>",
        (502, "server_error", None, None),
    ),
    (
        "plain text",
        500,
        b"Internal Server Error",
        (500, "server_error", None, None),
    ),
    (
        "empty body",
        503,
        b"",
        (503, "server_error", None, None),
    ),
    (
        "gateway timeout",
        504,
        b"",
        (504, "server_error", None, None),
    ),
    (
        "JSON that is not an object",
        400,
        b'["what"]',
        (400, "invalid_request_error", None, None),
    ),
]


@pytest.mark.parametrize(("label", "status", "raw", "expected"), SHAPES, ids=[s[0] for s in SHAPES])
def test_backend_shapes(label: str, status: int, raw: bytes, expected: tuple[int, str, str | None, str | None]) -> None:
    err = normalize_upstream_error(status, raw)
    assert (err.status, err.type, err.param, err.code) == expected
    assert err.message  # never empty
    assert strict_errors(err) == []


def test_html_page_becomes_its_title() -> None:
    err = normalize_upstream_error(502, b"<html><head><title>502 Bad Gateway</title></head><body>x</body></html>")
    assert err.message == "502 Bad Gateway"


def test_html_without_title_loses_its_tags() -> None:
    err = normalize_upstream_error(500, b"<html><body><h1>Oops</h1>\n<p>it   broke</p></body></html>")
    assert err.message == "Oops it broke"


def test_empty_body_says_what_happened() -> None:
    assert "503" in normalize_upstream_error(503, b"").message


def test_fastapi_detail_list_reads_as_one_message() -> None:
    raw = j(
        {
            "detail": [
                {"loc": ["body", "n"], "msg": "value is not a valid integer", "type": "type_error.integer"},
                {"loc": ["body", "stop"], "msg": "too long", "type": "x"},
            ]
        }
    )
    err = normalize_upstream_error(422, raw)
    assert err.param == "n"  # the first one, as the official API reports one
    assert err.message == "Invalid 'n': value is not a valid integer; Invalid 'stop': too long"


def test_long_messages_are_cut() -> None:
    err = normalize_upstream_error(500, b"x" * 50_000)
    assert 0 < len(err.message) <= 1000


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # SGLang / vLLM error events inside a 200 stream: the code in the body is the status meant
        (
            {
                "object": "error",
                "message": "Generation aborted.",
                "type": "SERVICE_UNAVAILABLE",
                "param": None,
                "code": 503,
            },
            (503, "server_error"),
        ),
        (
            {"error": {"message": "Engine loop has died", "type": "InternalServerError", "param": None, "code": 500}},
            (500, "server_error"),
        ),
        (
            {"object": "error", "message": "bad stop", "type": "BadRequestError", "param": None, "code": 400},
            (400, "invalid_request_error"),
        ),
        # no code: the type decides
        ({"error": {"message": "slow down", "type": "RateLimitError"}}, (429, "rate_limit_error")),
        # nothing to go on: a server fault
        ({"error": {"message": "?"}}, (500, "server_error")),
    ],
)
def test_error_event_inside_a_200_stream(body: dict[str, Any], expected: tuple[int, str]) -> None:
    err = normalize_upstream_error(200, body)  # already decoded, as a stream transformer holds it
    assert (err.status, err.type) == expected
    assert strict_errors(err) == []


def test_accepts_text_as_well_as_bytes() -> None:
    err = normalize_upstream_error(
        400, '{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}'
    )
    assert (err.status, err.message) == (400, "m")


def test_message_that_is_not_a_string_is_serialised() -> None:
    err = normalize_upstream_error(400, {"error": {"message": {"why": "nested"}, "type": "BadRequestError"}})
    assert err.message == '{"why":"nested"}'


def test_model_not_found_with_dots_in_the_name() -> None:
    raw = j(
        {
            "error": {
                "message": "The model `Qwen/Qwen2.5-7B-Instruct` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            }
        }
    )
    err = normalize_upstream_error(404, raw)
    assert (err.status, err.code, err.param) == (404, "model_not_found", "model")


def test_file_not_found_is_not_a_missing_model() -> None:
    err = normalize_upstream_error(
        404, j({"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}})
    )
    assert err.code is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
error_like = st.fixed_dictionaries(
    {},
    optional={
        "message": json_values,
        "type": st.sampled_from(["BadRequestError", "Bad Request", "not_found_error", "server_error", "x"])
        | json_values,
        "param": json_values,
        "code": st.sampled_from([400, 404, 500, 503, 999, "x", "400"]) | json_values,
        "object": st.just("error"),
    },
)
bodies = (
    json_values
    | error_like
    | error_like.map(lambda e: {"error": e})
    | st.builds(lambda d: {"detail": d}, json_values)
    | st.binary(max_size=60)
)


@examples(400)
@given(status=st.integers(100, 599), body=bodies)
def test_any_body_and_status_give_an_official_error(status: int, body: Any) -> None:
    err = normalize_upstream_error(status, body)
    assert err.status >= 400
    assert isinstance(err.message, str)
    assert err.message
    assert strict_errors(err) == []


@pytest.mark.parametrize(
    "message",
    [
        "The model does not support tools; the chat template was not found",
        "File Not Found",
        "Tokenizer for this model could not be loaded: vocabulary missing",
    ],
)
def test_messages_that_only_mention_a_model_are_not_model_not_found(message: str) -> None:
    err = normalize_upstream_error(400, {"error": {"message": message, "type": "BadRequestError", "code": 400}})
    assert (err.status, err.code) == (400, None)


@pytest.mark.parametrize(
    "message",
    ["The model `gpt-4o` does not exist.", 'model "llama3" not found, try pulling it first', "model not found"],
)
def test_unknown_model_wordings(message: str) -> None:
    err = normalize_upstream_error(400, {"error": {"message": message, "type": "BadRequestError", "code": 400}})
    assert (err.status, err.type, err.param, err.code) == (404, "invalid_request_error", "model", "model_not_found")


def test_a_long_message_is_never_cut_inside_a_word() -> None:
    """A cut inside a key would leave a prefix of it that no scrub of the whole key can find."""
    key = "sk-upstream-echo-4c1d9e2a"
    for lead in ("z" * 990, "Invalid key: " + "a " * 490):
        error = normalize_upstream_error(400, {"error": {"message": lead + key + " and more"}})
        assert key[:6] not in error.message
        assert error.message.endswith("[truncated]") and len(error.message) <= 1012
    short = normalize_upstream_error(400, {"error": {"message": "word " * 300}})
    assert short.message == ("word " * 200).rstrip() + " [truncated]"
