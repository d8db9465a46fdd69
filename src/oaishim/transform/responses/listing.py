"""``GET /v1/responses/{id}/input_items``: the request's input items, one page at a time.

The items themselves are made when the request is mapped (``ResponsesRequestInfo.input_items``:
each with an id, ``msg_…`` for a message that came without one, a string input as one user
message). :func:`page` cuts a page the way the official list endpoints do: ``order`` ``desc`` (the
default) lists the newest item first, ``after``/``before`` are item ids the page starts after or
ends before, ``limit`` is 1 to 100 (default 20). Query values may arrive as strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oaishim.transform.validate._errors import invalid_type, invalid_value, out_of_range
from oaishim.wire.errors import bad_request

__all__ = ["page"]


def _limit(value: Any) -> int:
    if value is None:
        return 20
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_type("limit", "an integer", value)
    if value < 1:
        raise out_of_range("limit", value, 1, below=True, integer=True)
    if value > 100:
        raise out_of_range("limit", value, 100, below=False, integer=True)
    return value


def _position(ids: list[str], value: Any, param: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_type(param, "a string", value)
    try:
        return ids.index(value)
    except ValueError:
        raise bad_request(
            f"Invalid '{param}': no item with id '{value}' in this list.", param, "invalid_value"
        ) from None


def page(
    items: Sequence[dict[str, Any]],
    *,
    after: Any = None,
    before: Any = None,
    limit: Any = None,
    order: Any = None,
) -> dict[str, Any]:
    """``{"object": "list", "data", "first_id", "last_id", "has_more"}``; 400 for a bad query value."""
    size = _limit(limit)
    order = "desc" if order is None else order
    if order not in ("asc", "desc"):
        raise invalid_value("order", order, ("asc", "desc"))
    ordered = [dict(item) for item in (items if order == "asc" else list(reversed(items)))]
    ids = [str(item.get("id")) for item in ordered]
    start = _position(ids, after, "after")
    end = _position(ids, before, "before")
    low = 0 if start is None else start + 1
    high = len(ordered) if end is None else end
    window = ordered[low:high] if low < high else []
    if end is not None and start is None:
        # with only ``before``, the page is the one ending just before it
        data = window[-size:]
        more = len(window) > size
    else:
        data = window[:size]
        more = len(window) > size
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }
