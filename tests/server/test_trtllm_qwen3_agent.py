"""The six problems of TensorRT-LLM 1.3.0rc6 serving Qwen3 to the OpenClaw agent (see ``_trt.py``), each through the
gateway (profile ``trtllm@0``) in front of a simulated trtllm-serve 1.3.0rc6 (``_trt.TrtSim``, a test
double written from docs/backend-quirks.md §3). Each test asserts on what the client receives
and/or what the backend saw; the controls (profile ``openai``: nothing rewritten) reproduce the agent's
failures, so the tests can fail. Ends with the agent's 18-turn loop through the official SDK.

P0 ``developer`` dropped by the template; P1 ``<think>`` in ``content``, ``reasoning_content: ""``;
P2 a fresh chunk ``id``; P3 ``tool_calls: []``; P4 non-standard null fields; P5 history
``reasoning_content`` → 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast

import httpx2
import openai
import pytest
from _servers import Replayer
from _trt import ANSWER_CHAT, ANSWER_NO_TOOLS, ANSWER_RESULT, THINK_CHAT, THINK_RESULT, THINK_TOOL, TrtSim
from test_replay_fixtures import final_text, post

from oaishim.check import CheckOptions, Finding, check, exchange_from_bytes
from oaishim.profiles import _registry, get_profile
from oaishim.profiles._tool_choice import ToolChoiceSupport

PROFILE = "trtllm@0"  # TensorRT-LLM < 1.4, 1.3.0rc6 included
MODEL = "Qwen3-32B-NVFP4"
ALLOW_REASONING = CheckOptions(extensions_as_notes=True)
DEVELOPER = "你是 OpenClaw 助手，可以使用以下工具：get_weather、web_search。需要实时信息时必须调用工具。"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "获取指定城市的实时天气",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "搜索互联网",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
ASK_WEATHER: list[dict[str, Any]] = [
    {"role": "developer", "content": DEVELOPER},
    {"role": "user", "content": "查看北京天气"},
]
HELLO: list[dict[str, Any]] = [{"role": "user", "content": "你好"}]
# A profile that passes developer and history reasoning_content through (the agent talking to TRT directly, no gateway):
# llama.cpp's, without its tool_choice translation (it sends parallel_tool_calls: true, llama.cpp's default being false).
PASS_THROUGH = "llamacpp-as-sent"


@pytest.fixture(autouse=True)
def _pass_through_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    as_sent = replace(get_profile("llamacpp@b9174"), tool_choice=ToolChoiceSupport())
    monkeypatch.setattr(_registry, "PROFILES", {**_registry.PROFILES, PASS_THROUGH: as_sent})


NULL_EXTRAS = {"stop_reason", "mm_embedding_handle", "disaggregated_params", "avg_decoded_tokens_per_iter"}


@pytest.fixture
def trt(backend: Replayer) -> Iterator[TrtSim]:
    sim = TrtSim()
    backend.responder = sim
    yield sim
    backend.responder = None


def chat(gateways: Any, body: dict[str, Any], profile: str = PROFILE) -> tuple[int, dict[str, str], bytes]:
    return post(gateways(profile) + "/v1/chat/completions", {"model": MODEL, **body})


def events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a stream (``[DONE]`` left out)."""
    return [json.loads(e.data) for e in exchange_from_bytes(raw).events or [] if e.data != "[DONE]"]


def deltas(raw: bytes) -> list[dict[str, Any]]:
    return [c["delta"] for chunk in events(raw) for c in chunk.get("choices") or []]


def clean(raw: bytes, request: dict[str, Any], status: int, headers: dict[str, str]) -> list[Finding]:
    """Check the client's bytes; assert no error and that the only unknown field is the reasoning one.

    Returns the unknown-field notes (one per place the reasoning field appears)."""
    findings = check(exchange_from_bytes(raw, request=request, status=status, headers=headers), ALLOW_REASONING)
    assert [(f.rule, f.path, f.chunk, f.message) for f in findings if f.severity == "error"] == []
    unknown = [f for f in findings if f.rule == "unknown-field"]
    assert {f.path.rsplit(".", 1)[-1] for f in unknown} <= {"reasoning_content"}
    return unknown


