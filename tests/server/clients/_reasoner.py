"""A reasoning model on TensorRT-LLM 1.3 started WITHOUT parsers — a TEST DOUBLE for the real clients' tests.

It is :class:`_trt.TrtSim` (trtllm-serve 1.3.0rc6: ``extra="forbid"`` on the request, history
``reasoning_content`` refused, ``developer`` dropped by the template, a fresh id per chunk,
``tool_calls: []``, null extras, flat 400 errors) with two differences:

* no ``--tool_parser`` either: the model's ``<tool_call>`` is left as text in ``content`` (beside the
  ``<think>`` block that no ``--reasoning_parser`` splits), with ``finish_reason: "stop"``;
* ``/v1/models`` answers with TensorRT-LLM's one card (T-26), so ``--profile auto`` can identify it;
* a "model" written for any client, not one agent's prompt. Its policy is keyed on the *ask*: the last
  user message that names an offered tool as ``use the NAME tool`` (case-insensitive). When tools are
  offered and there is no tool result after the ask, it calls that tool; once there is one, it answers
  with that result and calls nothing — agents without a loop limit (OpenClaw) send their own context as
  a later user message after a tool result, and a model keyed on "the last message is from the user"
  would call the tool forever. A named ``tool_choice`` calls that tool; a ``response_format`` with a JSON
  schema gets an object built from the schema. Arguments come from ``key=value`` words in the ask,
  else from the schema (first enum value, ``"Paris"``, ``1``, ``true``).

Every answer starts with a ``<think>`` block, so a client talking to it directly sees markup in its text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from _servers import Canned, Seen
from _trt import Reply, TrtSim, _text, think

REASONING = "The user wants {what}. I will {how}."
ANSWER_RESULT = "The tool returned: {result}"
ANSWER_HELLO = "Hello! How can I help you today?"
ASK = re.compile(r"use the ([A-Za-z0-9_-]+) tool", re.IGNORECASE)


def _value(name: str, schema: Any, ask: str) -> Any:
    given = re.search(rf"\b{re.escape(name)}=([^\s,;]+)", ask)
    if given:
        return given.group(1).rstrip(".")
    schema = schema if isinstance(schema, dict) else {}
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "anyOf" in schema:
        return _value(name, next((s for s in schema["anyOf"] if s.get("type") != "null"), {}), ask)
    if kind == "object":
        return _object(schema, ask)  # nested objects: every property
    if kind == "array":
        return [_value(name, schema.get("items"), ask)]
    return {"integer": 1, "number": 1, "boolean": True}.get(str(kind), "Paris")


def _object(schema: dict[str, Any], ask: str, every: bool = True) -> dict[str, Any]:
    """A value for every property (strict structured output needs them all), or for a tool call only the
    required ones and those the ask names (an agent's optional ``offset`` is not invented)."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return {
        name: _value(name, sub, ask)
        for name, sub in properties.items()
        if every or name in required or re.search(rf"\b{re.escape(name)}=", ask)
    }


class Reasoner(TrtSim):
    """trtllm-serve 1.3.0rc6 with neither a reasoning nor a tool parser (see the module docstring)."""

    def _answer(self, seen: Seen) -> Canned:
        if seen.method == "GET" and seen.path == "/v1/models":
            # T-26: one card, owned_by "tensorrt_llm" (what ``--profile auto`` identifies the backend by)
            card = {"id": "Qwen3-32B-NVFP4", "object": "model", "created": 1772100000, "owned_by": "tensorrt_llm"}
            return Canned(json.dumps({"object": "list", "data": [card]}).encode())
        return super()._answer(seen)

    def render(self, messages: list[dict[str, Any]]) -> list[dict[str, str]]:
        rendered = super().render(messages)
        # the tool results and the ask are read from the request itself (render keeps text only)
        self._messages = messages
        return rendered

    def generate(self, body: dict[str, Any], messages: list[dict[str, str]]) -> Reply:
        history = self._messages
        tools = {
            t["function"]["name"]: t["function"]
            for t in body.get("tools") or []
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        }
        choice = body.get("tool_choice")
        ask_at, ask, wanted = -1, "", None
        for i, message in enumerate(history):
            if message.get("role") == "user":
                found = [n for n in ASK.findall(_text(message.get("content"))) if n in tools]
                if found:
                    ask_at, ask, wanted = i, _text(message.get("content")), found[0]
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            ask = ask or _text(history[-1].get("content")) if history else ""
        results = [_text(m.get("content")) for m in history[ask_at + 1 :] if m.get("role") == "tool"]
        if wanted in tools and choice != "none" and not results:
            spec = tools[wanted]
            arguments = json.dumps(_object(spec.get("parameters") or {}, ask, every=False), ensure_ascii=False)
            call = f'<tool_call>\n{{"name": "{wanted}", "arguments": {arguments}}}\n</tool_call>'
            return Reply(think(REASONING.format(what=f"the {wanted} tool", how=f"call {wanted}")) + call)
        earlier = [_text(m.get("content")) for m in history if m.get("role") == "tool"]
        format_ = body.get("response_format") or {}
        if format_.get("type") == "json_schema":
            schema = (format_.get("json_schema") or {}).get("schema") or {}
            answer = json.dumps(_object(schema, ask), ensure_ascii=False)
            return Reply(think(REASONING.format(what="structured data", how="fill in the schema")) + answer)
        if earlier:
            answer = ANSWER_RESULT.format(result=earlier[-1])
            return Reply(think(REASONING.format(what="the tool's result", how="report it")) + answer)
        return Reply(think(REASONING.format(what="to talk", how="greet them")) + ANSWER_HELLO)
