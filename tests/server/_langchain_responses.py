"""langchain-openai's ChatOpenAI on the Responses API (``use_responses_api=True``), run by
test_responses_clients.py with the clients' venv python (scripts/install-clients). Reads the config
JSON {base_url, api_key, model, system, weather, hello} on stdin; prints what LangChain returned."""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

config = json.load(sys.stdin)
seen: list[str] = []


@tool
def get_weather(city: str) -> str:
    """查询城市天气"""
    seen.append(city)
    return f"{city}：晴，25°C"


def one(llm: Any, messages: list[BaseMessage], stream: bool) -> AIMessage:
    if not stream:
        out: AIMessage = llm.invoke(messages)
        return out
    total: AIMessageChunk | None = None
    for chunk in llm.stream(messages):
        total = chunk if total is None else total + chunk
    assert total is not None
    return total


def agent(stream: bool) -> dict[str, Any]:
    llm = ChatOpenAI(
        base_url=config["base_url"], api_key=config["api_key"], model=config["model"], use_responses_api=True
    )
    tools = llm.bind_tools([get_weather])
    messages: list[BaseMessage] = [SystemMessage(config["system"]), HumanMessage(config["weather"])]
    first = one(tools, messages, stream)
    messages.append(first)
    for call in first.tool_calls:
        messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    second = one(tools, messages, stream)
    hello = one(llm, [HumanMessage(config["hello"])], stream)
    return {
        "calls": [(c["name"], c["args"]) for c in first.tool_calls],
        "answer": second.text,
        "hello": hello.text,
        "response_id": (hello.response_metadata or {}).get("id"),
    }


print(json.dumps({"plain": agent(False), "stream": agent(True), "tool_runs": seen}, ensure_ascii=False))
