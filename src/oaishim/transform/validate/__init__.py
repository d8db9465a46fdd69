"""Refuse, before any backend sees it, a request the official API would refuse.

Backends are lenient in different ways: llama.cpp reads a mistyped field as its default (L-2), vLLM,
SGLang and Ollama ignore unknown or odd values, TensorRT-LLM answers with pydantic's wording. A
client developed against any of them would break on the real API, and one developed against the real
API gets errors in the backend's words. So the gateway checks what the official API checks, answers
400 with ``param`` naming the field (``messages[3].role``), in the official wording and codes where we
know them (``_errors``).

Four passes, the first failure reported, as the official API reports one:

1. ``_limits``: nothing JSON or the backend cannot carry (nesting deeper than ``MAX_DEPTH``, integers
   beyond int64, NaN, lone surrogates), so no body can make the gateway fail later.
2. ``_fields``: the required field, then the documented scalars, messages, stops and tools, by hand:
   what clients most often get wrong, reported first and in the official words.
3. ``_schema``: the whole body against the official request schema (enums, nested shapes, every
   documented field); skipped for a plain chat request the second pass covers whole (``_covered``).
4. ``_cross``: rules between fields (tool names unique, ``tool_choice`` names an offered tool).

``null`` is accepted for every optional field: it means "the default". Fields the official API does
not define are left alone; they are the backends' extensions.
"""

from __future__ import annotations

from typing import Any

from oaishim.transform.validate._covered import covered
from oaishim.transform.validate._cross import check_tools_offered
from oaishim.transform.validate._errors import empty_array, invalid_type, invalid_value, json_type, missing
from oaishim.transform.validate._fields import Endpoint, check_fields
from oaishim.transform.validate._limits import MAX_DEPTH, check_limits
from oaishim.transform.validate._schema import check_schema
from oaishim.wire.errors import bad_request

# The message builders stay importable from here, as they were from the former module.
__all__ = ["MAX_DEPTH", "Endpoint", "empty_array", "invalid_type", "invalid_value", "json_type", "missing", "validate"]


def validate(endpoint: Endpoint, body: Any, *, from_json: bool = False) -> dict[str, Any]:
    """Raise :class:`OpenAIError` (400) for what the official API refuses; return the body.
    ``from_json``: ``body`` is ``orjson.loads``'s (see ``check_limits``)."""
    if not isinstance(body, dict):
        raise bad_request(f"Invalid type for request body: expected an object, but got {json_type(body)} instead.")
    check_limits(body, from_json=from_json)
    check_fields(endpoint, body)
    if not covered(endpoint, body):
        check_schema(endpoint, body)
    if endpoint == "chat":
        check_tools_offered(body)
    return body
