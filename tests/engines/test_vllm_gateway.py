"""Two vLLM behaviours the live tests (``test_vllm.py``) found, pinned with recorded bytes (no vLLM needed).

* vLLM started without ``--enable-auto-tool-choice --tool-call-parser`` answers ``tool_choice:
  "auto"`` (also the default when tools are offered) with a 400 (V-5, recorded ``s1_tools_auto``).
  The official API would answer, and the gateway can read tool calls written as text, so it resends
  the request once with ``tool_choice: "none"`` (vLLM still renders the tools) and parses the calls.
  Any other 400, or the same one with text repair off, reaches the client as the backend's error.
* vLLM's hermes parser streams the ``"\\n\\n"`` before ``<tool_call>`` as content
  (``s4b_think_tool_regex_lb_stream``). The gateway holds that whitespace back (it could open a call
  written as text); once the backend's own calls come, it is framing and must not be sent after them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _sdk import raw_exchange

from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.server.config import ModelRoute, Settings

_GATEWAY_TESTS = str(Path(__file__).resolve().parents[1] / "server")
if _GATEWAY_TESTS not in sys.path:
    sys.path.append(_GATEWAY_TESTS)
from _servers import Canned, Replayer, RunningGateway, free_port  # noqa: E402

pytestmark = pytest.mark.live  # starts real engines (llama.cpp, vLLM) and clients

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
TOOL_TEXT = '<think>\nNeed weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def recorded(name: str) -> Canned:
    status = int((VLLM / f"{name}.headers").read_text().split()[1])
    body = (VLLM / f"{name}.body").read_bytes()
    kind = "text/event-stream; charset=utf-8" if body.startswith(b"data:") else "application/json"
    return Canned(body, status, kind)


def no_parser_answer(text: str) -> Canned:
    """vLLM 0.32 without parsers: the model's text as content (the shape of ``s1_chat``)."""
    body = json.loads((VLLM / "s1_chat.body").read_bytes())
    body["choices"][0]["message"]["content"] = text
    body["choices"][0]["finish_reason"] = "stop"
    return Canned(json.dumps(body).encode())


def no_parser_stream(text: str) -> Canned:
    """The same as a stream, a few characters per event (vLLM's chunk shape, ``s1_chat_stream``)."""
    events = [{"role": "assistant", "content": ""}, *({"content": text[i : i + 3]} for i in range(0, len(text), 3))]
    chunks = [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "tiny",
         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        for delta in events
    ]  # fmt: skip
    chunks.append({**chunks[-1], "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]})
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return Canned(body, content_type="text/event-stream; charset=utf-8")


@pytest.fixture(scope="module")
def backend() -> Iterator[Replayer]:
    with Replayer() as replayer:
        yield replayer


@pytest.fixture
def gateway(backend: Replayer, request: pytest.FixtureRequest) -> Iterator[str]:
    backend.queue.clear()
    backend.seen.clear()
    repair = getattr(request, "param", True)
    route = ModelRoute(name="tiny", upstreams=(backend.url,), profile="vllm@0.32")
    with RunningGateway(Settings(models=(route,), port=free_port(), text_repair=repair)) as running:
        yield running.url


def tool_request(**extra: Any) -> dict[str, Any]:
    request = json.loads((VLLM / "s1_tools_auto.req.json").read_text())
    return {**request, **extra}


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: ") and block != b"data: [DONE]":
            out.append(json.loads(block[6:]))
    return out


@pytest.mark.parametrize("tool_choice", ["auto", None])
def test_auto_tool_choice_refused_is_resent_with_none(backend: Replayer, gateway: str, tool_choice: Any) -> None:
    request = tool_request()  # tool_choice "auto"; left out, vLLM defaults to "auto" with tools
    if tool_choice is None:
        request.pop("tool_choice")
    backend.push(recorded("s1_tools_auto"), no_parser_answer(TOOL_TEXT))
    status, headers, raw = raw_exchange(gateway, "/v1/chat/completions", request)
    assert status == 200, raw
    sent = [seen.json() for seen in backend.seen]
    assert [s.get("tool_choice") for s in sent] == [tool_choice, "none"]
    assert sent[1]["tools"] == request["tools"]  # still offered: the template lists them
    message = json.loads(raw)["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    call = message["message"]["tool_calls"][0]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert message["message"]["content"] is None
    assert message["message"]["reasoning_content"].strip() == "Need weather."
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers)
    assert [f for f in check(exchange, CheckOptions(extensions_as_notes=True)) if f.severity == "error"] == []


def test_auto_tool_choice_refused_is_resent_for_a_stream(backend: Replayer, gateway: str) -> None:
    request = tool_request(stream=True)
    backend.push(recorded("s1_tools_auto"), no_parser_stream(TOOL_TEXT))
    status, headers, raw = raw_exchange(gateway, "/v1/chat/completions", request)
    assert status == 200, raw
    assert [seen.json().get("tool_choice") for seen in backend.seen] == ["auto", "none"]
    deltas = [c["choices"][0]["delta"] for c in _events(raw) if c["choices"]]
    calls = [t for d in deltas for t in d.get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads("".join(t["function"]["arguments"] for t in calls)) == {"city": "Paris"}
    assert "".join(d.get("content") or "" for d in deltas) == ""
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers)
    assert [f for f in check(exchange, CheckOptions(extensions_as_notes=True)) if f.severity == "error"] == []


def test_other_400s_are_not_resent(backend: Replayer, gateway: str) -> None:
    backend.push(recorded("s1_invalid_maxtokens"), no_parser_answer("never sent"))
    status, _, raw = raw_exchange(gateway, "/v1/chat/completions", tool_request(max_tokens=99999))
    assert status == 400
    assert len(backend.seen) == 1
    error = json.loads(raw)["error"]
    assert error["type"] == "invalid_request_error" and "max_model_len" in error["message"]


@pytest.mark.parametrize("gateway", [False], indirect=True, ids=["no-text-repair"])
def test_without_text_repair_the_refusal_reaches_the_client(backend: Replayer, gateway: str) -> None:
    """Resending with "none" only helps when the gateway reads the calls from the text itself."""
    backend.push(recorded("s1_tools_auto"), no_parser_answer(TOOL_TEXT))
    status, _, raw = raw_exchange(gateway, "/v1/chat/completions", tool_request())
    assert status == 400
    assert len(backend.seen) == 1
    assert "--enable-auto-tool-choice" in json.loads(raw)["error"]["message"]


def test_whitespace_before_the_backends_tool_call_is_not_sent_after_it(backend: Replayer, gateway: str) -> None:
    request = json.loads((VLLM / "s4b_think_tool_regex_lb_stream.req.json").read_text())
    backend.push(recorded("s4b_think_tool_regex_lb_stream"))
    status, headers, raw = raw_exchange(gateway, "/v1/chat/completions", request)
    assert status == 200
    deltas = [c["choices"][0]["delta"] for c in _events(raw) if c["choices"]]
    first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert not any(d.get("content") for d in deltas[first_call:])
    assert "".join(d.get("content") or "" for d in deltas) == ""
    assert "".join(d.get("reasoning_content") or "" for d in deltas).strip() == "Need weather."
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers)
    assert [f for f in check(exchange, CheckOptions(extensions_as_notes=True)) if f.severity == "error"] == []
