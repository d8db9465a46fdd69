"""The output items of a response, built from an answer's pieces, with the events that announce them.

One builder serves the stream and the plain body, so both produce the same items. It is fed the
pieces a chat answer is made of, in order: reasoning text, message text (with its logprobs), refusal
text, tool-call fragments. It keeps the Responses grammar by construction:

* one item open at a time, at ``output_index`` = its position in ``output``; a piece of another kind
  (reasoning after text, a second tool call) closes the open item first;
* an item is announced (``response.output_item.added``) and its content part
  (``response.content_part.added``) before the first delta, and both are closed (``*.done`` with
  the whole text, ``response.output_item.done`` with the whole item) before the next item opens;
* ids: ``rs_`` for reasoning, ``msg_`` for a message, ``fc_`` for a function call (its ``call_id``
  is the chat call id, ``call_…``), ``ctc_`` for a custom tool call; a call of a ``namespace``
  member carries ``namespace`` and the member's own name;
* raw reasoning (``reasoning_content``) is a ``reasoning_text`` content part with ``summary: []``:
  it is not a summary. With a seal function the done item carries ``encrypted_content``.

Events are returned as dicts without ``sequence_number``; the stream encoder numbers and frames them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from oaishim.wire.accumulate import json_copy
from oaishim.wire.errors import OpenAIError

__all__ = ["OutputBuilder"]

Event = dict[str, Any]


class _Open:
    """The item being built (a plain class with its own ``__init__``: the one a dataclass is
    given is generated Python, compiled or not, ten times the cost of making one)."""

    __slots__ = ("index", "item", "key", "kind", "logprobs", "part", "texts")

    def __init__(self, kind: str, item: dict[str, Any], index: int, key: Any = None) -> None:
        self.kind = kind  # "reasoning" | "message" | "function_call" | "custom_tool_call"
        self.item = item
        self.index = index
        self.key = key  # the chat tool-call index, for calls
        self.part: str | None = None  # the open content part's type
        self.texts: list[str] = []  # the open part's (or call's) text so far
        self.logprobs: list[dict[str, Any]] = []


def _part(kind: str, text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if kind == "output_text":
        return {"type": "output_text", "annotations": [], "logprobs": logprobs or [], "text": text}
    if kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "reasoning_text", "text": text}


class OutputBuilder:
    def __init__(
        self,
        new_id: Callable[[str], str],
        *,
        seal: Callable[[str], str] | None = None,
        custom_tools: frozenset[str] = frozenset(),
        namespaced: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.new_id = new_id
        self.seal = seal
        self.custom_tools = custom_tools
        self.namespaced = dict(namespaced or {})
        self.output: list[dict[str, Any]] = []  # closed items, in order
        self._open: _Open | None = None
        self._closed_calls: set[object] = set()

    @property
    def busy(self) -> bool:
        return self._open is not None

    # -- opening and closing ---------------------------------------------------------------------
    def _open_item(self, kind: str, item: dict[str, Any], key: object = None) -> list[Event]:
        out = self.close()
        self._open = _Open(kind, item, len(self.output), key)
        out.append({"type": "response.output_item.added", "output_index": self._open.index, "item": dict(item)})
        return out

    def _where(self, cur: _Open) -> dict[str, Any]:
        return {"item_id": cur.item["id"], "output_index": cur.index}

    def _open_part(self, cur: _Open, kind: str) -> list[Event]:
        out = self._close_part(cur, "completed")
        cur.part = kind
        part = _part(kind, "")
        return [
            *out,
            {
                "type": "response.content_part.added",
                **self._where(cur),
                "content_index": len(cur.item["content"]),
                "part": part,
            },
        ]

    def _close_part(self, cur: _Open, status: str) -> list[Event]:
        if cur.part is None:
            return []
        text = "".join(cur.texts)
        where = {**self._where(cur), "content_index": len(cur.item["content"])}
        part = _part(cur.part, text, cur.logprobs)
        if cur.part == "output_text":
            done: Event = {"type": "response.output_text.done", **where, "text": text, "logprobs": list(cur.logprobs)}
        elif cur.part == "refusal":
            done = {"type": "response.refusal.done", **where, "refusal": text}
        else:
            done = {"type": "response.reasoning_text.done", **where, "text": text}
        cur.item["content"].append(part)
        cur.part, cur.texts, cur.logprobs = None, [], []
        return [done, {"type": "response.content_part.done", **where, "part": dict(part)}]

    def close(self, status: str = "completed") -> list[Event]:
        """Close the open item (``status`` ``incomplete`` when the answer was cut off)."""
        cur = self._open
        if cur is None:
            return []
        self._open = None
        out: list[Event] = []
        item = cur.item
        if cur.kind in ("message", "reasoning"):
            out += self._close_part(cur, status)
        if cur.kind == "reasoning":
            if self.seal is not None:
                text = "".join(p["text"] for p in item["content"])
                item["encrypted_content"] = self.seal(text)
        elif cur.kind == "function_call":
            args = "".join(cur.texts)
            item["arguments"] = args
            out.append(
                {
                    "type": "response.function_call_arguments.done",
                    **self._where(cur),
                    "arguments": args,
                    "name": item["name"],
                }
            )
        elif cur.kind == "custom_tool_call":
            item["input"] = _custom_input("".join(cur.texts))
            if item["input"]:
                out.append(
                    {"type": "response.custom_tool_call_input.delta", **self._where(cur), "delta": item["input"]}
                )
            out.append({"type": "response.custom_tool_call_input.done", **self._where(cur), "input": item["input"]})
        if cur.kind != "reasoning":
            item["status"] = status
        if cur.key is not None:
            self._closed_calls.add(cur.key)
        self.output.append(item)
        out.append({"type": "response.output_item.done", "output_index": cur.index, "item": json_copy(item)})
        return out

    # -- pieces ----------------------------------------------------------------------------------
    def reasoning(self, text: str) -> list[Event]:
        if not text:
            return []
        out: list[Event] = []
        cur = self._open
        if cur is None or cur.kind != "reasoning":
            out += self._open_item(
                "reasoning", {"id": self.new_id("rs"), "type": "reasoning", "summary": [], "content": []}
            )
            cur = self._open
            assert cur is not None
            out += self._open_part(cur, "reasoning_text")
        cur.texts.append(text)
        out.append(
            {
                "type": "response.reasoning_text.delta",
                **self._where(cur),
                "content_index": len(cur.item["content"]),
                "delta": text,
            }
        )
        return out

    def _message(self, part: str) -> tuple[_Open, list[Event]]:
        out: list[Event] = []
        cur = self._open
        if cur is None or cur.kind != "message":
            out += self._open_item(
                "message",
                {
                    "id": self.new_id("msg"),
                    "type": "message",
                    "status": "in_progress",
                    "content": [],
                    "role": "assistant",
                },
            )
            cur = self._open
            assert cur is not None
        if cur.part != part:
            out += self._open_part(cur, part)
        return cur, out

    def open_text(self) -> tuple[str, int, int] | None:
        """Where a text delta goes when an ``output_text`` part is open (item id, output index,
        content index), else None: a delta there needs no event but its own."""
        cur = self._open
        if cur is None or cur.kind != "message" or cur.part != "output_text":
            return None
        return cur.item["id"], cur.index, len(cur.item["content"])

    def add_text(self, text: str) -> None:
        """Text for the open ``output_text`` part, its delta event written by the caller (``open_text``)."""
        assert self._open is not None
        self._open.texts.append(text)

    def text(self, text: str, logprobs: list[dict[str, Any]] | None = None) -> list[Event]:
        if not text:
            return []
        cur, out = self._message("output_text")
        cur.texts.append(text)
        cur.logprobs += logprobs or []
        out.append(
            {
                "type": "response.output_text.delta",
                **self._where(cur),
                "content_index": len(cur.item["content"]),
                "delta": text,
                "logprobs": list(logprobs or []),
            }
        )
        return out

    def refusal(self, text: str) -> list[Event]:
        if not text:
            return []
        cur, out = self._message("refusal")
        cur.texts.append(text)
        out.append(
            {
                "type": "response.refusal.delta",
                **self._where(cur),
                "content_index": len(cur.item["content"]),
                "delta": text,
            }
        )
        return out

    def call(self, key: object, call_id: str | None, name: str | None, arguments: str) -> list[Event]:
        """A tool-call fragment: the first for ``key`` carries id and name, later ones argument text."""
        cur = self._open
        out: list[Event] = []
        if cur is None or cur.key != key:
            if key in self._closed_calls:
                raise OpenAIError(
                    502,
                    "the upstream interleaved the arguments of parallel tool calls",
                    "server_error",
                    None,
                    "server_error",
                )
            if not name:
                raise OpenAIError(
                    502, "the upstream started a tool call without a name", "server_error", None, "server_error"
                )
            call_id = call_id or self.new_id("call")
            custom = name in self.custom_tools
            item: dict[str, Any] = (
                {"id": self.new_id("ctc"), "type": "custom_tool_call", "status": "in_progress", "call_id": call_id}
                | {"input": ""}
                if custom
                else {"id": self.new_id("fc"), "type": "function_call", "status": "in_progress", "arguments": ""}
                | {"call_id": call_id}
            )
            if name in self.namespaced:  # a namespace member: the client's router wants both names
                item["namespace"], name = self.namespaced[name]
            item["name"] = name
            out += self._open_item(str(item["type"]), item, key)
            cur = self._open
            assert cur is not None
        if arguments:
            cur.texts.append(arguments)
            if cur.kind == "function_call":
                out.append({"type": "response.function_call_arguments.delta", **self._where(cur), "delta": arguments})
        return out


def _custom_input(arguments: str) -> str:
    """A custom tool's input from the one-string function the backend called; raw text if it is not that."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        text: str = value["input"]
        return text
    return arguments
