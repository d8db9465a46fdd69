"""``GET /v1/responses/{id}/input_items`` pages: order, cursors, limits, refusals."""

from __future__ import annotations

from typing import Any

import pytest

from oaishim.transform.responses import page, responses_to_chat
from oaishim.wire.errors import OpenAIError


def items(n: int) -> list[dict[str, Any]]:
    body = {"model": "m", "input": [{"role": "user", "content": str(i)} for i in range(n)]}
    return responses_to_chat(body)[1].input_items


def texts(result: dict[str, Any]) -> list[str]:
    return [item["content"][0]["text"] for item in result["data"]]


def test_default_is_newest_first_twenty() -> None:
    all_items = items(25)
    result = page(all_items)
    assert texts(result) == [str(i) for i in range(24, 4, -1)]
    assert result["object"] == "list" and result["has_more"] is True
    assert (result["first_id"], result["last_id"]) == (all_items[24]["id"], all_items[5]["id"])


def test_cursors_walk_every_item_once_in_both_orders() -> None:
    all_items = items(7)
    for order in ("asc", "desc"):
        seen: list[str] = []
        after = None
        while True:
            result = page(all_items, after=after, limit="3", order=order)
            seen += texts(result)
            if not result["has_more"]:
                break
            after = result["last_id"]
        want = [str(i) for i in range(7)]
        assert seen == (want if order == "asc" else want[::-1])


def test_before_gives_the_page_just_before() -> None:
    all_items = items(6)
    result = page(all_items, before=all_items[4]["id"], limit=2, order="asc")
    assert texts(result) == ["2", "3"] and result["has_more"] is True
    assert page(all_items, after=all_items[5]["id"], order="asc")["data"] == []
    empty = page([])
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"order": "up"}, "order"),
        ({"after": "msg_nope"}, "after"),
        ({"before": "msg_nope"}, "before"),
    ],
)
def test_bad_queries(query: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as err:
        page(items(3), **query)
    assert err.value.status == 400 and err.value.param == param
