"""Responses ``input`` items as chat messages.

The Responses history is a flat list of items; chat groups one assistant turn into one message. So
an assistant turn's items (``reasoning``, an assistant ``message``, ``function_call`` ×N, in the
order the API itself produces them) are folded into one assistant message with
``reasoning_content``, ``content`` and ``tool_calls``; anything else (a user message, a tool
output) ends the turn. A second text or reasoning after the turn already has one, or text after
its tool calls, starts a new assistant message: the order the items came in is kept.

Each item is also kept, with an id, as ``GET /v1/responses/{id}/input_items`` lists it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from oaishim.transform.responses._seal import open_reasoning
from oaishim.transform.validate._errors import invalid_type, invalid_value, missing
from oaishim.wire.errors import bad_request

__all__ = ["InputMapper"]

ROLES: Final = ("user", "system", "developer", "assistant")
ITEM_TYPES: Final = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
)
_ID_PREFIX: Final = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if value is None:
        raise missing(f"{param}.{key}")
    if not isinstance(value, str):
        raise invalid_type(f"{param}.{key}", "a string", value)
    return value


def _unsupported_part(param: str, why: str) -> Exception:
    return bad_request(f"Invalid '{param}': {why}.", param, "unsupported_value")


def _part(part: Any, param: str, role: str) -> dict[str, Any]:
    """One content part as chat says it (``text``, ``image_url``, ``file``, ``input_audio``, refusal)."""
    if not isinstance(part, dict):
        raise invalid_type(param, "an object", part)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": _string(part, "text", param)}
    if kind == "refusal":
        return {"type": "refusal", "refusal": _string(part, "refusal", param)}
    if kind == "input_image":
        if part.get("image_url") is None:
            raise _unsupported_part(
                param, "images must be given by 'image_url' (a URL or data URL); files are not stored by this server"
            )
        image: dict[str, Any] = {"url": _string(part, "image_url", param)}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if part.get("file_data") is None:
            raise _unsupported_part(
                param, "files must be given inline as 'file_data'; files are not stored by this server"
            )
        file: dict[str, Any] = {"file_data": _string(part, "file_data", param)}
        if isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return {"type": "file", "file": file}
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise invalid_type(f"{param}.input_audio", "an object", audio)
        return {"type": "input_audio", "input_audio": dict(audio)}
    if kind is None:
        raise missing(f"{param}.type")
    raise invalid_value(f"{param}.type", kind, ("input_text", "output_text", "refusal", "input_image", "input_file"))


class InputMapper:
    """Reads input items in order; ``messages`` is the chat conversation, ``listed`` the items with ids."""

    def __init__(
        self,
        key: bytes | None,
        new_id: Callable[[str], str],
        chat_name: Callable[[str | None, str], str] = lambda namespace, name: name,
    ) -> None:
        self.key = key
        self.new_id = new_id
        self.chat_name = chat_name  # (namespace, name) of a call item -> the name the backend knows it by
        self.messages: list[dict[str, Any]] = []
        self.listed: list[dict[str, Any]] = []
        self._turn: dict[str, Any] | None = None  # the assistant message being assembled

    # -- the assistant turn ---------------------------------------------------------------------
    def _assistant(self, *, fresh_for: str) -> dict[str, Any]:
        turn = self._turn
        # consecutive calls share one message; a second text or reasoning, or either after the calls, does not
        if turn is None or (fresh_for != "tool_calls" and (fresh_for in turn or "tool_calls" in turn)):
            self.end_turn()
            turn = self._turn = {"role": "assistant"}
        return turn

    def end_turn(self) -> None:
        if self._turn is not None:
            self._turn.setdefault("content", None)
            self.messages.append(self._turn)
            self._turn = None

    # -- items ----------------------------------------------------------------------------------
    def text(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.listed.append(
            {
                "id": self.new_id("msg"),
                "type": "message",
                "status": "completed",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
        )

    def item(self, item: Any, param: str) -> None:
        if not isinstance(item, dict):
            raise invalid_type(param, "an object", item)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # EasyInputMessage: the type may be left out
        if kind == "item_reference":
            raise bad_request(
                f"Invalid '{param}': item references are not supported; send the item itself.",
                f"{param}.type",
                "unsupported_value",
            )
        if kind not in ITEM_TYPES:
            if kind is None:
                raise missing(f"{param}.type")
            raise invalid_value(f"{param}.type", kind, ITEM_TYPES)
        getattr(self, f"_{kind}")(item, param)
        listed = {"id": item.get("id") or self.new_id(_ID_PREFIX[kind]), **{k: v for k, v in item.items() if k != "id"}}
        listed["type"] = kind
        if kind == "message":
            listed["content"] = self._listed_content(item)
        if kind != "reasoning":
            listed.setdefault("status", "completed")
        self.listed.append(listed)

    @staticmethod
    def _listed_content(item: dict[str, Any]) -> Any:
        content = item.get("content")
        if isinstance(content, str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            part: dict[str, Any] = {"type": kind, "text": content}
            if kind == "output_text":
                part["annotations"] = []
            return [part]
        return content

    def _message(self, item: dict[str, Any], param: str) -> None:
        role = item.get("role")
        if role is None:
            raise missing(f"{param}.role")
        if role not in ROLES:
            raise invalid_value(f"{param}.role", role, ROLES)
        content = item.get("content")
        if content is None:
            raise missing(f"{param}.content")
        if isinstance(content, str):
            parts: list[dict[str, Any]] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = [_part(p, f"{param}.content[{j}]", role) for j, p in enumerate(content)]
        else:
            raise invalid_type(f"{param}.content", "one of a string or array of objects", content)
        if role == "assistant":
            turn = self._assistant(fresh_for="content")
            texts = [p["text"] for p in parts if p["type"] == "text"]
            refusals = [p["refusal"] for p in parts if p["type"] == "refusal"]
            turn["content"] = "".join(texts) if texts else None
            if refusals:
                turn["refusal"] = "".join(refusals)
            return
        self.end_turn()
        if role in ("system", "developer"):
            if any(p["type"] != "text" for p in parts):
                raise invalid_value(f"{param}.content", "non-text part", ("input_text",))
            self.messages.append({"role": role, "content": "".join(p["text"] for p in parts)})
        elif isinstance(content, str):
            self.messages.append({"role": role, "content": content})
        else:
            self.messages.append({"role": role, "content": parts})

    def _call(self, call_id: str, name: str, arguments: str) -> None:
        turn = self._assistant(fresh_for="tool_calls")
        turn.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def _name(self, item: dict[str, Any], param: str) -> str:
        namespace = item.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise invalid_type(f"{param}.namespace", "a string", namespace)
        return self.chat_name(namespace, _string(item, "name", param))

    def _function_call(self, item: dict[str, Any], param: str) -> None:
        self._call(_string(item, "call_id", param), self._name(item, param), _string(item, "arguments", param))

    def _custom_tool_call(self, item: dict[str, Any], param: str) -> None:
        arguments = orjson.dumps({"input": _string(item, "input", param)}).decode()
        self._call(_string(item, "call_id", param), self._name(item, param), arguments)

    def _output(self, item: dict[str, Any], param: str) -> None:
        self.end_turn()
        call_id = _string(item, "call_id", param)
        output = item.get("output")
        if output is None:
            raise missing(f"{param}.output")
        if isinstance(output, list):
            parts = [_part(p, f"{param}.output[{j}]", "tool") for j, p in enumerate(output)]
            for j, p in enumerate(parts):
                if p["type"] != "text":
                    raise _unsupported_part(f"{param}.output[{j}]", "a chat model's tool results can only be text")
            output = "".join(p["text"] for p in parts)
        elif not isinstance(output, str):
            raise invalid_type(f"{param}.output", "one of a string or array of objects", output)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})

    def _function_call_output(self, item: dict[str, Any], param: str) -> None:
        self._output(item, param)

    def _custom_tool_call_output(self, item: dict[str, Any], param: str) -> None:
        self._output(item, param)

    def _reasoning(self, item: dict[str, Any], param: str) -> None:
        texts: list[str] = []
        content = item.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict):
                    raise invalid_type(f"{param}.content[{j}]", "an object", part)
                if part.get("type") == "reasoning_text":
                    texts.append(_string(part, "text", f"{param}.content[{j}]"))
        elif content is not None:
            raise invalid_type(f"{param}.content", "an array", content)
        if not texts and item.get("encrypted_content") is not None:
            texts.append(open_reasoning(self.key, item["encrypted_content"], f"{param}.encrypted_content"))
        if texts:
            self._assistant(fresh_for="reasoning_content")["reasoning_content"] = "".join(texts)
