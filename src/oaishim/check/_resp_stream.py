"""Responses API: the grammar of one stream, as the official API sends it and strict clients need it.

``response.created`` then ``response.in_progress``; then items, one at a time: ``output_item.added``
(``output_index`` = its position), its content parts (``content_part.added`` … ``content_part.done``,
``content_index`` = the part's position; reasoning summaries likewise with ``summary_index``), the
deltas of each part and a ``*.done`` whose text is their concatenation, ``output_item.done``; then
exactly one terminal event, last, whose ``response.output`` holds the ``output_item.done`` items.
``sequence_number`` counts every event from 0. openai-python's ``responses.stream()`` indexes its
snapshot by ``output_index``/``content_index``, and Codex drops a turn whose delta names an item it
has not seen opened and pairs ``output_item.done`` items with ``response.completed.output`` by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oaishim.check._findings import Sink
from oaishim.check._resp_items import (
    INDEX_KEY,
    ITEM_DELTAS,
    ITEM_DONES,
    PART_CLOSE,
    PART_DELTAS,
    PART_DONES,
    PART_OPEN,
    PART_TEXT,
    Item,
    Part,
    done_content,
    final_output,
)
from oaishim.check._resp_objects import TERMINAL, check_item_ids, check_response


@dataclass(slots=True)
class ResponsesStream:
    """One response's events in order: :meth:`feed` each decoded event, then :meth:`finish`."""

    sink: Sink
    count: int = 0
    next_seq: int = 0
    response_id: str | None = None
    items: list[Item] = field(default_factory=list)
    by_id: dict[str, Item] = field(default_factory=dict)
    call_ids: dict[str, str] = field(default_factory=dict)
    terminal_at: int | None = None
    pending_error: int | None = None  # an error event waiting for its response.failed
    orphaned: bool = False  # a delta was refused: joined texts cannot be compared any more

    def lost(self) -> None:
        """An event that could not be decoded (rule json): it took a sequence number, and what it said
        is unknown, so joined texts and missing done events can no longer be judged."""
        self.count += 1
        self.next_seq += 1
        self.orphaned = True

    def feed(self, n: int, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        position = self.count
        self.count += 1
        self._sequence(n, event.get("sequence_number"))
        if self.pending_error is not None and kind != "response.failed":
            self._error_unfollowed()
        if self.terminal_at is not None:
            self.sink.add(
                "responses.terminal", "$", f"an event after the terminal event (chunk {self.terminal_at})", chunk=n
            )
        if not isinstance(kind, str):
            return
        self._lifecycle(n, position, kind)
        response = event.get("response")
        if isinstance(response, dict):
            self._response(n, kind, response)
        if kind == "error":
            self.pending_error = n
        elif kind == "response.output_item.added":
            self._item_added(n, event)
        elif kind == "response.output_item.done":
            self._item_done(n, event)
        elif kind in PART_OPEN:
            self._part_added(n, PART_OPEN[kind], event)
        elif kind in PART_CLOSE:
            self._part_done(n, PART_CLOSE[kind], event)
        elif kind in PART_DELTAS or kind in PART_DONES:
            container = PART_DELTAS[kind][0] if kind in PART_DELTAS else PART_DONES[kind][0]
            part = self._part(n, container, event)
            if part is not None:
                self._text(n, kind, part, event)
        elif kind in ITEM_DELTAS or kind in ITEM_DONES:
            item = self._item(n, event)
            if item is not None:
                self._text(n, kind, item, event)
        elif "item_id" in event:
            self._item(n, event)

    def _sequence(self, n: int, seq: Any) -> None:
        if not isinstance(seq, int):
            return  # rule a: sequence_number is required
        if seq != self.next_seq:
            self.sink.add(
                "responses.sequence",
                "$.sequence_number",
                f"sequence_number {seq}, expected {self.next_seq}",
                chunk=n,
            )
        self.next_seq = seq + 1

    def _lifecycle(self, n: int, position: int, kind: str) -> None:
        want = {0: "response.created", 1: "response.in_progress"}.get(position)
        if want is not None and kind != want and not (position == 1 and (kind == "error" or kind in TERMINAL)):
            self.sink.add("responses.lifecycle", "$.type", f"event {position} is {kind}, expected {want}", chunk=n)
        elif want is None and kind in ("response.created", "response.in_progress"):
            self.sink.add("responses.lifecycle", "$.type", f"{kind} again at event {position}", chunk=n)
        if kind in TERMINAL and self.terminal_at is None:
            self.terminal_at = n
            self.pending_error = None

    def _response(self, n: int, kind: str, response: Mapping[str, Any]) -> None:
        rid = response.get("id")
        if self.response_id is None and isinstance(rid, str):
            self.response_id = rid
        elif rid != self.response_id:
            self.sink.add(
                "responses.id",
                "$.response.id",
                f"response id {rid!r} differs from the first event's {self.response_id!r}",
                chunk=n,
            )
        check_response(response, "$.response", self.sink, event=kind, chunk=n, check_items=False)
        if kind in TERMINAL:
            final_output(n, self.items, response.get("output"), self.sink)

    def _error_unfollowed(self) -> None:
        n, self.pending_error = self.pending_error, None
        self.sink.add("responses.error-event", "$", "an error event not followed by response.failed", chunk=n)

    def _item_added(self, n: int, event: Mapping[str, Any]) -> None:
        raw = event.get("item")
        item_map = raw if isinstance(raw, dict) else {}
        for prev in self.items:
            if prev.done_at is None and not prev.overlap_reported:
                self.sink.add(
                    "responses.item-close",
                    "$",
                    f"item {len(self.items)} opens while item {prev.index} ({prev.id}) is still open",
                    chunk=n,
                )
                prev.overlap_reported = True
        index = event.get("output_index")
        if isinstance(index, int) and index != len(self.items):
            self.sink.add(
                "responses.output-index",
                "$.output_index",
                f"output_index {index} for the item at position {len(self.items)}",
                chunk=n,
            )
        item_id, kind = item_map.get("id"), item_map.get("type")
        item = Item(
            len(self.items), item_id if isinstance(item_id, str) else None, kind if isinstance(kind, str) else None, n
        )
        self.items.append(item)
        if item.id is not None:
            if item.id in self.by_id:
                self.sink.add("responses.id", "$.item.id", f"item id {item.id!r} used by an earlier item", chunk=n)
            self.by_id.setdefault(item.id, item)
        check_item_ids(item_map, "$.item", self.sink, self.call_ids, chunk=n)
        status = item_map.get("status")
        if status is not None and status != "in_progress":
            self.sink.add("responses.status", "$.item.status", f"an added item with status {status!r}", chunk=n)

    def _item(self, n: int, event: Mapping[str, Any]) -> Item | None:
        """The open item an event names by ``item_id``; findings when it is unknown, closed or misplaced."""
        item_id = event.get("item_id")
        item = self.by_id.get(item_id) if isinstance(item_id, str) else None
        if item is None or item.done_at is not None:
            state = (
                "was never opened by output_item.added" if item is None else f"is already closed (chunk {item.done_at})"
            )
            self.sink.add("responses.item-open", "$.item_id", f"item {item_id!r} {state}", chunk=n)
            self.orphaned = True
            return None
        index = event.get("output_index")
        if isinstance(index, int) and index != item.index:
            self.sink.add(
                "responses.output-index",
                "$.output_index",
                f"output_index {index} for item {item_id!r}, which is at position {item.index}",
                chunk=n,
            )
        return item

    def _part_added(self, n: int, container: str, event: Mapping[str, Any]) -> None:
        item = self._item(n, event)
        key = INDEX_KEY[container]
        index = event.get(key)
        if item is None or not isinstance(index, int):
            return
        parts = item.parts[container]
        for prev in parts.values():
            if prev.done_at is None and not prev.overlap_reported:
                self.sink.add(
                    "responses.item-close", f"$.{key}", f"part {index} opens while part {prev.index} is open", chunk=n
                )
                prev.overlap_reported = True
        if index != len(parts):
            self.sink.add(
                "responses.item-open", f"$.{key}", f"{key} {index} for the part at position {len(parts)}", chunk=n
            )
        raw = event.get("part")
        kind = raw.get("type") if isinstance(raw, dict) else None
        parts.setdefault(index, Part(index, kind if isinstance(kind, str) else None, n))

    def _part(self, n: int, container: str, event: Mapping[str, Any]) -> Part | None:
        item = self._item(n, event)
        key = INDEX_KEY[container]
        index = event.get(key)
        if item is None or not isinstance(index, int):
            return None
        part = item.parts[container].get(index)
        if part is None or part.done_at is not None:
            state = "was never opened" if part is None else f"is already closed (chunk {part.done_at})"
            opener = "content_part.added" if container == "content" else "reasoning_summary_part.added"
            self.sink.add("responses.item-open", f"$.{key}", f"{key} {index} {state} ({opener})", chunk=n)
            self.orphaned = True
            return None
        return part

    def _text(self, n: int, kind: str, target: Part | Item, event: Mapping[str, Any]) -> None:
        """A delta appends; a ``*.done`` must repeat the concatenation, once."""
        if kind.endswith(".delta"):
            delta = event.get("delta")
            if isinstance(delta, str):
                target.deltas.append(delta)
            return
        key = PART_DONES[kind][1] if kind in PART_DONES else ITEM_DONES[kind]
        text = event.get(key)
        if target.text is not None:
            self.sink.add("responses.item-close", "$.type", f"{kind} sent twice", chunk=n)
        if isinstance(text, str):
            target.text = text
            streamed = "".join(target.deltas)
            if text != streamed and not self.orphaned:
                self.sink.add(
                    "responses.done-text",
                    f"$.{key}",
                    f"{kind} {key} ({len(text)} chars) differs from its deltas joined ({len(streamed)} chars)",
                    chunk=n,
                )

    def _part_done(self, n: int, container: str, event: Mapping[str, Any]) -> None:
        part = self._part(n, container, event)
        if part is None:
            return
        part.done_at = n
        raw = event.get("part")
        done_event, key = PART_TEXT.get(part.type or "", (None, "text"))
        if done_event is not None and part.text is None and not self.orphaned:
            self.sink.add("responses.item-close", "$", f"part {part.index} closes without {done_event}", chunk=n)
        text = raw.get(key) if isinstance(raw, dict) else None
        if self.orphaned:
            return
        if isinstance(text, str) and text != (part.text if part.text is not None else "".join(part.deltas)):
            self.sink.add(
                "responses.done-text", f"$.part.{key}", "the closed part's text differs from its stream", chunk=n
            )

    def _item_done(self, n: int, event: Mapping[str, Any]) -> None:
        raw = event.get("item")
        item_map = raw if isinstance(raw, dict) else {}
        index = event.get("output_index")
        item = self.items[index] if isinstance(index, int) and 0 <= index < len(self.items) else None
        if item is None:
            self.sink.add(
                "responses.item-open", "$.output_index", f"output_item.done for item {index}, never opened", chunk=n
            )
            return
        if item.done is not None or item.done_at is not None:
            self.sink.add("responses.item-open", "$.output_index", f"item {index} is already closed", chunk=n)
            return
        if item_map.get("id") != item.id:
            item.id_changed = True
            self.sink.add(
                "responses.id",
                "$.item.id",
                f"output_item.done id {item_map.get('id')!r}, but output_item.added opened {item.id!r}",
                chunk=n,
            )
        item.done, item.done_at = item_map, n
        for container, parts in item.parts.items():
            for part in parts.values():
                if part.done_at is None:
                    closer = "content_part.done" if container == "content" else "reasoning_summary_part.done"
                    self.sink.add(
                        "responses.item-close",
                        "$",
                        f"item {index} closes before {closer} of part {part.index}",
                        chunk=n,
                    )
        if item.type == "function_call" and item.text is None and not self.orphaned:
            self.sink.add(
                "responses.item-close", "$", f"item {index} closes without function_call_arguments.done", chunk=n
            )
        check_item_ids(item_map, "$.item", self.sink, self.call_ids, chunk=n)
        if not self.orphaned:
            done_content(n, item, item_map, self.sink)

    def finish(self) -> None:
        if self.pending_error is not None:
            self._error_unfollowed()
            return  # the error ended the stream: the missing terminal event is that finding's doing
        if self.terminal_at is None:
            self.sink.add(
                "responses.terminal", "$", "the stream ends without response.completed, .incomplete or .failed"
            )
