"""Every recorded or written backend response, replayed byte for byte behind the gateway: the
client gets what the official API would send (the checker finds no error) and the same text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake import call
from _servers import Canned, Replayer

from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion

IN_PROCESS = True  # the gateway app in process, behind _fake.FakeUpstream (conftest)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIVE = FIXTURES / "openai-live"
BACKENDS = ("vllm", "sglang", "trtllm", "llamacpp", "ollama")
# Each folder replayed behind its family's newest profile, pinned: a bare family name would first ask the
# replaying backend for its version (test_profile_detection.py).
PINNED = {"vllm": "vllm@0.32", "trtllm": "trtllm@1.4", "llamacpp": "llamacpp@b9174"}
# The reasoning field the gateway sends by default is the one extension it adds on purpose.
ALLOW_REASONING = CheckOptions(extensions_as_notes=True)


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return call(url, "POST", body, headers)


def errors(findings: list[Any]) -> list[tuple[str, str, Any, str]]:
    return [(f.rule, f.path, f.chunk, f.message) for f in findings if f.severity == "error"]


def final_text(raw: bytes, chat: bool) -> tuple[str, str]:
    """(content, reasoning) of choice 0 as a client accumulates it."""
    exchange = exchange_from_bytes(raw)
    if exchange.events is not None:
        chunks = [json.loads(e.data) for e in exchange.events if e.data != "[DONE]" and "choices" in json.loads(e.data)]
        body = accumulate_chat(chunks) if chat else accumulate_completion(chunks)
    else:
        body = exchange.body
    choice = body["choices"][0] if body.get("choices") else {}
    if not chat:
        return choice.get("text") or "", ""
    message = choice.get("message") or {}
    return message.get("content") or "", message.get("reasoning_content") or message.get("reasoning") or ""


@pytest.mark.parametrize("name", sorted(p.name for p in LIVE.glob("*.sse")))
def test_live_openai_streams_pass_through_clean_and_identical(backend: Replayer, gateways: Any, name: str) -> None:
    raw = (LIVE / name).read_bytes()
    backend.push(Canned(raw, content_type="text/event-stream"))
    request = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if "logprobs" in name:
        request["logprobs"] = True
    if "tool" in name:
        request["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    if "n3" in name:
        request["n"] = 3
    status, headers, out = post(gateways("openai") + "/v1/chat/completions", request)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    exchange = exchange_from_bytes(out, request=request, status=status, headers=headers)
    assert errors(check(exchange)) == []
    assert final_text(out, True) == final_text(raw, True)


def _cases() -> list[tuple[str, dict[str, Any]]]:
    return [(b, c) for b in BACKENDS for c in yaml.safe_load((FIXTURES / b / "manifest.yaml").read_text())]


CASES = _cases()
# Responses the backend gave to the *raw* request, which the gateway rewrites before the backend sees
# it, or that lack something no rewrite of the answer can supply. Replaying them shows nothing about
# the gateway; what it does instead is tested in test_request_side_repairs.
NOT_REPLAYABLE = {
    "ollama/chat-nonstream-max-completion-tokens-ignored": "the gateway sends max_tokens, which Ollama honours",
    "ollama/chat-nonstream-n-ignored": "Ollama generates one choice for n > 1; the answer cannot hold more",
    "ollama/completions-nonstream-logprobs-missing": "Ollama computes no logprobs; none can be added afterwards",
    "llamacpp/completions-logprobs-null-old": "old llama.cpp computed no completions logprobs",
}


@pytest.mark.parametrize(("backend_name", "case"), CASES, ids=[f"{b}/{c['name']}" for b, c in CASES])
def test_backend_fixture_through_the_gateway_checks_clean(
    backend: Replayer, gateways: Any, backend_name: str, case: dict[str, Any]
) -> None:
    if case["endpoint"] == "models" or case.get("request") is None:
        pytest.skip("GET /v1/models is rebuilt by the gateway, not relayed (see test_models)")
    if f"{backend_name}/{case['name']}" in NOT_REPLAYABLE:
        pytest.skip(NOT_REPLAYABLE[f"{backend_name}/{case['name']}"])
    raw = (FIXTURES / backend_name / case["file"]).read_bytes()
    backend.push(Canned(raw, status=case["status"], content_type=case["content_type"]))
    request = case["request"]
    path = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "embeddings": "/v1/embeddings"}.get(
        case["endpoint"], "/v1/chat/completions"
    )
    status, headers, out = post(gateways(PINNED.get(backend_name, backend_name)) + path, request)
    exchange = exchange_from_bytes(out, request=request, status=status, headers=headers)
    assert errors(check(exchange, ALLOW_REASONING)) == []
    if "text" in case and status == 200:
        # The manifest's text and reasoning are the model's, wherever the backend put them (with
        # <think> markup left in content by a backend without a reasoning parser, split out).
        content, reasoning = final_text(out, case["endpoint"] == "chat")
        assert content == case["text"]
        if case.get("reasoning"):
            assert reasoning.strip("\n") == case["reasoning"].strip("\n")
