"""Helpers for checker tests: the 12 live OpenAI streams as chunk lists, and back to bytes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson

LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "openai-live"
LIVE_FILES = sorted(LIVE.glob("*.sse"))


def live_chunks(name: str) -> list[dict[str, Any]]:
    """The JSON chunks of a live stream (without [DONE]), decoded by a plain line split."""
    out = []
    for line in (LIVE / name).read_bytes().split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return copy.deepcopy(out)


def to_sse(chunks: list[Any], *, done: bool = True) -> bytes:
    parts = [b"data: " + (c if isinstance(c, bytes) else orjson.dumps(c)) + b"\n\n" for c in chunks]
    if done:
        parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def content_chunks(chunks: list[dict[str, Any]]) -> list[int]:
    """Positions of the chunks that carry content text."""
    return [i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("content")]


RESPONSES = Path(__file__).resolve().parents[1] / "fixtures" / "openai-live-responses"
# The recordings of the real API; the custom-tool pair is hand-written (ids like resp_custom_tool_test_001,
# no sequence_number) and lmstudio-* is another server.
RESPONSES_REAL = [
    RESPONSES / name
    for name in (
        "text.sse",
        "text.json",
        "reasoning-summary-text.sse",
        "reasoning-summary-then-function-call.sse",
        "reasoning-summary-then-text.json",
        "error-insufficient-quota.sse",
    )
]


def response_events(name: str, segment: int = 0) -> list[dict[str, Any]]:
    """The events of one response in a Responses recording (some hold several back to back)."""
    segments: list[list[dict[str, Any]]] = []
    for line in (RESPONSES / name).read_bytes().split(b"\n"):
        if line.startswith(b"data: "):
            event = orjson.loads(line[6:])
            if event["type"] == "response.created":
                segments.append([])
            segments[-1].append(event)
    return copy.deepcopy(segments[segment])


def to_response_sse(events: list[dict[str, Any]], *, renumber: bool = True) -> bytes:
    """Frame events as the Responses API does; ``renumber`` restores sequence_number 0, 1, 2, …"""
    out = []
    for i, event in enumerate(events):
        framed = {**event, "sequence_number": i} if renumber else event
        out.append(b"event: " + framed["type"].encode() + b"\ndata: " + orjson.dumps(framed) + b"\n\n")
    return b"".join(out)
