"""Plain (non-stream) bodies: any backend's chat, completion or embeddings answer as the official one.

The official object is built fresh from what it needs (so vendor keys never leak), following
openai-wire-format.md §3–4: a message always has ``role``, ``content`` and ``refusal``;
``tool_calls`` only when there are calls, and then ``content: null`` unless there was text;
reasoning only under the name the client asked for and never as ``""``; ``logprobs`` key always
present; usage with the official keys. ``--keep-extensions`` copies the backend's own keys back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oaishim.transform import _parts
from oaishim.transform.context import ResponseContext
from oaishim.transform.pieces import CallArgs, CallStart, Piece, join_text
from oaishim.transform.repair import repair_text


def _envelope(
    body: Mapping[str, Any],
    ctx: ResponseContext,
    obj: str,
    build: Callable[[int, Mapping[str, Any], ResponseContext], dict[str, Any]],
) -> dict[str, Any]:
    """The response object around its choices: the gateway's id, created and model; official usage."""
    choices = [c for c in body.get("choices") or [] if isinstance(c, Mapping)]
    out: dict[str, Any] = {
        "id": ctx.response_id,
        "object": obj,
        "created": ctx.created,
        "model": ctx.model,
        "choices": [build(i, c, ctx) for i, c in enumerate(choices)],
    }
    usage = _parts.usage(body.get("usage"))
    if usage is not None:
        out["usage"] = usage
    out.update(_parts.extensions(body, out, ctx))
    return out


def normalize_chat(body: Mapping[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    return _envelope(body, ctx, "chat.completion", _chat_choice)


def _chat_choice(i: int, choice: Mapping[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    upstream = _parts.mapping(choice.get("message"))
    calls = [_tool_call(c) for c in upstream.get("tool_calls") or [] if isinstance(c, Mapping)]
    text = upstream.get("content")
    reasoning = _parts.reasoning_text(upstream)
    finish = choice.get("finish_reason")
    if isinstance(text, str) and text and ctx.repair is not None and ctx.repair.active:
        pieces, stopped = repair_text(text, ctx.repair)
        text = join_text(pieces, "content")
        reasoning += join_text(pieces, "reasoning")
        calls += _repaired_calls(pieces)
        finish = "stop" if stopped else finish
    refusal = upstream.get("refusal") if isinstance(upstream.get("refusal"), str) else None
    content = text if isinstance(text, str) and (text or not calls) else None
    if content is None and not calls and refusal is None:
        content = ""  # a turn with no text and no call still says so with an empty string
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if calls:
        message["tool_calls"] = calls
    message.update(_parts.reasoning_fields(reasoning, ctx))
    message.update(_parts.extensions(upstream, message, ctx))
    logprobs = None
    if ctx.logprobs:
        logprobs = {"content": _parts.chat_logprob_entries(choice.get("logprobs"), ctx), "refusal": None}
    result: dict[str, Any] = {
        "index": i,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": _parts.finish_reason(finish, bool(calls), ctx),
    }
    result.update(_parts.extensions(choice, result, ctx))
    return result


def _repaired_calls(pieces: list[Piece]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for piece in pieces:
        if isinstance(piece, CallStart):
            calls[piece.index] = {"id": piece.id, "type": "function", "function": {"name": piece.name, "arguments": ""}}
        elif isinstance(piece, CallArgs) and piece.index in calls:
            calls[piece.index]["function"]["arguments"] += piece.text
    return list(calls.values())


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = _parts.mapping(call.get("function"))
    return {
        "id": _parts.call_id(call.get("id")),
        "type": "function",
        "function": {"name": str(fn.get("name") or ""), "arguments": _parts.arguments_text(fn.get("arguments"))},
    }


def normalize_completion(body: Mapping[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    return _envelope(body, ctx, "text_completion", _text_choice)


def _text_choice(i: int, choice: Mapping[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    finish = choice.get("finish_reason")
    text = choice.get("text") if isinstance(choice.get("text"), str) else ""
    if text and ctx.repair is not None and ctx.repair.active:  # stops, special tokens: as the stream does
        pieces, stopped = repair_text(text, ctx.repair)
        text = join_text(pieces, "content")
        finish = "stop" if stopped else finish
    result: dict[str, Any] = {
        "index": i,
        "text": text,
        "logprobs": _parts.legacy_logprobs(choice.get("logprobs"), ctx.top_logprobs) if ctx.logprobs else None,
        "finish_reason": finish if finish in ("stop", "length", "content_filter") else "stop",
    }
    result.update(_parts.extensions(choice, result, ctx))
    return result


def normalize_embeddings(body: Mapping[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    data = [d for d in body.get("data") or [] if isinstance(d, Mapping)]
    usage = _parts.mapping(body.get("usage"))
    prompt = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else 0
    out: dict[str, Any] = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": d.get("embedding")} for i, d in enumerate(data)],
        "model": ctx.model,
        "usage": {"prompt_tokens": prompt, "total_tokens": usage.get("total_tokens", prompt)},
    }
    out.update(_parts.extensions(body, out, ctx))
    return out
