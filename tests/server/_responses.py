"""Helpers shared by the Responses endpoint tests: the agent's tools in Responses form, requests to a
gateway (in process or over HTTP), and reading a Responses stream the way a client does."""

from __future__ import annotations

import json
from typing import Any

from _fake import call

from oaishim.check import Finding, check, exchange_from_bytes

MODEL = "qwen3"
INSTRUCTIONS = "你是 OpenClaw 助手，可以使用以下工具：get_weather、web_search。需要实时信息时必须调用工具。"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "查询城市天气",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "type": "function",
        "name": "web_search",
        "description": "搜索互联网",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
]
CITIES = ("北京", "上海", "广州", "深圳", "杭州", "成都", "Paris", "London", "Tokyo", "北京")


def bearer(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


def post(url: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, str], bytes]:
    return call(url + "/v1/responses", "POST", body, bearer(key))


def get(url: str, target: str, key: str | None = None, method: str = "GET") -> tuple[int, Any]:
    status, _, raw = call(url + target, method, None, bearer(key))
    return status, json.loads(raw)


def events(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Responses stream, in order (each its JSON data)."""
    exchange = exchange_from_bytes(raw)
    assert exchange.events is not None, raw[:200]
    return [json.loads(e.data) for e in exchange.events]


def final(raw: bytes) -> dict[str, Any]:
    """The response of a stream's terminal event."""
    last = events(raw)[-1]
    assert last["type"] in ("response.completed", "response.incomplete", "response.failed"), last["type"]
    response: dict[str, Any] = last["response"]
    return response


def errors(raw: bytes, request: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> list[Any]:
    """What ``oaishim check`` finds wrong (errors only) in one Responses exchange."""
    findings: list[Finding] = check(
        exchange_from_bytes(raw, request=request, status=status, headers=headers, path="/v1/responses")
    )
    return [(f.rule, f.path, f.chunk, f.message) for f in findings if f.severity == "error"]


def calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "function_call"]


def reasoning(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "reasoning"]


def text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def weather_output(call_id: str, city: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": f"{city}：晴，25°C"}