def all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


# ---------------------------------------------------------------------------------------------------
# P0: developer silently dropped → the model never learns it has tools


def test_p0_developer_reaches_trt_as_the_leading_system_message(backend: Replayer, trt: TrtSim, gateways: Any) -> None:
    status, _, out = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS})
    assert status == 200
    upstream = backend.seen[-1].json()["messages"]
    assert [m["role"] for m in upstream] == ["system", "user"]
    assert upstream[0]["content"] == DEVELOPER
    assert trt.developer_seen == 0
    assert trt.rendered[-1][0] == {"role": "system", "content": DEVELOPER}
    # ... so the model knew its tools and called one
    assert json.loads(out)["choices"][0]["finish_reason"] == "tool_calls"

    # With a system message already there, developer text is merged into it: still one system message.
    messages = [{"role": "system", "content": "规则 A"}, *ASK_WEATHER]
    assert chat(gateways, {"messages": messages, "tools": TOOLS})[0] == 200
    upstream = backend.seen[-1].json()["messages"]
    assert [m["role"] for m in upstream] == ["system", "user"]
    assert upstream[0]["content"] == "规则 A\n\n" + DEVELOPER
    assert trt.developer_seen == 0


def test_p0_control_without_the_profile_trt_drops_developer_and_no_tool_is_called(
    backend: Replayer, trt: TrtSim, gateways: Any
) -> None:
    status, _, out = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS}, profile="openai")
    assert status == 200
    assert [m["role"] for m in backend.seen[-1].json()["messages"]] == ["developer", "user"]
    assert trt.developer_seen == 1
    assert trt.rendered[-1] == [{"role": "user", "content": "查看北京天气"}]
    choice = json.loads(out)["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == ANSWER_NO_TOOLS  # the agent's symptom: a plain-text refusal


# ---------------------------------------------------------------------------------------------------
# P1: <think> left in content, reasoning_content ""


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_p1_think_never_in_content_and_arrives_as_reasoning_content(trt: TrtSim, gateways: Any, stream: bool) -> None:
    status, _, out = chat(gateways, {"messages": HELLO, "stream": stream})
    assert status == 200
    assert b"<think>" in trt.sent[-1]  # the backend left it in content
    assert b"<think>" not in out and b"</think>" not in out
    content, reasoning = final_text(out, chat=True)
    assert content == ANSWER_CHAT
    assert reasoning.strip("\n") == THINK_CHAT
    if stream:
        parts = deltas(out)
        assert all("<think" not in (d.get("content") or "") for d in parts)
        assert all(d.get("reasoning_content") != "" for d in parts)  # never the backend's empty string
        assert any(d.get("reasoning_content") for d in parts)
    else:
        message = json.loads(out)["choices"][0]["message"]
        assert message["content"] == ANSWER_CHAT
        assert message["reasoning_content"].strip("\n") == THINK_CHAT


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_p1_tool_call_turn_keeps_its_reasoning_out_of_content(trt: TrtSim, gateways: Any, stream: bool) -> None:
    status, _, out = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS, "stream": stream})
    assert status == 200
    content, reasoning = final_text(out, chat=True)
    assert content == ""
    assert reasoning.strip("\n") == THINK_TOOL.format(what="查看北京天气", tool="get_weather")
    if not stream:
        assert json.loads(out)["choices"][0]["message"]["content"] is None  # only tool calls: null
    else:
        assert all(not d.get("content") for d in deltas(out))


# ---------------------------------------------------------------------------------------------------
# P2: a fresh id per chunk


