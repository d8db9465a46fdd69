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

import pytest
from _fake import BASE, FakeUpstream, gateway, post, sse_answer
from _responses import calls, events, final, text
from _servers import Canned

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.wire.accumulate import accumulate_chat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CALL = (FIXTURES / "ollama" / "chat-nonstream-tool-calls.json").read_bytes()
CALL_STREAM = (FIXTURES / "ollama" / "chat-stream-tool-calls.sse").read_bytes()
TEXT = (FIXTURES / "ollama" / "chat-nonstream.json").read_bytes()
TEXT_STREAM = (FIXTURES / "ollama" / "chat-stream.sse").read_bytes()
# Ollama ignores a named choice and parallel_tool_calls (O-1, O-2): get_weather first, then get_time
BOTH = (FIXTURES / "ollama" / "chat-nonstream-tool-calls-unforced.json").read_bytes()
BOTH_STREAM = (FIXTURES / "ollama" / "chat-stream-tool-calls-unforced.sse").read_bytes()
REFUSED = (FIXTURES / "recorded" / "vllm-0.32-cpu" / "s1_tools_required.body").read_bytes()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}


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
    app, fake = gateway("ollama", sse_answer(TEXT_STREAM), sse_answer(CALL_STREAM))
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


def llamacpp_text(stream: bool) -> Canned:
    """What the tiny model's llama.cpp answered under ``required`` (L-30): text, no call."""
    if not stream:
        message = {"role": "assistant", "content": "junk words"}
        body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}  # fmt: skip
        return Canned(json.dumps(body).encode())
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    parts = [{"role": "assistant", "content": None}, {"content": "junk"}, {"content": " words"}]
    events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in parts]
    events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    return sse_answer(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n")


def llamacpp_json(stream: bool) -> Canned:
    """llama.cpp's answer under its ``json_schema`` grammar: the call as JSON, free whitespace and all."""
    text = '{\n  "name"\n :"get_weather", "arguments":\t{"city": "Paris"}\n}'
    if not stream:
        message = {"role": "assistant", "content": text}
        body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
        return Canned(json.dumps(body).encode())
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [{"role": "assistant", "content": None}, *({"content": text[i : i + 5]} for i in range(0, len(text), 5))]
    events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return sse_answer(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_llamacpp_text_under_required_is_asked_again_with_json_schema_and_read_as_the_call(
    stream: bool, choice: Any
) -> None:
    app, fake = gateway("llamacpp@b9174", llamacpp_text(stream), llamacpp_json(stream))
    reply = post(app, {**ASK, "tool_choice": choice, "stream": stream})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    if stream:
        events = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
        message = accumulate_chat(events)["choices"][0]["message"]
        finish = events[-1]["choices"][0]["finish_reason"]
    else:
        message, finish = reply.json()["choices"][0]["message"], reply.json()["choices"][0]["finish_reason"]
    (call,) = message["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert not message.get("content")  # nothing of the first answer
    assert finish == ("tool_calls" if choice == "required" else "stop")  # OpenAI's finish for a named choice is stop
    first, second = (json.loads(s.body) for s in fake.seen)
    assert first["tool_choice"] == "required" and "json_schema" not in first
    assert second["tool_choice"] == "none" and second["chat_template_kwargs"] == {"enable_thinking": False}
    assert second["json_schema"]["properties"]["name"]["enum"] == ["get_weather"]


def llamacpp_unparsed() -> Canned:
    """llama.cpp's 500 when the call the model began does not parse (L-31), as recorded (under auto)."""
    return Canned((FIXTURES / "recorded" / "llamacpp-server" / "ls.chat_tools_auto_unparsed.body").read_bytes(), 500)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_llamacpp_unparsed_call_is_asked_again_with_json_schema(choice: Any) -> None:
    app, fake = gateway("llamacpp@b9174", llamacpp_unparsed(), llamacpp_json(False))
    reply = post(app, {**ASK, "tool_choice": choice})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert json.loads(fake.seen[1].body)["tool_choice"] == "none"


def test_llamacpp_unparsed_output_under_auto_is_asked_again_with_none() -> None:
    """Under tool_choice auto nothing is forced, yet llama.cpp answers 500 when what the model began
    as a call does not parse (L-31; seen live after the Agents SDK reset its forced choice): asked
    once more with "none", the gateway parsing any call written as text, never a 500 to the client."""
    app, fake = gateway("llamacpp@b9174", llamacpp_unparsed(), Canned(LLAMA_TEXT))
    reply = post(app, {**ASK, "tool_choice": "auto"})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    first, second = (json.loads(s.body) for s in fake.seen)
    assert first["tool_choice"] == "auto" and second["tool_choice"] == "none"
    assert second["tools"] == first["tools"]  # the template still lists them


UNPARSED_STREAM = (FIXTURES / "recorded" / "llamacpp-server" / "ls.chat_tools_auto_unparsed_stream.body").read_bytes()


def test_llamacpp_unparsed_call_in_a_stream_under_auto_ends_as_the_answer_on_chat_and_responses() -> None:
    """Streamed, the same refusal comes after the text (L-32, recorded): the chat client gets the
    text and a finish, the Responses client ``response.completed``, never the 500 in the stream."""
    sent = "".join(
        c["delta"].get("content") or ""
        for e in UNPARSED_STREAM.split(b"\n\n")
        if e.startswith(b"data: {") and b'"choices"' in e
        for c in json.loads(e[6:])["choices"]
    )
    app, fake = gateway("llamacpp@b9174", sse_answer(UNPARSED_STREAM))
    reply = post(app, {**ASK, "tool_choice": "auto", "stream": True})
    assert reply.status == 200 and b"error" not in reply.body and reply.body.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    (choice,) = accumulate_chat(chunks)["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == (sent, "stop")
    assert repaired(app, "unparsed_call_finished") == 1 and len(fake.seen) == 1
    assert json.loads(fake.seen[0].body)["timings_per_token"] is True  # the counts that stand in for usage
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    app, _ = gateway("llamacpp@b9174", sse_answer(UNPARSED_STREAM))
    reply = post(app, {"model": "m", "input": "hi", "tools": tools, "stream": True}, "/v1/responses")
    assert reply.status == 200
    assert [e["type"] for e in events(reply.body)][-1] == "response.completed"
    assert text(final(reply.body)) == sent
    # its usage: llama.cpp's last per-chunk counts (the gateway asked for them)
    last = [json.loads(e[6:])["timings"] for e in UNPARSED_STREAM.split(b"\n\n") if b'"timings"' in e][-1]
    usage = final(reply.body)["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (last["cache_n"] + last["prompt_n"], last["predicted_n"])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_llamacpp_unparsed_call_in_a_forced_stream_is_asked_again_with_json_schema(choice: Any) -> None:
    """Forced and streamed, the refused parse is the recorded stream's error event after the text
    (L-31 as L-32 streams it; seen live under a named choice through LiteLLM): held, none of it
    reaches the client; it is an answer without the call, asked once more with the guided try."""
    app, fake = gateway("llamacpp@b9174", sse_answer(UNPARSED_STREAM), llamacpp_json(True))
    reply = post(app, {**ASK, "tool_choice": choice, "stream": True})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    assert b"error" not in reply.body and reply.body.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    message = accumulate_chat(chunks)["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert not message.get("content")  # nothing of the first answer
    assert json.loads(fake.seen[1].body)["tool_choice"] == "none"
    assert repaired(app, "tool_choice_retried") == 1


def test_another_error_in_a_forced_stream_reaches_the_client_unretried() -> None:
    other = UNPARSED_STREAM.replace(b"does not match the expected", b"ran out of slots for")
    app, fake = gateway("llamacpp@b9174", sse_answer(other), llamacpp_json(True))
    reply = post(app, {**ASK, "tool_choice": "required", "stream": True})
    assert reply.status == 200 and len(fake.seen) == 1
    assert b"ran out of slots for" in reply.body and not reply.body.endswith(b"data: [DONE]\n\n")


def test_llamacpp_completed_grammar_500_under_auto_is_asked_again_with_none() -> None:
    """L-33, plain: the error event of the recorded stream is the whole 500 body (seen live on the
    Agents SDK's turn after its tool call): asked once more with "none", never a 500 to the client."""
    recorded = (FIXTURES / "recorded" / "llamacpp-server" / "ls.chat_tools_auto_grammar_end_stream.body").read_bytes()
    error = next(e for e in recorded.split(b"\n\n") if b"empty grammar stack" in e).removeprefix(b"data: ")
    app, fake = gateway("llamacpp@b9174", Canned(error, 500), Canned(LLAMA_TEXT))
    reply = post(app, {**ASK, "tool_choice": "auto"})
    assert reply.status == 200 and len(fake.seen) == 2, reply.body
    first, second = (json.loads(s.body) for s in fake.seen)
    assert first["tool_choice"] == "auto" and second["tool_choice"] == "none"


def test_llamacpp_other_server_errors_pass_through_unretried() -> None:
    failure = {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}}
    app, fake = gateway("llamacpp@b9174", Canned(json.dumps(failure).encode(), 500))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 500 and len(fake.seen) == 1
    assert reply.json()["error"]["message"] == "slot unavailable"


def test_invalid_arguments_get_a_header_on_a_plain_answer() -> None:
    bad = json.loads(CALL)
    bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    app, _ = gateway("ollama", Canned(json.dumps(bad).encode()))
    reply = post(app, ASK)
    assert reply.status == 200 and reply.headers["x-oaishim-violations"] == "tool_arguments_invalid"


# -- a named choice Ollama did not keep to: the model called another function as well ------------------

TWO_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("get_weather", "get_time")
]
NAMED = {"model": "m", "messages": [{"role": "user", "content": "What time is it in Paris?"}], "tools": TWO_TOOLS}
NAMED |= {"tool_choice": {"type": "function", "function": {"name": "get_time"}}, "parallel_tool_calls": False}


def repaired(app: Gateway, kind: str) -> float:
    line = f'oaishim_repairs_total{{kind="{kind}"}} '
    return sum(float(x.rsplit(" ", 1)[1]) for x in app.metrics.render().decode().splitlines() if x.startswith(line))


def test_ollama_plain_answer_with_another_call_first_gives_the_named_call_without_asking_again() -> None:
    app, fake = gateway("ollama", Canned(BOTH))
    reply = post(app, NAMED)
    assert reply.status == 200 and len(fake.seen) == 1, reply.body
    (choice,) = reply.json()["choices"]
    (only,) = choice["message"]["tool_calls"]
    assert (only["function"]["name"], json.loads(only["function"]["arguments"])) == ("get_time", {"city": "Paris"})
    assert repaired(app, "unnamed_calls_dropped") == 1 and repaired(app, "tool_choice_retried") == 0


def test_ollama_stream_with_another_call_first_gives_the_named_call_without_asking_again() -> None:
    app, fake = gateway("ollama", sse_answer(BOTH_STREAM))
    reply = post(app, {**NAMED, "stream": True})
    assert reply.status == 200 and len(fake.seen) == 1, reply.body
    events = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    deltas = [t for e in events for c in e["choices"] for t in c["delta"].get("tool_calls", [])]
    assert [(d["index"], d["function"].get("name")) for d in deltas] == [(0, "get_time"), (0, None)]
    assert json.loads("".join(d["function"]["arguments"] for d in deltas)) == {"city": "Paris"}
    assert repaired(app, "unnamed_calls_dropped") == 1 and repaired(app, "tool_choice_retried") == 0


def responses_request(stream: bool) -> dict[str, Any]:
    tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("get_weather", "get_time")]
    return {
        "model": "m",
        "input": "What time is it in Paris?",
        "tools": tools,
        "tool_choice": {"type": "function", "name": "get_time"},
        "parallel_tool_calls": False,
        "stream": stream,
    }


def test_responses_named_choice_gives_only_the_named_call_plain_and_streamed() -> None:
    for stream, answer in ((False, Canned(BOTH)), (True, sse_answer(BOTH_STREAM))):
        app, fake = gateway("ollama", answer)
        reply = post(app, responses_request(stream), "/v1/responses")
        assert reply.status == 200 and len(fake.seen) == 1, reply.body
        response = final(reply.body) if stream else reply.json()
        (only,) = calls(response)
        assert (only["name"], json.loads(only["arguments"])) == ("get_time", {"city": "Paris"}), stream
        if stream:  # the events name one item, at output index 0
            added = [e for e in events(reply.body) if e["type"] == "response.output_item.added"]
            assert [(e["output_index"], e["item"]["name"]) for e in added] == [(0, "get_time")]
            assert {e["output_index"] for e in events(reply.body) if "output_index" in e} == {0}


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
    app, fake = gateway("ollama", sse_answer(broken), sse_answer(broken))
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
    first, second = (json.loads(s.body) for s in fake.seen)
    # asked again with llama.cpp's json_schema forcing one call (its grammar may not hold: L-30)
    assert first["tool_choice"] == "required" and "json_schema" not in first
    assert second["tool_choice"] == "none" and "json_schema" in second
    assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    app, fake = gateway("llamacpp@b9174", Canned(LLAMA_TEXT), Canned(LLAMA_TEXT))
    reply = post(app, {**ASK, "tool_choice": "required"})
    assert reply.status == 502 and reply.json()["error"]["code"] == "tool_choice_not_honoured"


# -- llama.cpp streams under auto read as text (L-34) ----------------------------------------------

LS = FIXTURES / "recorded" / "llamacpp-server"
HERMES = "{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}<tool_call>\n{...}\n</tool_call>"
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _llamacpp_like(template: str, stream: bytes, *, text_repair: bool = True) -> tuple[Gateway, Any]:
    """A gateway on ``--profile auto`` in front of a fake llama.cpp: its recorded ``/v1/models``
    (``Server: llama.cpp``), no ``/version``, ``/props`` with ``template``; a POST gets ``stream``."""

    def answer(seen: Any) -> Canned:
        if seen.path == "/v1/models":
            return Canned((LS / "ls.models.body").read_bytes(), headers={"Server": "llama.cpp"})
        if seen.path == "/props":
            return Canned(json.dumps({"build_info": "b11434-abc", "chat_template": template}).encode())
        if seen.path == "/version":
            return Canned(b'{"error": {"code": 404, "message": "File Not Found"}}', 404)
        return sse_answer(stream)

    fake = FakeUpstream()
    fake.responder = answer
    app = Gateway(Settings(models=(ModelRoute("m", (BASE,), "auto"),), state="memory", text_repair=text_repair), fake)
    asyncio.run(app.startup())
    return app, fake


def _content_stream(*pieces: str) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"".join(b"data: " + json.dumps({**base, **c}).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_auto_detection_reads_llamacpps_template_and_streams_under_auto_go_as_text() -> None:
    """Detected as llama.cpp, its ``/props`` template writes ``<tool_call>``: a stream under ``auto`` is
    sent ``none`` with the tools, and the call llama.cpp then streams as text reaches the client as a call."""
    app, fake = _llamacpp_like(HERMES, _content_stream(*(CALL_TEXT[i : i + 7] for i in range(0, len(CALL_TEXT), 7))))
    reply = post(app, {**ASK, "tool_choice": "auto", "stream": True})
    assert reply.status == 200
    assert [s.path for s in fake.seen][-2:] == ["/props", "/v1/chat/completions"]  # fetched after detection
    sent = json.loads(fake.seen[-1].body)
    assert sent["tool_choice"] == "none" and sent["tools"] == TOOLS and "timings_per_token" not in sent
    chunks = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    (choice,) = accumulate_chat(chunks)["choices"]
    assert choice["finish_reason"] == "tool_calls" and not choice["message"]["content"]
    (call,) = choice["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert repaired(app, "calls_read_as_text") == 1
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    reply = post(app, {"model": "m", "input": "Weather in Paris?", "tools": tools, "stream": True}, "/v1/responses")
    assert reply.status == 200 and json.loads(fake.seen[-1].body)["tool_choice"] == "none"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls(final(reply.body))] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert [s.path for s in fake.seen].count("/props") == 1  # the profile is kept for the route


def test_auto_detection_keeps_llamacpps_parser_for_a_template_it_cannot_read() -> None:
    app, fake = _llamacpp_like("{{ tools }}<|tool_calls_section_begin|>", _content_stream("Hello"))
    reply = post(app, {**ASK, "stream": True})
    assert reply.status == 200
    sent = json.loads(fake.seen[-1].body)
    assert "tool_choice" not in sent and sent["timings_per_token"] is True  # L-32's counts, as before
    assert repaired(app, "calls_read_as_text") == 0


def test_without_text_repair_the_template_is_not_read_and_llamacpp_parses_its_calls() -> None:
    """``--no-text-repair``: the gateway parses no call text, so a stream sent ``none`` would hand the
    client raw markup; llama.cpp keeps its parser and the template is not fetched."""
    app, fake = _llamacpp_like(HERMES, _content_stream("Hello"), text_repair=False)
    assert post(app, {**ASK, "stream": True}).status == 200
    assert "/props" not in [s.path for s in fake.seen]
    assert "tool_choice" not in json.loads(fake.seen[-1].body)
