"""Rule d: the final message of each choice (a plain body, or a stream once accumulated).

These rules look at what a client ends up holding, so streams and plain bodies are judged alike:
``tool_calls`` absent rather than ``[]``/``null`` (agent loops test ``if msg.tool_calls is not
None``), ``content: null`` beside tool calls only, and a finish reason that tells the truth about
the calls (docs/backend-quirks.md §7 items 1 and 16).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.check._findings import Sink, jpath


def _tool_choice_mode(request: Mapping[str, Any] | None) -> str | None:
    """``auto`` / ``required`` / ``none`` / ``named``, or None when unknown."""
    if request is None:
        return None
    choice = request.get("tool_choice")
    if choice is None:
        return "auto" if request.get("tools") else "none"
    if isinstance(choice, str):
        return choice
    return "named"


def check_chat_choices(
    completion: Mapping[str, Any],
    request: Mapping[str, Any] | None,
    sink: Sink,
    *,
    chunk: int | None = None,
    check_ids: bool = True,
) -> None:
    choices = completion.get("choices")
    if not isinstance(choices, list):
        return
    mode = _tool_choice_mode(request)
    seen_ids: set[str] = set()
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", i) if isinstance(choice.get("index"), int) else i
        message = choice.get("message")
        if not isinstance(message, dict):
            continue
        base = jpath("choices", i, "message")
        calls = message.get("tool_calls", ...)
        if calls is None or calls == []:
            sink.add(
                "message.tool-calls-empty",
                base + ".tool_calls",
                f"choice {index}: tool_calls is {'null' if calls is None else '[]'}; the official API omits the key",
                chunk=chunk,
            )
        has_calls = isinstance(calls, list) and len(calls) > 0
        if has_calls:
            if message.get("content") == "":
                sink.add(
                    "message.content-null",
                    base + ".content",
                    f'choice {index}: content is "" in a message holding only tool calls; expected null',
                    chunk=chunk,
                )
            if check_ids:
                _check_call_ids(calls, base + ".tool_calls", seen_ids, sink, chunk)
        finish = choice.get("finish_reason")
        fpath = jpath("choices", i, "finish_reason")
        if finish == "tool_calls" and not has_calls:
            sink.add(
                "message.finish-reason",
                fpath,
                f"choice {index}: finish_reason tool_calls without a tool call",
                chunk=chunk,
            )
        elif has_calls and mode == "auto" and finish not in ("tool_calls", "length", None):
            sink.add(
                "message.finish-reason",
                fpath,
                f"choice {index}: tool calls made under tool_choice auto, but finish_reason is {finish!r}",
                chunk=chunk,
            )


def _check_call_ids(calls: list[Any], path: str, seen: set[str], sink: Sink, chunk: int | None) -> None:
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            sink.add("tool-call.id", f"{path}[{j}].id", "tool-call id is missing or empty", chunk=chunk)
        elif call_id in seen:
            sink.add("tool-call.id", f"{path}[{j}].id", f"tool-call id {call_id!r} repeated", chunk=chunk)
        else:
            seen.add(call_id)
            if not call_id.startswith("call_"):
                sink.add(
                    "id.prefix", f"{path}[{j}].id", f"tool-call id {call_id!r} lacks the call_ prefix", chunk=chunk
                )
