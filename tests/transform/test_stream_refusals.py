"""Errors by meaning in the stream pipe: an upstream stream that opens with an error event (a 200
that carries an error) is a refusal the shell can still answer with the error's HTTP status, and a
context overflow inside a stream blames what the endpoint calls its input. Every split point of the
upstream bytes is tried.

The expected codes and params are OpenAI's (openai-wire-format.md §5: a context overflow is 400
``invalid_request_error`` with ``param`` messages / prompt / input and ``code``
``context_length_exceeded``); the bodies are the backends' documented ones (tests/fixtures/*/).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pipes import every_split, run

from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import plain_answer
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.wire.errors import OpenAIError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_STREAM_OVERFLOW = (FIXTURES / "vllm" / "chat-stream-context-overflow.sse").read_bytes()
# llama.cpp's newer mid-stream error: text first, then the overflow as a 500-coded event (L-26)
LLAMA_MIDSTREAM = (FIXTURES / "llamacpp" / "chat-stream-error-event-new.sse").read_bytes()
LLAMA_OLD_FIELD = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}\n\n'
    b'error: {"code":500,"message":"the request exceeds the available context size, try increasing it",'
    b'"type":"exceed_context_size_error","n_prompt_tokens":5011,"n_ctx":4096}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(("chat", "param"), [(True, "messages"), (False, "prompt")])
def test_a_stream_that_opens_with_an_overflow_is_refused_at_every_split(chat: bool, param: str) -> None:
    raw = VLLM_STREAM_OVERFLOW
    for pieces in every_split(raw):
        _, pipe = run(pieces, ResponseContext("m", chat=chat, context_param=param))
        refused = pipe.refused
        assert refused is not None, pieces
        assert (refused.status, refused.type, refused.param, refused.code) == (
            400,
            "invalid_request_error",
            param,
            "context_length_exceeded",
        )


def test_an_error_after_text_stays_the_streams_last_event_and_names_the_overflow() -> None:
    for pieces in every_split(LLAMA_MIDSTREAM):
        out, pipe = run(pieces, ResponseContext("m", context_param="messages"))
        assert pipe.refused is None  # the client already has text: only an error event can follow
        last = json.loads(out.strip().split(b"\n\n")[-1].removeprefix(b"data: "))
        # "Context size has been exceeded." under code 500: an overflow all the same
        assert (last["error"]["code"], last["error"]["param"]) == ("context_length_exceeded", "messages")
        assert b'"content":"Once"' in out


def test_the_old_error_field_is_an_overflow_blaming_the_endpoints_input() -> None:
    for pieces in every_split(LLAMA_OLD_FIELD):
        _, pipe = run(pieces, ResponseContext("m", chat=False, context_param="prompt"))
        error = pipe.normalizer.error
        assert error is not None and (error.param, error.code) == ("prompt", "context_length_exceeded")
        assert "maximum context length is 4096 tokens" in error.message


def test_the_gateways_own_failure_before_any_chunk_is_not_a_refusal() -> None:
    """A stream cut before its first event is the gateway's finding, not the upstream's answer."""
    _, pipe = run([b'data: {"choi'], ResponseContext("m"))
    assert pipe.normalizer.error is not None and pipe.refused is None


def test_a_plain_200_that_carries_a_flat_error_is_that_error() -> None:
    """SGLang / TensorRT-LLM flat bodies (no "error" key) answered with 200."""
    body = (FIXTURES / "sglang" / "error-context-overflow.json").read_bytes()
    with pytest.raises(OpenAIError) as caught:
        plain_answer("completions", 200, body, ResponseContext("m", chat=False, context_param="prompt"))
    err = caught.value
    assert (err.status, err.param, err.code) == (400, "prompt", "context_length_exceeded")


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Input length (3012) exceeds model's maximum context length (2048)."),
        (400, "The decoder prompt (length 2049) is longer than the maximum model length of 2048."),
        (400, "The input (5013 tokens) is longer than the model's context length (4096 tokens)."),
        (400, "Requested token count exceeds the model's maximum context length of 4096 tokens."),
        (400, "The sum of prompt length (4100) and query length (0) should not exceed max_num_tokens (4096)"),
        (
            400,
            "The sum of prompt length (4100) and query length (0) max_tokens (16) should not exceed max_seq_len (4096)",
        ),
        (500, "Context size has been exceeded."),
        (500, "the request exceeds the available context size, try increasing it"),
    ],
)
def test_each_servers_overflow_words_are_an_overflow_whatever_the_status(status: int, message: str) -> None:
    err = normalize_upstream_error(status, {"error": {"message": message, "type": "x", "code": status}})
    assert (err.status, err.type, err.param, err.code) == (
        400,
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
