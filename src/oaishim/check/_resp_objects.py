"""Responses API: rules on one ``response`` object and its output items (plain bodies and stream events).

What the official API sends (the recordings in the checker's ``openai-live-responses`` fixtures): ids
``resp_`` (response), ``msg_`` (message item), ``rs_`` (reasoning item), ``fc_`` (function-call item)
with a separate ``call_`` id in ``call_id``; ``usage`` ``null`` while the response is in progress and
present once it is complete; a ``status`` that agrees with ``error`` and ``incomplete_details``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from oaishim.check._findings import Sink, child

ITEM_PREFIXES: Final = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}
TERMINAL: Final = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
OPENING: Final = {"response.created", "response.in_progress", "response.queued"}


def check_item_ids(
    item: Mapping[str, Any],
    path: str,
    sink: Sink,
    call_ids: dict[str, str],
    *,
    chunk: int | None = None,
) -> None:
    """Id prefixes of one output item, and a function call's ``call_id``: present, its own, not repeated.

    ``call_ids`` maps each call id seen so far in this response to the item id that carried it.
    """
    kind, item_id = item.get("type"), item.get("id")
    want = ITEM_PREFIXES.get(kind) if isinstance(kind, str) else None
    if want is not None and isinstance(item_id, str) and not item_id.startswith(want):
        sink.add(
            "responses.id-prefix", child(path, "id"), f"{kind} item id {item_id!r} lacks the {want} prefix", chunk=chunk
        )
    if kind != "function_call":
        return
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        sink.add(
            "responses.call-id", child(path, "call_id"), f"function call without a call_id ({call_id!r})", chunk=chunk
        )
        return
    if call_id == item_id:
        sink.add(
            "responses.call-id",
            child(path, "call_id"),
            f"call_id {call_id!r} is the item id; the official API gives the call its own call_ id",
            chunk=chunk,
        )
    elif call_ids.get(call_id, item_id) != item_id:
        sink.add("responses.call-id", child(path, "call_id"), f"call_id {call_id!r} repeated", chunk=chunk)
    elif not call_id.startswith("call_"):
        sink.add(
            "responses.id-prefix", child(path, "call_id"), f"call_id {call_id!r} lacks the call_ prefix", chunk=chunk
        )
    call_ids.setdefault(call_id, item_id if isinstance(item_id, str) else "")


def check_response(
    response: Mapping[str, Any],
    path: str,
    sink: Sink,
    *,
    event: str | None,
    chunk: int | None = None,
    check_items: bool = True,
) -> None:
    """One response object: a plain body (``event`` None) or the ``response`` of a lifecycle event."""
    rid = response.get("id")
    if isinstance(rid, str) and not rid.startswith("resp_"):
        sink.add("responses.id-prefix", child(path, "id"), f"response id {rid!r} lacks the resp_ prefix", chunk=chunk)
    status = response.get("status")
    want = _status_for(event, status)
    if want is not None and status not in want:
        shown = " or ".join(repr(s) for s in sorted(want))
        sink.add(
            "responses.status",
            child(path, "status"),
            f"status {status!r} where {shown} belongs" + (f" ({event})" if event else ""),
            chunk=chunk,
        )
    elif isinstance(status, str):
        _status_details(response, status, path, sink, chunk)
    _usage(response, event, path, sink, chunk)
    output = response.get("output")
    if check_items and isinstance(output, list):
        call_ids: dict[str, str] = {}
        for i, item in enumerate(output):
            if isinstance(item, dict):
                check_item_ids(item, child(child(path, "output"), i), sink, call_ids, chunk=chunk)
                _item_status(item, status, child(child(path, "output"), i), sink, chunk)


def _status_for(event: str | None, status: Any) -> set[str] | None:
    if event in TERMINAL:
        return {TERMINAL[event]}
    if event == "response.queued":
        return {"queued"}
    if event in OPENING:
        return {"in_progress", "queued"}
    return None


def _status_details(response: Mapping[str, Any], status: str, path: str, sink: Sink, chunk: int | None) -> None:
    error, details = response.get("error"), response.get("incomplete_details")
    if status == "failed":
        if not isinstance(error, dict):
            sink.add("responses.status", child(path, "error"), "status 'failed' without an error object", chunk=chunk)
    elif error is not None:
        sink.add("responses.status", child(path, "error"), f"an error object with status {status!r}", chunk=chunk)
    if status == "incomplete":
        if not isinstance(details, dict) or not isinstance(details.get("reason"), str):
            sink.add(
                "responses.status",
                child(path, "incomplete_details"),
                "status 'incomplete' without incomplete_details.reason",
                chunk=chunk,
            )
    elif details is not None:
        sink.add(
            "responses.status",
            child(path, "incomplete_details"),
            f"incomplete_details with status {status!r}",
            chunk=chunk,
        )


def _usage(response: Mapping[str, Any], event: str | None, path: str, sink: Sink, chunk: int | None) -> None:
    usage = response.get("usage")
    finished = event in TERMINAL or (event is None and response.get("status") in ("completed", "incomplete"))
    if event in OPENING and usage is not None:
        sink.add(
            "responses.usage", child(path, "usage"), f"usage sent in {event}; it is null until the end", chunk=chunk
        )
    elif finished and event != "response.failed" and not isinstance(usage, dict):
        sink.add(
            "responses.usage",
            child(path, "usage"),
            f"no usage in a finished response ({usage!r})",
            chunk=chunk,
        )


def _item_status(item: Mapping[str, Any], status: Any, path: str, sink: Sink, chunk: int | None) -> None:
    """In a completed response every item that has a status is completed."""
    if status == "completed" and "status" in item and item["status"] != "completed":
        sink.add(
            "responses.status",
            child(path, "status"),
            f"item status {item['status']!r} in a completed response",
            chunk=chunk,
        )
