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
