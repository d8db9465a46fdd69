"""What one step's answer says, read the way a client reads it. Pure: bytes in, a view out.

A plain body is read as it is; a stream is decoded (the checker's SSE decoder) and accumulated
the way the official SDK does (``wire.accumulate``), so expectations look at what a client ends up
holding, whichever way it asked. A Responses API answer (``/v1/responses``) is the ``response``
object: the body, or a stream's terminal event's ``response`` (what openai-python's
``responses.stream()`` hands over as the final response); text, reasoning, tool calls and usage
are read from its output items, so the same expectations judge chat and Responses steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from oaishim.check import Exchange, exchange_from_bytes
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion
from oaishim.wire.sse import is_done

__all__ = ["StepView", "answer_variables", "view_of"]


@dataclass(frozen=True, slots=True)
class StepView:
    status: int | None
    headers: Mapping[str, str]
    exchange: Exchange | None  # None when nothing came back (a transport error)
    result: Any = None  # the plain JSON body, or the stream accumulated; None when neither
    chunks: Sequence[Mapping[str, Any]] = field(default_factory=list)  # a stream's JSON events
    stream: bool = False
    transport_error: str | None = None
    responses: bool = False  # a Responses API answer: ``result`` is the response object

    def _output(self, kind: str) -> list[Mapping[str, Any]]:
        output = self.result.get("output") if isinstance(self.result, Mapping) else None
        items = output if isinstance(output, list) else []
        return [i for i in items if isinstance(i, Mapping) and i.get("type") == kind]

    def _parts(self, kind: str, part: str) -> str | None:
        texts: list[str] = []
        for item in self._output(kind):
            content = item.get("content")
            for p in content if isinstance(content, list) else []:
                if isinstance(p, Mapping) and p.get("type") == part and isinstance(p.get("text"), str):
                    texts.append(p["text"])
        return "".join(texts) if texts else None

    @property
    def response_status(self) -> Any:
        """A Responses answer's ``status`` (``completed``, ``incomplete``, ``failed``)."""
        return self.result.get("status") if self.responses and isinstance(self.result, Mapping) else None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.transport_error is None

    @property
    def error(self) -> Mapping[str, Any] | None:
        """The ``error`` object of an error body or error event (a flat body counts as the error)."""
        candidates = [self.result, *self.chunks] if self.stream else [self.result]
        for chunk in self.chunks if self.responses else ():
            if chunk.get("type") == "error":  # the Responses error event is the error itself
                return chunk
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
        """Chat ``message.content`` or legacy ``text`` of a choice; a response's ``output_text``."""
        if self.responses:
            return self._parts("message", "output_text")
        choice = self.choice(index) or {}
        value = self._message(index).get("content") if "message" in choice else choice.get("text")
        return value if isinstance(value, str) else None

    def reasoning(self, index: int = 0) -> str | None:
        if self.responses:
            return self._parts("reasoning", "reasoning_text")
        message = self._message(index)
        value = message.get("reasoning_content", message.get("reasoning"))
        return value if isinstance(value, str) else None

    def tool_calls(self, index: int = 0) -> list[Mapping[str, Any]]:
        """Chat ``tool_calls``; a response's ``function_call`` items in the chat shape."""
        if self.responses:
            return [
                {
                    "id": i.get("call_id"),
                    "type": "function",
                    "function": {"name": i.get("name"), "arguments": i.get("arguments")},
                }
                for i in self._output("function_call")
            ]
        calls = self._message(index).get("tool_calls")
        return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []

    def finish_reason(self, index: int = 0) -> Any:
        if self.responses:  # what chat would have said
            status = self.response_status
            details = self.result.get("incomplete_details") if isinstance(self.result, Mapping) else None
            if status == "incomplete" and isinstance(details, Mapping):
                return {"max_output_tokens": "length", "content_filter": "content_filter"}.get(
                    str(details.get("reason"))
                )
            if status == "completed":
                return "tool_calls" if self._output("function_call") else "stop"
            return None
        return (self.choice(index) or {}).get("finish_reason")

    @property
    def usage(self) -> Mapping[str, Any] | None:
        if self.stream and not self.responses:
            found = [c["usage"] for c in self.chunks if isinstance(c.get("usage"), Mapping)]
            return found[-1] if found else None
        usage = self.result.get("usage") if isinstance(self.result, Mapping) else None
        return usage if isinstance(usage, Mapping) else None

    def usage_count(self, key: str) -> int | None:
        if self.responses:
            key = _RESPONSES_USAGE.get(key, key)
        value = (self.usage or {}).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


_RESPONSES_USAGE = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _is_responses(chunks: Sequence[Mapping[str, Any]]) -> bool:
    return any(str(c.get("type", "")).startswith("response.") for c in chunks[:3])


def _final_response(chunks: Sequence[Mapping[str, Any]]) -> Any:
    """The terminal event's ``response``: what a client holds at the end of a Responses stream."""
    for chunk in reversed(chunks):
        if chunk.get("type") in _TERMINAL and isinstance(chunk.get("response"), Mapping):
            return chunk["response"]
    return None


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
    path: str | None = None,
) -> StepView:
    """Read one answer (``raw`` None: nothing came back, ``transport_error`` says why); ``path``, the
    request's, tells the checker a Responses exchange whose body alone does not say (an error)."""
    if raw is None:
        return StepView(status, headers, None, transport_error=transport_error or "no answer")
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers, path=path)
    if exchange.events is None:
        body = exchange.body
        responses = isinstance(body, Mapping) and body.get("object") == "response"
        return StepView(status, headers, exchange, body, transport_error=transport_error, responses=responses)
    chunks = _chunks(exchange)
    if _is_responses(chunks):
        return StepView(status, headers, exchange, _final_response(chunks), chunks, True, transport_error, True)
    return StepView(status, headers, exchange, _accumulate(chunks), chunks, True, transport_error)


def answer_variables(step: str, raw: bytes | None, status: int | None, headers: Mapping[str, str]) -> dict[str, Any]:
    """What a step's answer gives the steps after it: a response's ``id`` and first ``call_id``."""
    if raw is None or status != 200:
        return {}
    view = view_of(raw, request=None, status=status, headers=headers)
    if not view.responses or not isinstance(view.result, Mapping):
        return {}
    out: dict[str, Any] = {}
    if isinstance(view.result.get("id"), str):
        out[f"{step}_id"] = view.result["id"]
    calls = [c["id"] for c in view.tool_calls() if isinstance(c.get("id"), str)]
    if calls:
        out[f"{step}_call_id"] = calls[0]
    return out
