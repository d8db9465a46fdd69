"""reasoning_effort through the gateway in front of SGLang, TensorRT-LLM and Ollama, from documented
traffic (``tests/fixtures/<backend>/reasoning-effort.yaml``: written from the notes, not recorded):
the backend receives its own spelling of "thinking off", and the client sees no reasoning although
the backend sent some, on chat and on the Responses API, plain and streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from _fake import call
from _servers import Canned

IN_PROCESS = True
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = [
    (backend, case)
    for backend in ("sglang", "trtllm", "ollama")
    for case in yaml.safe_load((FIXTURES / backend / "reasoning-effort.yaml").read_text())
]
IDS = [f"{b}/{c['name']}" for b, c in CASES]


def _chat_answer(raw: bytes, stream: bool) -> tuple[str, list[str]]:
    """(content, the reasoning keys the client saw) of choice 0."""
    if not stream:
        message = orjson.loads(raw)["choices"][0]["message"]
        return message["content"], [k for k in ("reasoning_content", "reasoning") if k in message]
    content, keys = "", []
    for line in raw.split(b"\n\n"):
        if line.startswith(b"data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                content += choice["delta"].get("content") or ""
                keys += [k for k in ("reasoning_content", "reasoning") if k in choice["delta"]]
    return content, keys


def _sent(backend: Any) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(backend.seen[-1].body)
    return body


def _push(backend: Any, backend_name: str, case: dict[str, Any]) -> None:
    """The case's recorded answer, queued to arrive in 7-byte pieces."""
    raw = (FIXTURES / backend_name / case["file"]).read_bytes()
    backend.push(Canned(raw, content_type=case["content_type"], piece=7))


def _check_upstream(case: dict[str, Any], sent: dict[str, Any]) -> None:
    for key, value in case["upstream"].items():
        assert sent.get(key) == value, key
    for key in case["upstream_lacks"]:
        assert key not in sent, key


@pytest.mark.parametrize(("backend_name", "case"), CASES, ids=IDS)
def test_chat_thinking_off_reaches_the_backend_and_no_reasoning_the_client(
    backend: Any, gateways: Any, backend_name: str, case: dict[str, Any]
) -> None:
    _push(backend, backend_name, case)
    status, _headers, out = call(gateways(case["profile"]) + "/v1/chat/completions", "POST", case["request"])
    assert status == 200, out
    _check_upstream(case, _sent(backend))
    assert _chat_answer(out, case["request"].get("stream") is True) == (case["text"], [])


@pytest.mark.parametrize(("backend_name", "case"), CASES, ids=IDS)
def test_responses_thinking_off_gives_no_reasoning_item(
    backend: Any, gateways: Any, backend_name: str, case: dict[str, Any]
) -> None:
    _push(backend, backend_name, case)
    chat = case["request"]
    stream = chat.get("stream") is True
    body = {"model": chat["model"], "input": "hi", "reasoning": {"effort": chat["reasoning_effort"]}, "store": False}
    if stream:
        body["stream"] = True
    status, _headers, out = call(gateways(case["profile"]) + "/v1/responses", "POST", body)
    assert status == 200, out
    _check_upstream(case, _sent(backend))
    if stream:
        events = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: {")]
        assert not [e for e in events if "reasoning" in e["type"]]
        response = next(e["response"] for e in events if e["type"] == "response.completed")
    else:
        response = orjson.loads(out)
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["text"] == case["text"]


GUARD_REFUSAL = FIXTURES / "trtllm" / "error-unused-template-kwargs.json"  # documented: the guard's 400


def test_trtllm_guard_refusing_the_switch_is_asked_again_without_it(backend: Any, gateways: Any) -> None:
    """TensorRT-LLM 1.4's template guard answers 400 for a chat_template_kwargs key the template does
    not read: the gateway's enable_thinking goes, the client's own keys stay, and the answer still
    carries no reasoning."""
    (case,) = [c for b, c in CASES if b == "trtllm"]
    answer = (FIXTURES / "trtllm" / case["file"]).read_bytes()
    refusal = Canned(GUARD_REFUSAL.read_bytes(), 400, "application/json")
    backend.push(refusal, Canned(answer, content_type=case["content_type"], piece=7))
    request = {**case["request"], "chat_template_kwargs": {"custom": 1}}
    status, _headers, out = call(gateways(case["profile"]) + "/v1/chat/completions", "POST", request)
    assert status == 200, out
    first, again = (orjson.loads(s.body) for s in backend.seen[-2:])
    assert first["chat_template_kwargs"] == {"enable_thinking": False, "custom": 1}
    assert again["chat_template_kwargs"] == {"custom": 1}
    assert {k: v for k, v in again.items() if k != "chat_template_kwargs"} == {
        k: v for k, v in first.items() if k != "chat_template_kwargs"
    }
    assert _chat_answer(out, False) == (case["text"], [])


def test_trtllm_guard_refusing_the_clients_own_kwargs_is_the_clients_error(backend: Any, gateways: Any) -> None:
    """The client set the switch itself: the guard's 400 is the client's, passed on, not resent."""
    (case,) = [c for b, c in CASES if b == "trtllm"]
    backend.push(Canned(GUARD_REFUSAL.read_bytes(), 400, "application/json"))
    before = len(backend.seen)
    request = {**case["request"], "chat_template_kwargs": {"enable_thinking": False}}
    status, _headers, out = call(gateways(case["profile"]) + "/v1/chat/completions", "POST", request)
    assert status == 400 and len(backend.seen) == before + 1
    assert "not referenced by the active chat template" in orjson.loads(out)["error"]["message"]
