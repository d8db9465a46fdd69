"""Plain (non-stream) bodies: any backend's chat, completion or embeddings answer as the official one.

The official object is built fresh from what it needs (so vendor keys never leak), following
docs/wire-format.md §3–4: a message always has ``role``, ``content`` and ``refusal``;
``tool_calls`` only when there are calls, and then ``content: null`` unless there was text;
reasoning only under the name the client asked for and never as ``""``; ``logprobs`` key always
present; usage with the official keys. ``--keep-extensions`` copies the backend's own keys back.

A body the gateway cannot read (a field of the answer with the wrong JSON type, see ``_parts``)
raises an OpenAIError 502; so does any fault of the gateway's own while rewriting, logged with the
response id, so the client gets an official error and never a bare 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from oaishim.transform import _parts, output_format
from oaishim.transform.context import ResponseContext
from oaishim.transform.ids import call_id
from oaishim.transform.pieces import CallArgs, CallStart, Piece, join_text
from oaishim.transform.repair import repair_text
from oaishim.wire.errors import OpenAIError

log: Final = logging.getLogger("oaishim.response")
Build = Callable[[dict[str, Any], ResponseContext], dict[str, Any]]


def _guarded(build: Build, body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    try:
        return build(body, ctx)
    except OpenAIError:
        raise
    except Exception:
        log.exception("response %s (model %s): failed to rewrite the upstream body", ctx.response_id, ctx.model)
        raise OpenAIError(
            502, f"the gateway failed to rewrite the upstream's answer ({ctx.response_id})", "server_error"
        ) from None


def _objects(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``body[key]``, an array of objects (absent or null: none)."""
    items = body.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise _parts.unreadable(key, items, "an array")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _parts.unreadable(f"{key}[{i}]", item, "an object")
    return items


def _envelope(
    body: dict[str, Any],
    ctx: ResponseContext,
    obj: str,
    build: Callable[[int, dict[str, Any], ResponseContext], dict[str, Any]],
) -> dict[str, Any]:
    """The response object around its choices: the gateway's id, created and model; official usage."""
    choices = _objects(body, "choices")
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


def normalize_chat(body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    return _guarded(lambda b, c: _envelope(b, c, "chat.completion", _chat_choice), body, ctx)


def _chat_choice(i: int, choice: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    message_in = choice.get("message")
    if message_in is not None and not isinstance(message_in, dict):
        raise _parts.unreadable(f"choices[{i}].message", message_in, "an object")
    upstream = _parts.mapping(message_in)
    calls = [_tool_call(c) for c in _objects(upstream, "tool_calls")]
    text = _parts.text_or_none(upstream.get("content"), "message.content", i)
    reasoning = _parts.reasoning_text(upstream)
    finish = _parts.text_or_none(choice.get("finish_reason"), "finish_reason", i)
    if isinstance(text, str) and text and ctx.repair is not None and ctx.repair.active:
        pieces, stopped = repair_text(text, ctx.repair, ctx.repairs)
        text = join_text(pieces, "content")
        reasoning += join_text(pieces, "reasoning")
        calls += _repaired_calls(pieces)
        finish = "stop" if stopped else finish
    if ctx.forced_tool is not None and any(c["function"]["name"] != ctx.forced_tool for c in calls):
        calls = [c for c in calls if c["function"]["name"] == ctx.forced_tool]  # a named choice: its calls only
        ctx.repairs.add("unnamed_calls_dropped")
    if ctx.one_tool_call and len(calls) > 1:  # parallel_tool_calls false: the first call only
        calls = calls[:1]
        ctx.repairs.add("parallel_calls_dropped")
    bad = [k for k, c in enumerate(calls) if not _parts.is_json(c["function"]["arguments"])]
    if bad and finish != "length":  # reported (header, log line), never rewritten
        ctx.violations.append((i, _parts.ARGS_INVALID, f"tool call(s) {bad}: arguments are not valid JSON"))
    if ctx.output_format is not None:  # response_format: JSON filed as reasoning moves; the answer is checked
        text, reasoning = output_format.settle(i, text, reasoning, bool(calls), finish, ctx)
    refusal = _parts.text_or_none(upstream.get("refusal"), "message.refusal", i)
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


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if fn is not None and not isinstance(fn, dict):
        raise _parts.unreadable("a tool call's function", fn, "an object")
    fn = _parts.mapping(fn)
    name = _parts.text_or_none(fn.get("name"), "a tool call's name") or ""
    return {
        "id": call_id(call.get("id")),
        "type": "function",
        "function": {"name": name, "arguments": _parts.arguments_text(fn.get("arguments"))},
    }


def normalize_completion(body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    return _guarded(lambda b, c: _envelope(b, c, "text_completion", _text_choice), body, ctx)


def _text_choice(i: int, choice: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    finish = _parts.text_or_none(choice.get("finish_reason"), "finish_reason", i)
    text = _parts.text_or_none(choice.get("text"), "text", i) or ""
    if text and ctx.repair is not None and ctx.repair.active:  # stops, special tokens: as the stream does
        pieces, stopped = repair_text(text, ctx.repair, ctx.repairs)
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


def normalize_embeddings(body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    return _guarded(_embeddings, body, ctx)


def _embeddings(body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    data = _objects(body, "data")
    usage = _parts.mapping(body.get("usage"))
    prompt = _parts.count(usage.get("prompt_tokens")) or 0
    total = _parts.count(usage.get("total_tokens"))
    out: dict[str, Any] = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": d.get("embedding")} for i, d in enumerate(data)],
        "model": ctx.model,
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt if total is None else total},
    }
    out.update(_parts.extensions(body, out, ctx))
    return out
