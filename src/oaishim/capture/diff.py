"""Comparing two responses to the same request (``oaishim replay``): pure, stored shapes in and out.

What is compared, in this order, each a kind the user can ignore:

* ``status`` — the HTTP status;
* ``stream`` — one answer streamed and the other not;
* ``fields`` — the set of JSON paths present (``$.choices[*].delta.content``), over every chunk of
  a stream: a field that appeared or disappeared is what breaks clients after an upgrade;
* ``text`` — each choice's final text (content, reasoning, tool-call names and arguments);
* ``finish_reason`` — each choice's (a Responses answer: its terminal ``status``, its text the
  output items' texts and calls, read from ``response.completed`` for a stream);
* ``findings`` — the checker's rule ids, counted.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from oaishim.capture.build import findings_of
from oaishim.capture.record import body_bytes
from oaishim.capture.timeline import final_message, is_stream, timed_events

KINDS = ("status", "stream", "fields", "text", "finish_reason", "findings")


@dataclass(frozen=True, slots=True)
class Observed:
    status: int | None
    stream: bool
    fields: frozenset[str]
    texts: dict[int, str]
    finish: dict[int, Any]
    rules: Counter[str]


@dataclass(frozen=True, slots=True)
class Difference:
    kind: str
    message: str


def field_paths(value: Any, path: str = "$", out: set[str] | None = None) -> set[str]:
    found = set() if out is None else out
    if isinstance(value, Mapping):
        for key, item in value.items():
            child = f"{path}.{key}"
            found.add(child)
            field_paths(item, child, found)
    elif isinstance(value, list):
        for item in value:
            field_paths(item, path + "[*]", found)
    return found


def _choice_text(choice: Mapping[str, Any]) -> str:
    message = choice.get("message")
    if not isinstance(message, Mapping):
        text = choice.get("text")
        return text if isinstance(text, str) else ""
    parts = [message.get(k) for k in ("content", "reasoning_content", "reasoning", "refusal")]
    text = "".join(p for p in parts if isinstance(p, str))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            text += f"\n{function.get('name')}({function.get('arguments')})"
    return text


def _response_text(response: Mapping[str, Any]) -> str:
    """A Responses answer's text: its output items' texts (message, reasoning) and calls, in order."""
    out: list[str] = []
    for item in response.get("output") or []:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") in ("function_call", "custom_tool_call"):
            out.append(f"\n{item.get('name')}({item.get('arguments', item.get('input'))})")
            continue
        for part in item.get("content") or []:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return "".join(out)


def observe(
    request: Mapping[str, Any], response: Mapping[str, Any], findings: Iterable[Mapping[str, Any]] | None = None
) -> Observed:
    """What is compared of one response. ``findings`` when already known (stored), else the checker runs."""
    stream = is_stream(response)
    fields: set[str] = set()
    if stream:
        for event in timed_events(response):
            field_paths(event.json(), "$", fields)
    else:
        with contextlib.suppress(orjson.JSONDecodeError):
            field_paths(orjson.loads(body_bytes(response)), "$", fields)
    final = final_message(response, str(request.get("target", "")))
    choices = final.get("choices") if isinstance(final, Mapping) else None
    texts: dict[int, str] = {}
    finish: dict[int, Any] = {}
    for position, choice in enumerate(choices if isinstance(choices, list) else []):
        if isinstance(choice, Mapping):
            index = choice.get("index", position)
            texts[index] = _choice_text(choice)
            finish[index] = choice.get("finish_reason")
    if isinstance(final, Mapping) and final.get("object") == "response":
        texts[0], finish[0] = _response_text(final), final.get("status")
    found = findings if findings is not None else findings_of(request, response)
    rules = Counter(str(f.get("rule")) for f in found)
    return Observed(response.get("status"), stream, frozenset(fields), texts, finish, rules)


def _first_difference(old: str, new: str) -> int:
    return next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))


def compare(old: Observed, new: Observed, ignore: Iterable[str] = ()) -> list[Difference]:
    skip = set(ignore)
    out: list[Difference] = []
    if "status" not in skip and old.status != new.status:
        out.append(Difference("status", f"status {old.status} -> {new.status}"))
    if "stream" not in skip and old.stream != new.stream:
        out.append(Difference("stream", f"streamed {old.stream} -> {new.stream}"))
    if "fields" not in skip:
        for path in sorted(new.fields - old.fields):
            out.append(Difference("fields", f"+ {path}"))
        for path in sorted(old.fields - new.fields):
            out.append(Difference("fields", f"- {path}"))
    for index in sorted(set(old.texts) | set(new.texts)):
        a, b = old.texts.get(index), new.texts.get(index)
        if "text" not in skip and a != b:
            if a is None or b is None:
                out.append(Difference("text", f"choice {index}: {'added' if a is None else 'removed'}"))
            else:
                at = _first_difference(a, b)
                out.append(
                    Difference("text", f"choice {index}: differs at {at}: {a[at : at + 30]!r} -> {b[at : at + 30]!r}")
                )
        if "finish_reason" not in skip and old.finish.get(index) != new.finish.get(index):
            out.append(
                Difference("finish_reason", f"choice {index}: {old.finish.get(index)} -> {new.finish.get(index)}")
            )
    if "findings" not in skip:
        for rule in sorted(set(old.rules) | set(new.rules)):
            if old.rules[rule] != new.rules[rule]:
                out.append(Difference("findings", f"{rule}: {old.rules[rule]} -> {new.rules[rule]}"))
    return out
