"""What the tiny-model tests share: one build per session, and a conversation to render.

A session-scoped fixture defined once and imported into two modules would be registered twice
and build twice; the build is kept here instead, in a module Python imports only once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from oaishim.engine.tinymodel import TinyModels

_built: dict[str, tuple[TinyModels, float]] = {}


def tiny_models(factory: pytest.TempPathFactory) -> tuple[TinyModels, float]:
    """The session's build and the seconds it took (the engine extra's packages are needed)."""
    from oaishim.engine.tinymodel import ensure_tiny_models

    if "tiny" not in _built:
        started = time.perf_counter()
        models = ensure_tiny_models(factory.mktemp("tiny-cache"))
        _built["tiny"] = (models, time.perf_counter() - started)
    return _built["tiny"]


# A conversation with everything the template renders: tools, calls (arguments as a string and
# as an object), grouped tool results, reasoning, content parts, a later developer message.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "\nTwo cities, two calls.\n",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]},
    {"role": "assistant", "content": "Paris: sunny. Rome: rain."},
    {"role": "developer", "content": "Answer in French."},
    {"role": "user", "content": [{"type": "text", "text": "Merci!"}]},
]
