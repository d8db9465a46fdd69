"""Responses API: the state of one streamed item and its parts, and what a closed item must repeat.

Tables name, for each delta event, where it belongs (a content part by ``content_index``, a reasoning
summary part by ``summary_index``, or the item itself) and which ``*.done`` event closes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from oaishim.check._findings import Sink

# delta type -> (container, its done type, the done event's text key)
PART_DELTAS = {
    "response.output_text.delta": ("content", "response.output_text.done", "text"),
    "response.refusal.delta": ("content", "response.refusal.done", "refusal"),
    "response.reasoning_text.delta": ("content", "response.reasoning_text.done", "text"),
    "response.reasoning_summary_text.delta": ("summary", "response.reasoning_summary_text.done", "text"),
}
PART_DONES = {done: (container, key) for container, done, key in PART_DELTAS.values()}
# the done event each part type must have before its part closes, and the part's text key
PART_TEXT: Final = {
    "output_text": ("response.output_text.done", "text"),
    "refusal": ("response.refusal.done", "refusal"),
    "reasoning_text": ("response.reasoning_text.done", "text"),
    "summary_text": ("response.reasoning_summary_text.done", "text"),
}
ITEM_DELTAS = {
    "response.function_call_arguments.delta": ("response.function_call_arguments.done", "arguments"),
    "response.custom_tool_call_input.delta": ("response.custom_tool_call_input.done", "input"),
    "response.mcp_call_arguments.delta": ("response.mcp_call_arguments.done", "arguments"),
    "response.code_interpreter_call_code.delta": ("response.code_interpreter_call_code.done", "code"),
}
ITEM_DONES = dict(ITEM_DELTAS.values())
PART_OPEN = {"response.content_part.added": "content", "response.reasoning_summary_part.added": "summary"}
PART_CLOSE = {"response.content_part.done": "content", "response.reasoning_summary_part.done": "summary"}
INDEX_KEY = {"content": "content_index", "summary": "summary_index"}
# A streamed item compared with its copy in the terminal event's output, except these keys: the real
# API re-encrypts reasoning for the final object (reasoning-summary-then-function-call.sse).
_UNCOMPARED: Final = frozenset({"encrypted_content"})


@dataclass(slots=True)
class Part:
    index: int
    type: str | None
    opened_at: int
    deltas: list[str] = field(default_factory=list)
    text: str | None = None  # from its *.done event
    done_at: int | None = None
    overlap_reported: bool = False


@dataclass(slots=True)
class Item:
    index: int
    id: str | None
    type: str | None
    opened_at: int
    parts: dict[str, dict[int, Part]] = field(default_factory=lambda: {"content": {}, "summary": {}})
    deltas: list[str] = field(default_factory=list)  # function-call arguments, custom-tool input, …
    text: str | None = None  # from the item's own *.done (arguments, input)
    done: Mapping[str, Any] | None = None
    done_at: int | None = None
    overlap_reported: bool = False
    id_changed: bool = False  # output_item.done carried another id (reported there)


def done_content(n: int, item: Item, item_map: Mapping[str, Any], sink: Sink) -> None:
    """The texts of a closed item (its content, summary, arguments) against what its events streamed."""
    for container, listed in (("content", item_map.get("content")), ("summary", item_map.get("summary"))):
        if not isinstance(listed, list):
            continue
        for i, entry in enumerate(listed):
            part = item.parts[container].get(i)
            if part is None or not isinstance(entry, dict):
                continue
            key = PART_TEXT.get(part.type or "", (None, "text"))[1]
            streamed = part.text if part.text is not None else "".join(part.deltas)
            if entry.get(key) != streamed:
                sink.add(
                    "responses.done-text",
                    f"$.item.{container}[{i}].{key}",
                    "the item's text differs from its stream",
                    chunk=n,
                )
    for key in ("arguments", "input", "code"):
        value = item_map.get(key)
        if isinstance(value, str) and (item.text is not None or item.deltas):
            streamed = item.text if item.text is not None else "".join(item.deltas)
            if value != streamed:
                sink.add("responses.done-text", f"$.item.{key}", f"the item's {key} differs from its stream", chunk=n)


def final_output(n: int, items: list[Item], output: Any, sink: Sink) -> None:
    """The terminal event's ``output`` against the streamed items: every item closed, the same items."""
    for item in items:
        if item.done is None:
            sink.add("responses.item-close", "$", f"item {item.index} ({item.id}) never got output_item.done", chunk=n)
    if not isinstance(output, list):
        return
    if len(output) != len(items):
        sink.add(
            "responses.output-mismatch",
            "$.response.output",
            f"{len(output)} item(s) in the final output, {len(items)} streamed",
            chunk=n,
        )
    for i, (final, item) in enumerate(zip(output, items, strict=False)):
        streamed = item.done
        if not isinstance(final, dict) or streamed is None or item.id_changed:
            continue
        keys = sorted(k for k in (final.keys() | streamed.keys()) - _UNCOMPARED if final.get(k) != streamed.get(k))
        if keys:
            sink.add(
                "responses.output-mismatch",
                f"$.response.output[{i}]",
                f"differs from its output_item.done in {', '.join(keys)}",
                chunk=n,
            )
