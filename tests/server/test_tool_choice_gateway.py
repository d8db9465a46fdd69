"""A forced tool_choice through the gateway, per profile (issue 15, item 3), on documented traffic:
the Ollama bodies are the hand-written fixtures of ``tests/fixtures/ollama`` (documented, not recorded:
Ollama ignores ``tool_choice``, O-1), vLLM's refusal is the recorded ``s1_tools_required`` of
``tests/fixtures/recorded/vllm-0.32-cpu``. In process (``_fake.FakeUpstream``): the test is about
what the gateway sends and answers, not about sockets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from _fake import BASE, FakeUpstream, _call
from _servers import Canned

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CALL = (FIXTURES / "ollama" / "chat-nonstream-tool-calls.json").read_bytes()
CALL_STREAM = (FIXTURES / "ollama" / "chat-stream-tool-calls.sse").read_bytes()
TEXT = (FIXTURES / "ollama" / "chat-nonstream.json").read_bytes()
TEXT_STREAM = (FIXTURES / "ollama" / "chat-stream.sse").read_bytes()
REFUSED = (FIXTURES / "recorded" / "vllm-0.32-cpu" / "s1_tools_required.body").read_bytes()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}


def gateway(profile: str, *answers: Canned) -> tuple[Gateway, FakeUpstream]:
    fake = FakeUpstream()
    fake.push(*answers)
    app = Gateway(Settings(models=(ModelRoute("m", (BASE,), profile),), state="memory"), fake)
    asyncio.run(app.startup())
    return app, fake


def post(app: Gateway, body: dict[str, Any]) -> Any:
    return asyncio.run(_call(app, "POST", "/v1/chat/completions", json.dumps(body).encode(), {}))


def sse(body: bytes) -> Canned:
    return Canned(body, content_type="text/event-stream")


def test_ollama_answer_without_the_call_is_asked_again_and_the_second_one_passes() -> None:
    app, fake = gateway("ollama", Canned(TEXT), Canned(CALL))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 200, reply.body
    (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and reply.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert [json.loads(s.body)["tool_choice"] for s in fake.seen] == ["auto", "auto"]


def test_ollama_without_the_call_twice_is_an_openai_error() -> None:
    app, fake = gateway("ollama", Canned(TEXT), Canned(TEXT))
    reply = post(app, {**ASK, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert reply.status == 502 and len(fake.seen) == 2
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("tool_choice", "tool_choice_not_honoured")
    assert "get_weather" in error["message"]


def test_ollama_stream_is_held_until_the_call_then_relayed() -> None:
    app, fake = gateway("ollama", sse(TEXT_STREAM), sse(CALL_STREAM))
    reply = post(app, {**ASK, "tool_choice": "required", "stream": True})
    assert reply.status == 200 and len(fake.seen) == 2
    events = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    names = [t["function"].get("name") for e in events for c in e["choices"] for t in c["delta"].get("tool_calls", [])]
    assert names == ["get_weather", None]
    assert not any(c["delta"].get("content") for e in events for c in e["choices"])  # nothing of the first answer


def test_a_call_in_the_first_answer_is_not_asked_again() -> None:
    app, fake = gateway("ollama", Canned(CALL))
    assert post(app, {**ASK, "tool_choice": "required"}).status == 200 and len(fake.seen) == 1


def test_vllm_refusing_required_for_want_of_a_parser_is_asked_with_its_guided_decoding() -> None:
    guided = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
                "finish_reason": "stop",
            }
        ]
    }
    app, fake = gateway("vllm@0.32", Canned(REFUSED, status=400), Canned(json.dumps(guided).encode()))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 200, reply.body
    (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert reply.json()["choices"][0]["message"]["content"] is None
    resent = json.loads(fake.seen[1].body)
    assert resent["tool_choice"] == "none" and "json" in resent["structured_outputs"]


def test_invalid_arguments_get_a_header_on_a_plain_answer() -> None:
    bad = json.loads(CALL)
    bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    app, _ = gateway("ollama", Canned(json.dumps(bad).encode()))
    reply = post(app, ASK)
    assert reply.status == 200 and reply.headers["x-oaishim-violations"] == "tool_arguments_invalid"


CITY_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _answer_with_arguments(arguments: str) -> Canned:
    body = json.loads(CALL)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
    return Canned(json.dumps(body).encode())


def test_a_call_whose_arguments_break_the_schema_is_asked_again() -> None:
    """Ollama cannot force the call (O-1): a call of the right function whose arguments the tool's
    schema rejects is no better than none; the second answer, which fits, reaches the client."""
    app, fake = gateway("ollama", _answer_with_arguments('{"town": "Paris"}'), Canned(CALL))
    reply = post(app, {**ASK, "tools": CITY_TOOLS, "tool_choice": "required"})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_arguments_breaking_the_schema_twice_are_an_openai_error_also_streamed() -> None:
    broken = CALL_STREAM.replace(b'{\\"city\\":\\"Paris\\"}', b'{\\"city\\":7}')
    assert broken != CALL_STREAM
    app, fake = gateway("ollama", sse(broken), sse(broken))
    reply = post(app, {**ASK, "tools": CITY_TOOLS, "tool_choice": "required", "stream": True})
    assert reply.status == 502 and len(fake.seen) == 2, reply.body
    assert reply.json()["error"]["code"] == "tool_choice_not_honoured"


LLAMA_TEXT = (FIXTURES / "llamacpp" / "chat-nonstream.json").read_bytes()
LLAMA_CALL = (FIXTURES / "llamacpp" / "chat-nonstream-tool-calls.json").read_bytes()


def test_llamacpp_answering_required_with_text_is_asked_again_then_an_openai_error() -> None:
    """llama.cpp is meant to enforce ``required`` with its grammar, yet a live llama-server answered it
    with text (the tiny model's Hermes-style template): the gateway checks it, never a silent no-op."""
    app, fake = gateway("llamacpp@b9174", Canned(LLAMA_TEXT), Canned(LLAMA_CALL))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    assert [json.loads(s.body)["tool_choice"] for s in fake.seen] == ["required", "required"]
    assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    app, fake = gateway("llamacpp@b9174", Canned(LLAMA_TEXT), Canned(LLAMA_TEXT))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 502 and reply.json()["error"]["code"] == "tool_choice_not_honoured"