def test_p2_one_id_and_one_created_on_every_chunk(trt: TrtSim, gateways: Any) -> None:
    status, _, out = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS, "stream": True})
    assert status == 200
    upstream = events(trt.sent[-1])
    assert len({c["id"] for c in upstream}) == len(upstream) > 10  # the backend: a new id per chunk
    assert len({c["created"] for c in upstream}) > 1
    chunks = events(out)
    assert len(chunks) > 3
    assert len({c["id"] for c in chunks}) == 1
    assert len({c["created"] for c in chunks}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    # ... and the tool call assembles: one call, with its id on its first delta only
    calls = [t for d in deltas(out) for t in d.get("tool_calls") or []]
    assert calls and calls[0]["id"].startswith("call_")
    assert all("id" not in t for t in calls[1:])
    assert json.loads("".join(t["function"].get("arguments", "") for t in calls)) == {"city": "北京"}


# ---------------------------------------------------------------------------------------------------
# P3: tool_calls: [] instead of absent


def test_p3_no_tool_calls_key_without_calls(trt: TrtSim, gateways: Any) -> None:
    status, _, out = chat(gateways, {"messages": HELLO})
    assert status == 200
    assert json.loads(trt.sent[-1])["choices"][0]["message"]["tool_calls"] == []  # the backend's
    message = json.loads(out)["choices"][0]["message"]
    assert "tool_calls" not in message

    # tools offered, but no call made: still no key
    status, _, out = chat(gateways, {"messages": HELLO, "tools": TOOLS})
    assert status == 200
    assert "tool_calls" not in json.loads(out)["choices"][0]["message"]

    status, _, out = chat(gateways, {"messages": HELLO, "tools": TOOLS, "stream": True})
    assert status == 200
    assert all("tool_calls" not in d for d in deltas(out))


# ---------------------------------------------------------------------------------------------------
# P4: non-standard null fields


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_p4_no_key_outside_the_official_schema(trt: TrtSim, gateways: Any, stream: bool) -> None:
    request = {"model": MODEL, "messages": HELLO, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    status, headers, out = chat(gateways, request)
    assert status == 200
    if not stream:
        upstream = json.loads(trt.sent[-1])
        assert set(upstream["choices"][0]) >= NULL_EXTRAS and "prompt_token_ids" in upstream  # the backend's
        assert not all_keys(json.loads(out)) & (NULL_EXTRAS | {"prompt_token_ids", "reasoning"})
        # control: the same checker on the backend's own body flags the extras
        raw_findings = check(exchange_from_bytes(trt.sent[-1], request=request, status=200), ALLOW_REASONING)
        flagged = {f.path.rsplit(".", 1)[-1] for f in raw_findings if f.rule == "unknown-field"}
        assert flagged >= NULL_EXTRAS | {"prompt_token_ids", "reasoning"}
    unknown = clean(out, request, status, headers)
    assert unknown  # the reasoning field, as a note


# ---------------------------------------------------------------------------------------------------
# P5: reasoning_content sent back in history → 400

HISTORY: list[dict[str, Any]] = [
    *ASK_WEATHER,
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "用户想查看北京天气，我应该调用 get_weather。",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "北京"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": '{"city": "北京", "weather": "晴", "temp_c": 21}'},
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_p5_history_reasoning_content_is_dropped_not_a_400(
    backend: Replayer, trt: TrtSim, gateways: Any, stream: bool
) -> None:
    status, _, out = chat(gateways, {"messages": HISTORY, "tools": TOOLS, "stream": stream})
    assert status == 200, out
    assert trt.rejected == []
    upstream = backend.seen[-1].json()["messages"]
    assert [m["role"] for m in upstream] == ["system", "user", "assistant", "tool"]
    assert not any("reasoning_content" in m or "reasoning" in m for m in upstream)
    assert upstream[2]["tool_calls"] == HISTORY[2]["tool_calls"] and upstream[3] == HISTORY[3]
    content, _ = final_text(out, chat=True)
    assert content == ANSWER_RESULT.format(result=HISTORY[3]["content"])


def test_p5_control_passed_through_trt_answers_400(backend: Replayer, trt: TrtSim, gateways: Any) -> None:
    # "llamacpp@b9174" sends history reasoning as reasoning_content and leaves developer alone: the
    # original setup, OpenClaw talking to TRT directly. ("openai" drops history reasoning too.)
    status, _, out = chat(gateways, {"messages": HISTORY, "tools": TOOLS}, profile=PASS_THROUGH)
    assert status == 400
    assert "reasoning_content" in backend.seen[-1].json()["messages"][2]
    assert len(trt.rejected) == 1 and "Extra inputs are not permitted" in trt.rejected[0]
    error = json.loads(out)["error"]  # the official error shape, whatever TRT's flat body was
    assert error["type"] == "invalid_request_error" and "reasoning_content" in error["message"]


def test_p5_the_newer_profile_sends_reasoning_which_1_3_0rc6_accepts(
    backend: Replayer, trt: TrtSim, gateways: Any
) -> None:
    """trtllm.py: "a wrong guess near the boundary costs no 400" — ``reasoning`` passes the 1.3.0rc6 union."""
    status, _, _ = chat(gateways, {"messages": HISTORY, "tools": TOOLS}, profile="trtllm@1.4")
    assert status == 200 and trt.rejected == []
    sent = backend.seen[-1].json()["messages"][2]
    assert sent["reasoning"] == HISTORY[2]["reasoning_content"] and "reasoning_content" not in sent


def test_fields_trt_forbids_are_dropped_and_reported(backend: Replayer, trt: TrtSim, gateways: Any) -> None:
    extra = {"store": True, "metadata": {"agent": "openclaw"}, "service_tier": "auto", "parallel_tool_calls": True}
    status, headers, _ = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS, **extra})
    assert status == 200 and trt.rejected == []
    assert not set(extra) & set(backend.seen[-1].json())
    assert set(headers["x-oaishim-dropped"].split(",")) == set(extra)
    # control: passed through, TRT 1.3.0rc6 rejects every one of them
    status, _, _ = chat(gateways, {"messages": ASK_WEATHER, "tools": TOOLS, **extra}, profile="openai")
    assert status == 400
    assert all(f"'{name}')" in trt.rejected[-1] for name in extra)


# ---------------------------------------------------------------------------------------------------
# The agent's 18-turn loop, through the official SDK


class Tee(httpx2.HTTPTransport):
    """A transport that keeps (request JSON, status, headers, raw body) of every exchange."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[tuple[dict[str, Any], int, dict[str, str], bytearray]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        raw = bytearray()
        self.exchanges.append((json.loads(request.content), response.status_code, dict(response.headers), raw))
        inner = response.stream

        class Kept(httpx2.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for piece in inner:  # type: ignore[union-attr]
                    raw.extend(piece)
                    yield piece

            def close(self) -> None:
                inner.close()  # type: ignore[union-attr]

        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=Kept(),
            request=request,
            extensions=response.extensions,
        )


def sdk(gateways: Any, profile: str = PROFILE) -> tuple[openai.OpenAI, Tee]:
    tee = Tee()
    client = openai.OpenAI(
        base_url=gateways(profile) + "/v1",
        api_key="x",
        max_retries=0,
        timeout=20,
        http_client=httpx2.Client(transport=tee),
    )
    return client, tee


def ask(k: int) -> tuple[str, str, dict[str, str], str]:
    """Task k of the loop: (user text, tool, its arguments, the tool's result)."""
    city = ("北京", "上海", "广州", "深圳", "杭州")[k % 5]
    if k % 2 == 0:
        return (
            f"查看{city}天气",
            "get_weather",
            {"city": city},
            json.dumps({"city": city, "weather": "晴", "temp_c": 20 + k}),
        )
    query = f"{city} 第{k}条新闻"
    return (
        f"搜索 {query}",
        "web_search",
        {"query": query},
        json.dumps({"results": [f"{query}：摘要"]}, ensure_ascii=False),
    )


def streamed_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """One streamed turn, accumulated the way an agent does; returns (assistant message, finish_reason)."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=cast(Any, messages),
        tools=cast(Any, TOOLS),
        stream=True,
        stream_options={"include_usage": True},
    )
    content, reasoning, finish = "", "", None
    calls: dict[int, dict[str, Any]] = {}
    ids, created = set(), set()
    for chunk in stream:
        ids.add(chunk.id)
        created.add(chunk.created)
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += getattr(delta, "reasoning_content", None) or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                entry["id"] = call.id or entry["id"]
                if call.function is not None:
                    entry["function"]["name"] += call.function.name or ""
                    entry["function"]["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert len(ids) == 1 and len(created) == 1  # P2, as the SDK sees it
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, finish


def plain_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    completion = client.chat.completions.create(model=MODEL, messages=cast(Any, messages), tools=cast(Any, TOOLS))
    choice = completion.choices[0]
    return choice.message.model_dump(exclude_none=True), choice.finish_reason  # as the SDK returned it


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_agent_loop_18_turns_through_the_sdk(backend: Replayer, trt: TrtSim, gateways: Any, stream: bool) -> None:
    client, tee = sdk(gateways)
    messages: list[dict[str, Any]] = [{"role": "developer", "content": DEVELOPER}]
    for turn in range(1, 19):
        k = (turn - 1) // 2
        text, tool, arguments, result = ask(k)
        if turn % 2 == 1:
            messages.append({"role": "user", "content": text})
        message, finish = (streamed_turn if stream else plain_turn)(client, messages)

        request, status, headers, raw = tee.exchanges[-1]
        assert status == 200, (turn, bytes(raw))
        clean(bytes(raw), request, status, headers)
        assert "<think>" not in (message.get("content") or ""), turn
        assert "<think>" not in message["reasoning_content"] and message["reasoning_content"].strip(), turn
        if turn % 2 == 1:
            assert finish == "tool_calls", turn
            assert message.get("content") is None, turn
            (call,) = message["tool_calls"]
            assert call["id"].startswith("call_") and call["type"] == "function"
            assert call["function"]["name"] == tool
            assert json.loads(call["function"]["arguments"]) == arguments
            assert message["reasoning_content"].strip("\n") == THINK_TOOL.format(
                what=f"查看{arguments['city']}天气" if tool == "get_weather" else f"搜索“{arguments['query']}”",
                tool=tool,
            )
            messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": result}]
        else:
            assert finish == "stop", turn
            assert "tool_calls" not in message
            assert message["content"] == ANSWER_RESULT.format(result=result)
            assert message["reasoning_content"].strip("\n") == THINK_RESULT
            messages.append(message)  # reasoning_content included, as the SDK returned it

    assert len(tee.exchanges) == len(trt.requests) == 18
    assert trt.rejected == [] and trt.developer_seen == 0
    sent = backend.seen[-1].json()["messages"]
    assert len(sent) == 1 + 9 * 3 + 8  # system, then per task: user, assistant call, tool (+ answers)
    assert sent[0] == {"role": "system", "content": DEVELOPER}
    assert not any("reasoning_content" in m for s in backend.seen for m in s.json()["messages"])
    assert sum(1 for m in tee.exchanges[-1][0]["messages"] if "reasoning_content" in m) == 17  # the client's


def test_agent_loop_control_breaks_without_the_profile(trt: TrtSim, gateways: Any) -> None:
    """Passed through as the client sent it: turn 1 never calls a tool (P0); a reply sent back with its
    reasoning_content gets TRT's 400 as an SDK BadRequestError (P5)."""
    client, _ = sdk(gateways, PASS_THROUGH)
    message, finish = plain_turn(
        client, [{"role": "developer", "content": DEVELOPER}, {"role": "user", "content": ask(0)[0]}]
    )
    assert finish == "stop" and "tool_calls" not in message and trt.developer_seen == 1
    with pytest.raises(openai.BadRequestError) as caught:
        plain_turn(client, HISTORY)
    assert "reasoning_content" in str(caught.value) and len(trt.rejected) == 1
