"""What one step's answer says, read the way a client reads it. Pure: bytes in, a view out.

A plain body is read as it is; a stream is decoded (the checker's SSE decoder) and accumulated
the way the official SDK does (``wire.accumulate``), so expectations look at what a client ends up
holding, whichever way it asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from oaishim.check import Exchange, exchange_from_bytes
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion
from oaishim.wire.sse import is_done

__all__ = ["StepView", "view_of"]


@dataclass(frozen=True, slots=True)
class StepView:
    status: int | None
    headers: Mapping[str, str]
    exchange: Exchange | None  # None when nothing came back (a transport error)
    result: Any = None  # the plain JSON body, or the stream accumulated; None when neither
    chunks: Sequence[Mapping[str, Any]] = field(default_factory=list)  # a stream's JSON events
    stream: bool = False
    transport_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.transport_error is None

    @property
    def error(self) -> Mapping[str, Any] | None:
        """The ``error`` object of an error body or error event (a flat body counts as the error)."""
        candidates = [self.result, *self.chunks] if self.stream else [self.result]
        for item in candidates:
            if isinstance(item, Mapping) and isinstance(item.get("error"), Mapping):
                error: Mapping[str, Any] = item["error"]
                return error
        if self.status is not None and self.status >= 400 and isinstance(self.result, Mapping):
            return self.result
        return None

    def choices(self) -> list[Mapping[str, Any]]:
        choices = self.result.get("choices") if isinstance(self.result, Mapping) else None
        return [c for c in choices if isinstance(c, Mapping)] if isinstance(choices, list) else []

    def choice(self, index: int = 0) -> Mapping[str, Any] | None:
        return next((c for c in self.choices() if c.get("index", 0) == index), None)

    def _message(self, index: int) -> Mapping[str, Any]:
        choice = self.choice(index) or {}
        message = choice.get("message")
        return message if isinstance(message, Mapping) else {}

    def text(self, index: int = 0) -> str | None:
        """Chat ``message.content`` or legacy ``text`` of a choice."""
        choice = self.choice(index) or {}
        value = self._message(index).get("content") if "message" in choice else choice.get("text")
        return value if isinstance(value, str) else None

    def reasoning(self, index: int = 0) -> str | None:
        message = self._message(index)
        value = message.get("reasoning_content", message.get("reasoning"))
        return value if isinstance(value, str) else None

    def tool_calls(self, index: int = 0) -> list[Mapping[str, Any]]:
        calls = self._message(index).get("tool_calls")
        return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []

    def finish_reason(self, index: int = 0) -> Any:
        return (self.choice(index) or {}).get("finish_reason")

    @property
    def usage(self) -> Mapping[str, Any] | None:
        if self.stream:
            found = [c["usage"] for c in self.chunks if isinstance(c.get("usage"), Mapping)]
            return found[-1] if found else None
        usage = self.result.get("usage") if isinstance(self.result, Mapping) else None
        return usage if isinstance(usage, Mapping) else None

    def usage_count(self, key: str) -> int | None:
        value = (self.usage or {}).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _chunks(exchange: Exchange) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for event in exchange.events or ():
        if is_done(event) or not event.data.strip():
            continue
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(data, Mapping):
            out.append(data)
    return out


def _accumulate(chunks: list[Mapping[str, Any]]) -> Any:
    objects = {c.get("object") for c in chunks}
    try:
        if "chat.completion.chunk" in objects:
            return accumulate_chat(chunks)
        if objects & {"text_completion", "text_completion.chunk"}:
            fixed = [{**c, "object": "text_completion"} if c.get("object") else c for c in chunks]
            return accumulate_completion(fixed)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return None


def view_of(
    raw: bytes | None,
    *,
    request: Mapping[str, Any] | None,
    status: int | None,
    headers: Mapping[str, str],
    transport_error: str | None = None,
) -> StepView:
    """Read one answer (``raw`` None: nothing came back, ``transport_error`` says why)."""
    if raw is None:
        return StepView(status, headers, None, transport_error=transport_error or "no answer")
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers)
    if exchange.events is None:
        return StepView(status, headers, exchange, exchange.body, transport_error=transport_error)
    chunks = _chunks(exchange)
    return StepView(status, headers, exchange, _accumulate(chunks), chunks, True, transport_error)
