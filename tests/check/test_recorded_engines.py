"""Real traffic from real engines (llama.cpp, vLLM 0.32 on a CPU): each documented difference in
the recordings' READMEs is reported, where it is.

The recordings live in ``tests/fixtures/recorded/`` (copied from the shared fixtures). Each
expectation names a recording, a rule and the JSON path (and so the field) it must be found at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from oaishim.check import Exchange, Finding, check, exchange_from_bytes

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMA = RECORDED / "llamacpp-server"


def load(directory: Path, name: str) -> Exchange:
    request = None
    for suffix in (".req.json", ".request.json"):
        path = directory / (name + suffix)
        if path.exists():
            try:
                request = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                request = None  # a deliberately broken request (the bad-JSON case)
    status, headers = None, {}
    head = directory / (name + ".headers")
    if head.exists():
        for line in head.read_text(errors="replace").splitlines():
            if line.startswith("HTTP/"):
                status = int(line.split()[1])
            elif ":" in line:
                key, value = line.split(":", 1)
                headers[key.strip().lower()] = value.strip()
    raw = (directory / (name + ".body")).read_bytes()
    return exchange_from_bytes(raw, request=request, status=status, headers=headers)


def found(findings: list[Finding], rule: str, path_part: str) -> bool:
    return any(f.rule == rule and path_part in f.path for f in findings)


EXPECTED: list[tuple[Path, str, str, str]] = [
    # vLLM 0.32 (README: extra fields, reasoning, annotations/service_tier null, finish on the last
    # content chunk, chatcmpl-tool ids, a first tool delta without arguments, integer error codes)
    (VLLM, "s1_chat", "unknown-field", ".stop_reason"),
    (VLLM, "s1_chat", "unknown-field", "$.prompt_token_ids"),
    (VLLM, "s1_chat", "unknown-field", "$.kv_transfer_params"),
    (VLLM, "s3_chat", "unknown-field", ".message.reasoning"),
    (VLLM, "s1_chat", "schema", ".message.annotations"),
    (VLLM, "s1_chat_stream", "stream.finish-delta", ".delta"),
    (VLLM, "s1_chat_stream", "unknown-field", ".token_ids"),
    (VLLM, "s3x_nothink_tool_regex", "id.prefix", ".tool_calls[0].id"),
    (VLLM, "s3x_nothink_tool_regex_stream", "stream.tool-call-delta", ".tool_calls[0]"),
    (VLLM, "s3x_nothink_tool_regex_stream", "message.content-null", ".content"),
    (VLLM, "s1_invalid_json", "error.shape", "$.error.code"),
    (VLLM, "s1_invalid_bad_model", "error.shape", "$.error.code"),
    (VLLM, "s1_models", "unknown-field", ".max_model_len"),
    (VLLM, "s1_completions_default", "unknown-field", ".prompt_token_ids"),
    (VLLM, "s1_chat_logprobs", "unknown-field", "$.prompt_logprobs"),
    # llama.cpp (README: models/meta in /v1/models, chatcmpl- ids on /v1/completions, tool ids
    # without call_, timings, no logprobs key unless asked, content "" with tool calls, first delta
    # content null, chat-shaped logprobs on /v1/completions, extra id in logprob entries, error
    # bodies with int codes and custom types)
    (LLAMA, "ls.models", "unknown-field", "$.models"),
    (LLAMA, "ls.completions_logprobs", "id.prefix", "$.id"),
    (LLAMA, "ls.chat_tools_forced", "id.prefix", ".tool_calls[0].id"),
    (LLAMA, "ls.chat_nonstream", "unknown-field", "$.timings"),
    (LLAMA, "ls.chat_nonstream", "schema", "$.choices[0]"),
    (LLAMA, "ls.chat_tools_forced", "message.content-null", ".content"),
    (LLAMA, "ls.chat_stream", "stream.first-delta", ".delta"),
    (LLAMA, "ls.completions_logprobs", "logprobs.shape", ".logprobs"),
    (LLAMA, "ls.chat_logprobs", "unknown-field", ".logprobs.content[0].id"),
    (LLAMA, "ls.err_ctx_overflow", "error.shape", "$.error.type"),
    (LLAMA, "ls.err_bad_json", "error.shape", "$.error"),
]


@pytest.mark.parametrize(("directory", "name", "rule", "path"), EXPECTED, ids=[f"{e[1]}-{e[2]}" for e in EXPECTED])
def test_documented_difference_is_reported(directory: Path, name: str, rule: str, path: str) -> None:
    findings = check(load(directory, name))
    assert found(findings, rule, path), [(f.rule, f.path) for f in findings]


def _all(directory: Path) -> list[str]:
    return sorted(p.name.removesuffix(".body") for p in directory.glob("*.body"))


NOT_OPENAI = ("version", "tokenize", "render")  # vLLM's own endpoints, outside the official API


@pytest.mark.parametrize("name", [n for n in _all(VLLM) + _all(LLAMA) if not any(x in n for x in NOT_OPENAI)])
def test_every_openai_recording_differs_somewhere(name: str) -> None:
    """Neither engine is OpenAI-exact raw: every recording of an OpenAI endpoint has an error."""
    directory = VLLM if name.startswith("s") else LLAMA
    findings: list[Any] = check(load(directory, name))
    assert any(f.severity == "error" for f in findings)
