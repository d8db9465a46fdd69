"""The Responses stream grammar as strict clients rely on it, checked event by event; and the SDK's reading.

``check_stream`` raises AssertionError at the first broken rule: framing (``event:`` equal to the
JSON's ``type``), ``sequence_number`` 0, 1, 2, ...; ``response.created`` then ``response.in_progress``
first; one item open at a time at ``output_index`` = its position; every delta names an opened item
and part; every ``added`` has its ``done``; done texts equal the concatenated deltas; exactly one
terminal event, last, whose ``response.output`` equals the ``output_item.done`` items; an ``error``
event only right before ``response.failed``.

``sdk_read`` runs the events through openai-python's own stream state (what ``responses.stream()``
uses) and returns the final parsed response.
"""

from __future__ import annotations

from typing import Any

import orjson

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def parse_frames(data: bytes) -> list[dict[str, Any]]:
    assert b"[DONE]" not in data
    events = []
    for block in data.split(b"\n\n"):
        if not block.strip():
            continue
        lines = block.split(b"\n")
        assert len(lines) == 2 and lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), block
        event = orjson.loads(lines[1][6:])
        assert lines[0][7:].decode() == event["type"]
        events.append(event)
    return events


def check_stream(events: list[dict[str, Any]]) -> None:
    assert [e.get("sequence_number") for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    rid = events[0]["response"]["id"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    done_items: list[dict[str, Any]] = []
    item: dict[str, Any] | None = None  # the open item
    part_index: int | None = None
    texts: dict[tuple[int, int], str] = {}
    args = ""
    terminal = None
    for n, e in enumerate(events):
        t = e["type"]
        assert terminal is None, f"event after the terminal one: {t}"
        if t.startswith("response.") and "response" in e:
            assert e["response"]["id"] == rid
        if t == "response.output_item.added":
            assert item is None, "an item opened while another is open"
            assert e["output_index"] == len(done_items)
            item, args = e["item"], ""
            assert item["id"].startswith(
                {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}.get(item["type"], "")
            )
            if item["type"] == "function_call":
                assert item["call_id"] != item["id"] and item["arguments"] == ""
        elif t == "response.content_part.added":
            assert item is not None and e["item_id"] == item["id"] and e["output_index"] == len(done_items)
            assert part_index is None
            part_index = e["content_index"]
            texts[(e["output_index"], part_index)] = ""
        elif t in ("response.output_text.delta", "response.reasoning_text.delta", "response.refusal.delta"):
            assert item is not None and e["item_id"] == item["id"] and e["output_index"] == len(done_items)
            assert e["content_index"] == part_index, "delta for a part not opened"
            texts[(e["output_index"], part_index)] += e["delta"]
            if t == "response.output_text.delta":
                assert isinstance(e["logprobs"], list)
        elif t in ("response.output_text.done", "response.reasoning_text.done", "response.refusal.done"):
            assert item is not None and e["content_index"] == part_index
            assert e["text" if t != "response.refusal.done" else "refusal"] == texts[(e["output_index"], part_index)]
        elif t == "response.content_part.done":
            assert e["content_index"] == part_index
            part_index = None
        elif t == "response.function_call_arguments.delta":
            assert item is not None and item["type"] == "function_call" and e["item_id"] == item["id"]
            assert "content_index" not in e
            args += e["delta"]
        elif t == "response.function_call_arguments.done":
            assert item is not None and e["item_id"] == item["id"] and e["arguments"] == args
        elif t in ("response.custom_tool_call_input.delta", "response.custom_tool_call_input.done"):
            assert item is not None and item["type"] == "custom_tool_call" and e["item_id"] == item["id"]
            if t.endswith("delta"):
                args += e["delta"]
            else:
                assert e["input"] == args
        elif t == "response.output_item.done":
            assert item is not None and part_index is None and e["item"]["id"] == item["id"]
            assert e["output_index"] == len(done_items)
            full = e["item"]
            if full["type"] == "function_call":
                assert full["arguments"] == args
            if full["type"] == "custom_tool_call":
                assert full["input"] == args
            for j, part in enumerate(full.get("content", [])):
                assert part.get("text", part.get("refusal")) == texts[(e["output_index"], j)]
            done_items.append(full)
            item = None
        elif t == "error":
            assert events[n + 1]["type"] == "response.failed"
            assert isinstance(e["message"], str) and "code" in e and "param" in e
        elif t in TERMINAL:
            terminal = e
        else:
            assert t in ("response.created", "response.in_progress"), f"unexpected event {t}"
    assert terminal is not None, "no terminal event"
    assert item is None, "an item left open"
    assert terminal["response"]["output"] == done_items
    status = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}
    assert terminal["response"]["status"] == status[terminal["type"]]


def sdk_read(events: list[dict[str, Any]]) -> Any:
    """The final response as openai-python's ``responses.stream()`` state machine builds it."""
    from openai._models import construct_type
    from openai._types import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for raw in events:
        event = construct_type(type_=ResponseStreamEvent, value=raw)  # as the SDK's Stream parses each event
        for out in state.handle_event(event):  # type: ignore[arg-type]
            if out.type == "response.completed":
                final = out.response
    return final
