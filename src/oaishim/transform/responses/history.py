"""The conversation a stored response continues with (``previous_response_id``), as chat messages.

A stored record holds its whole conversation so that a continuation reads one row: the history it
was given, this turn's input messages, and the response's output turned back into an assistant
message. The output is read by the same mapper that reads input items, so an assistant turn the
client sends back by hand (``store: false``) and one the store replays become the same messages.

``instructions`` are not part of it: the official API applies a request's instructions to that
request only, so a continuation without its own runs without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oaishim.transform.responses._info import ResponsesRequestInfo, new_id
from oaishim.transform.responses._input import InputMapper

__all__ = ["output_messages", "turn_history"]


def output_messages(output: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as chat messages (reasoning, text and tool calls in one assistant
    message, as the model produced them). The reasoning text is read from the items' content, so no
    key is needed."""
    mapper = InputMapper(None, new_id)
    for i, item in enumerate(output):
        mapper.item(item, f"output[{i}]")
    mapper.end_turn()
    return mapper.messages


def turn_history(
    chat_messages: Sequence[dict[str, Any]],
    info: ResponsesRequestInfo,
    history: Sequence[dict[str, Any]],
    response: dict[str, Any],
) -> list[dict[str, Any]]:
    """``history`` + this turn's input (``chat_messages`` is the mapped request's ``messages``:
    instructions, then ``history``, then the input) + the response's output."""
    skip = (1 if info.instructions is not None else 0) + len(history)
    turn = [dict(m) for m in chat_messages[skip:]]
    return [*(dict(m) for m in history), *turn, *output_messages(response.get("output") or [])]
