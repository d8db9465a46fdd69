"""A stored response as a stream timeline: each SSE event with its offset, the delta it carries,
the first token, and the final message a client holds at the end (pure: records in, values out)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import orjson

from oaishim.capture.record import body_bytes, body_head, header_value, path_of
from oaishim.check import looks_like_sse
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion
from oaishim.wire.sse import SSEDecoder, SSEEvent


class TimedEvent:
    """One SSE event of a stored stream, with the time of the read that completed it. (A plain
    class: a slotted dataclass is rebuilt as an interpreted one, and there is one of these an event.)"""

    __slots__ = ("event", "t_ms")

    def __init__(self, t_ms: float, event: SSEEvent) -> None:
        self.t_ms: Final = t_ms  # the time of the read that completed the event
        self.event: Final = event

    def __repr__(self) -> str:
        return f"TimedEvent(t_ms={self.t_ms!r}, event={self.event!r})"

    def json(self) -> Any:
        try:
            return orjson.loads(self.event.data)
        except orjson.JSONDecodeError:
            return None


def is_stream(response: Mapping[str, Any] | None) -> bool:
    if not response:
        return False
    return looks_like_sse(body_head(response, 64), header_value(response, "content-type"))


def iter_timed_events(response: Mapping[str, Any] | None) -> Iterator[TimedEvent]:
    """Decode a stored stream read by read, so each event gets the time its last byte arrived.

    A read is fed to the decoder an event at a time (cut after each blank line), so a reader that
    stops early (the first token's time) decodes only what it reads."""
    if not is_stream(response):
        return
    assert response is not None
    data = body_bytes(response)
    decoder = SSEDecoder()
    position = 0
    last = float(response.get("t") or 0.0)
    for read in response.get("reads") or []:
        last, size = float(read[0]), int(read[1])
        end = position + size
        while position < end:
            cut = data.find(b"\n\n", position, end)
            cut = end if cut < 0 else cut + 2
            for event in decoder.feed(data[position:cut]):
                yield TimedEvent(last, event)
            position = cut
    if position < len(data):  # reads missing or short (a redacted stream): the rest at the last time
        for event in decoder.feed(data[position:]):
            yield TimedEvent(last, event)
    for event in decoder.flush():
        yield TimedEvent(last, event)


def timed_events(response: Mapping[str, Any] | None) -> list[TimedEvent]:
    return list(iter_timed_events(response))


def _choice_text(choice: Mapping[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        parts = [delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning")]
        text = "".join(p for p in parts if isinstance(p, str))
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                text += str(function.get("name") or "") + str(function.get("arguments") or "")
        return text
    legacy = choice.get("text")
    return legacy if isinstance(legacy, str) else ""


_RESPONSES_TERMINAL: Final = ("response.completed", "response.incomplete", "response.failed")


def _responses_delta(chunk: Mapping[str, Any]) -> str | None:
    """The text a Responses event adds (``response.*.delta``), None for other events."""
    kind = chunk.get("type")
    if isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
        delta = chunk.get("delta")
        return delta if isinstance(delta, str) else None
    return None


def carries_token(chunk: Any) -> bool:
    """Whether a stream chunk carries generated text (content, reasoning, a tool call, legacy text;
    a Responses ``*.delta`` event)."""
    if not isinstance(chunk, dict):
        return False
    if "type" in chunk and "choices" not in chunk:
        return bool(_responses_delta(chunk))
    choices = chunk.get("choices")
    return any(isinstance(c, dict) and _choice_text(c) for c in choices or [] if isinstance(choices, list))


def first_token_ms(events: Iterable[TimedEvent]) -> float | None:
    """The time of the first event carrying generated text (an iterator stops being read there)."""
    return next((e.t_ms for e in events if carries_token(e.json())), None)


def describe(event: TimedEvent) -> str:
    """One line for a timeline: the delta of each choice, or what else the event is."""
    if event.event.data == "[DONE]":
        return "[DONE]"
    chunk = event.json()
    if not isinstance(chunk, dict):
        return "(not JSON) " + event.event.data[:80]
    if isinstance(chunk.get("type"), str) and "choices" not in chunk:
        return _describe_responses(chunk)
    if "error" in chunk and "choices" not in chunk:
        return "error " + orjson.dumps(chunk["error"]).decode()[:100]
    parts: list[str] = []
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        bits = []
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("role"):
            bits.append(f"role={delta['role']}")
        text = _choice_text(choice)
        if text:
            bits.append(orjson.dumps(text).decode())
        if choice.get("finish_reason"):
            bits.append(f"finish_reason={choice['finish_reason']}")
        prefix = f"[{choice.get('index')}] " if choice.get("index") not in (0, None) else ""
        parts.append(prefix + (" ".join(bits) or "{}"))
    if chunk.get("usage"):
        parts.append("usage " + orjson.dumps(chunk["usage"]).decode())
    return "; ".join(parts) or "(no choices)"


def _describe_responses(chunk: Mapping[str, Any]) -> str:
    """A Responses event: its type, then the delta text, the item opened or closed, or the status."""
    kind = str(chunk["type"])
    delta = _responses_delta(chunk)
    if delta is not None:
        return f"{kind} {orjson.dumps(delta).decode()}"
    item = chunk.get("item")
    if isinstance(item, dict):
        return f"{kind} {item.get('type')} {item.get('id') or ''}".rstrip()
    response = chunk.get("response")
    if isinstance(response, dict):
        usage = response.get("usage")
        tail = f" usage {orjson.dumps(usage).decode()}" if isinstance(usage, dict) else ""
        return f"{kind} status={response.get('status')}{tail}"
    if kind == "error":
        return f"error {orjson.dumps({k: chunk.get(k) for k in ('code', 'message', 'param')}).decode()[:100]}"
    return kind


def final_message(response: Mapping[str, Any] | None, target: str = "") -> Any:
    """What a client holds at the end: the accumulated stream, or the plain body; for a Responses
    stream the terminal event's ``response`` (what the SDK's ``get_final_response()`` gives)."""
    if not response:
        return None
    if not is_stream(response):
        try:
            return orjson.loads(body_bytes(response))
        except orjson.JSONDecodeError:
            return body_bytes(response).decode("utf-8", "replace")
    chunks = []
    final: Any = None
    for event in timed_events(response):
        chunk = event.json()
        if isinstance(chunk, dict) and isinstance(chunk.get("choices"), list):
            chunks.append(chunk)
        elif isinstance(chunk, dict) and chunk.get("type") in _RESPONSES_TERMINAL:
            final = chunk.get("response")
    if final is not None or (not chunks and "/responses" in path_of(target)):
        return final if final is not None else {"error": "the Responses stream has no terminal event"}
    legacy = path_of(target).endswith("/completions") and not path_of(target).endswith("chat/completions")
    try:
        return accumulate_completion(chunks) if legacy else accumulate_chat(chunks)
    except (TypeError, ValueError) as exc:  # a chunk the accumulator cannot fold (a broken stream)
        return {"error": f"cannot accumulate the stream: {exc}"}
