"""Messages in the GenAI conventions' shape, for spans that record message text (when opted in).

``gen_ai.system_instructions``, ``gen_ai.input.messages`` and ``gen_ai.output.messages`` are JSON:
messages of a ``role`` and ``parts`` (``text``, ``tool_call``, ``tool_call_response``,
``reasoning``), the output's with their ``finish_reason``. Made from what the backend was sent
(the request as the gateway rewrote it) and the answer the client got. Also the finish reasons of
any answer, recorded whether or not text is.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["finish_reasons", "inputs", "outputs"]


def _text(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append({"type": "text", "content": part["text"]})
        elif isinstance(part, dict) and isinstance(part.get("type"), str):
            parts.append({"type": part["type"]})  # an image or audio part: its kind, not its data
    return parts


def _calls(calls: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
    return out


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "tool":
        parts = [{"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}]
    else:
        parts = _text(message.get("content"))
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts.insert(0, {"type": "reasoning", "content": reasoning})
        parts += _calls(message.get("tool_calls"))
    return {"role": role, "parts": parts}


def inputs(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The system instructions and the input messages of a request body (chat or completions)."""
    chat = body.get("messages")
    if isinstance(chat, list):
        system = [m for m in chat if isinstance(m, dict) and m.get("role") in ("system", "developer")]
        rest = [_message(m) for m in chat if isinstance(m, dict) and m.get("role") not in ("system", "developer")]
        instructions = [p for m in system for p in _text(m.get("content"))]
        return (orjson.dumps(instructions).decode() if instructions else None), orjson.dumps(rest).decode()
    prompt = body.get("prompt")
    if isinstance(prompt, str | list):
        prompts = [prompt] if isinstance(prompt, str) else [p for p in prompt if isinstance(p, str)]
        return None, orjson.dumps([{"role": "user", "parts": _text(p)} for p in prompts]).decode()
    return None, None


def _responses_output(body: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for item in body.get("output") or ():
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            parts += [
                {"type": "text", "content": c.get("text", "")} for c in item.get("content") or () if isinstance(c, dict)
            ]
        elif kind == "function_call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
        elif kind == "reasoning":
            text = "".join(s.get("text", "") for s in item.get("summary") or () if isinstance(s, dict))
            parts.append({"type": "reasoning", "content": text})
    reasons = finish_reasons(body)
    return [{"role": "assistant", "parts": parts, "finish_reason": reasons[0] if reasons else None}]


def outputs(body: dict[str, Any]) -> str | None:
    """The output messages of an answer (chat, completions or Responses); None for embeddings."""
    if body.get("object") == "response":
        return orjson.dumps(_responses_output(body)).decode()
    choices = body.get("choices")
    if not isinstance(choices, list):
        return None
    out = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        made = (
            _message(message)
            if isinstance(message, dict)
            else {"role": "assistant", "parts": _text(choice.get("text"))}
        )
        out.append({**made, "finish_reason": choice.get("finish_reason")})
    return orjson.dumps(out).decode()


# A Responses turn's status as a chat finish reason
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def finish_reasons(body: dict[str, Any]) -> list[str]:
    """Why generation stopped, per choice (a Responses turn: from its status and output)."""
    if body.get("object") == "response":
        status = body.get("status")
        if status == "incomplete":
            details = body.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            return [_INCOMPLETE.get(reason or "", reason or "incomplete")]
        if status == "completed":
            calls = any(isinstance(i, dict) and i.get("type") == "function_call" for i in body.get("output") or ())
            return ["tool_calls" if calls else "stop"]
        return [status] if isinstance(status, str) else []
    choices = body.get("choices")
    if not isinstance(choices, list):
        return []
    return [c["finish_reason"] for c in choices if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)]
