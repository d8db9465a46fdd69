"""What the response side must know about a Responses request, and the ``Response`` object it echoes.

The official ``Response`` repeats the request's settings (``model``, ``instructions``, ``tools``,
``temperature``, ``text.format``, ...) with the default filled in where the client sent nothing, in
the order the real API writes them (the recordings). :func:`response_object` builds that shell;
the output items, status, error and usage are filled in by whoever generates the answer.

Usage and failure codes are mapped here too, since both the stream and the plain body need them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from oaishim.transform.ids import random_hex
from oaishim.wire.errors import OpenAIError

__all__ = [
    "IdFactory",
    "ResponsesRequestInfo",
    "failure_code",
    "item_ids",
    "new_id",
    "response_object",
    "response_of_item",
    "responses_usage",
]

IdFactory = Callable[[str], str]
INCLUDE_ENCRYPTED: Final = "reasoning.encrypted_content"
INCLUDE_LOGPROBS: Final = "message.output_text.logprobs"


def new_id(prefix: str) -> str:
    """``resp_``, ``msg_``, ``rs_``, ``fc_`` + 48 hex digits, the length the real ids have."""
    return f"{prefix}_{random_hex(24)}"


_ITEM_ID: Final = re.compile(r"[a-z]+_([0-9a-f]{48})[0-9a-f]{4}")


_HEX2: Final = [f"{n:02x}" for n in range(256)]


class _ItemIds:
    """:func:`item_ids`' factory: the counter's 4 digits from a table, not through ``format``
    (which parses its spec each time: 6.7k instructions an id against a few hundred)."""

    __slots__ = ("_head", "_next")

    def __init__(self, digits: str) -> None:
        self._head = "_" + digits
        self._next = 0

    def __call__(self, prefix: str) -> str:
        n = self._next
        self._next = n + 1
        tail = _HEX2[n >> 8] + _HEX2[n & 255] if n < 65536 else f"{n:04x}"
        return prefix + self._head + tail


def item_ids(response_id: str) -> IdFactory:
    """Ids for the items of one response (its input items and its output): the response's own 48
    digits and a 4-digit counter, so that an ``item_reference`` to any of them names the stored
    response to read (:func:`response_of_item`) without an index of items."""
    return _ItemIds(response_id.removeprefix("resp_"))


def response_of_item(item_id: str) -> str | None:
    """The response an id made by :func:`item_ids` belongs to; None for any other id."""
    match = _ITEM_ID.fullmatch(item_id)
    return None if match is None else f"resp_{match.group(1)}"


class ResponsesRequestInfo:
    """The request's settings as the response echoes them (defaults already filled in), plus what the
    generator needs: which tools are custom, whether logprobs and encrypted reasoning were asked.
    (A plain class with its own ``__init__``: the one a dataclass is given is generated Python,
    compiled or not, and making it was 14k instructions a Responses request.)"""

    __slots__ = (
        "background", "custom_tools", "include", "input_items", "instructions", "max_output_tokens",
        "max_tool_calls", "metadata", "model", "namespaced", "parallel_tool_calls", "previous_response_id",
        "prompt_cache_key", "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier",
        "store", "stream", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
        "truncation", "user",
    )  # fmt: skip

    def __init__(
        self,
        model: str,
        *,
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = "auto",
        text: dict[str, Any] | None = None,
        reasoning: dict[str, Any] | None = None,
        temperature: int | float = 1.0,
        top_p: int | float = 1.0,
        top_logprobs: int = 0,
        max_output_tokens: int | None = None,
        max_tool_calls: int | None = None,
        parallel_tool_calls: bool = True,
        previous_response_id: str | None = None,
        store: bool = True,
        stream: bool = False,
        background: bool = False,
        truncation: str = "disabled",
        metadata: dict[str, str] | None = None,
        user: str | None = None,
        safety_identifier: str | None = None,
        prompt_cache_key: str | None = None,
        prompt_cache_retention: str | None = None,
        service_tier: str = "default",
        include: list[str] | None = None,
        input_items: list[dict[str, Any]] | None = None,
        custom_tools: frozenset[str] = frozenset(),
        namespaced: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.tools: list[dict[str, Any]] = [] if tools is None else tools
        self.tool_choice = tool_choice
        self.text: dict[str, Any] = {"format": {"type": "text"}, "verbosity": "medium"} if text is None else text
        self.reasoning: dict[str, Any] = {"effort": None, "summary": None} if reasoning is None else reasoning
        self.temperature = temperature
        self.top_p = top_p
        self.top_logprobs = top_logprobs
        self.max_output_tokens = max_output_tokens
        self.max_tool_calls = max_tool_calls
        self.parallel_tool_calls = parallel_tool_calls
        self.previous_response_id = previous_response_id
        self.store = store
        self.stream = stream
        self.background = background
        self.truncation = truncation
        self.metadata: dict[str, str] = {} if metadata is None else metadata
        self.user = user
        self.safety_identifier = safety_identifier
        self.prompt_cache_key = prompt_cache_key
        self.prompt_cache_retention = prompt_cache_retention
        self.service_tier = service_tier
        self.include: list[str] = [] if include is None else include
        # the request's input as ``GET /v1/responses/{id}/input_items`` lists it (ids assigned)
        self.input_items: list[dict[str, Any]] = [] if input_items is None else input_items
        # names of ``custom`` tools: the backend sees them as functions, the client gets custom calls back
        self.custom_tools = custom_tools
        # chat names of the members of ``namespace`` tools -> (namespace, name) their calls are given back with
        self.namespaced: dict[str, tuple[str, str]] = {} if namespaced is None else namespaced

    @property
    def logprobs(self) -> bool:
        return INCLUDE_LOGPROBS in self.include or self.top_logprobs > 0

    @property
    def encrypted_reasoning(self) -> bool:
        return INCLUDE_ENCRYPTED in self.include


def response_object(info: ResponsesRequestInfo, response_id: str, created_at: int) -> dict[str, Any]:
    """The ``Response`` shell in ``in_progress`` state: settings echoed, no output, no usage."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": info.background,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": info.instructions,
        "max_output_tokens": info.max_output_tokens,
        "max_tool_calls": info.max_tool_calls,
        "model": info.model,
        "output": [],
        "parallel_tool_calls": info.parallel_tool_calls,
        "previous_response_id": info.previous_response_id,
        "prompt_cache_key": info.prompt_cache_key,
        "prompt_cache_retention": info.prompt_cache_retention,
        "reasoning": dict(info.reasoning),
        "safety_identifier": info.safety_identifier,
        "service_tier": info.service_tier,
        "store": info.store,
        "temperature": info.temperature,
        "text": dict(info.text),
        "tool_choice": info.tool_choice,
        "tools": [dict(t) for t in info.tools],
        "top_logprobs": info.top_logprobs,
        "top_p": info.top_p,
        "truncation": info.truncation,
        "usage": None,
        "user": info.user,
        "metadata": dict(info.metadata),
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def responses_usage(chat_usage: Any) -> dict[str, Any] | None:
    """Chat usage -> Responses usage; None when the backend counted nothing (a made-up count would lie)."""
    if not isinstance(chat_usage, dict):
        return None
    prompt = _int(chat_usage.get("prompt_tokens"))
    completion = _int(chat_usage.get("completion_tokens"))
    total = chat_usage.get("total_tokens")
    prompt_details = chat_usage.get("prompt_tokens_details")
    completion_details = chat_usage.get("completion_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, dict) else {}
    cached = _int(prompt_details.get("cached_tokens"))
    # the current spec requires cache writes; a chat backend that counts none wrote none to report
    written = _int(prompt_details.get("cache_write_tokens"))
    reasoning = _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _int(total) if isinstance(total, int) else prompt + completion,
    }


# Codes a Responses client acts on (Codex: context window, quota, retry after a rate limit); an
# OpenAIError that already carries one keeps it.
_KEPT_CODES: Final = frozenset(
    {"context_length_exceeded", "rate_limit_exceeded", "insufficient_quota", "server_error", "invalid_prompt"}
)


def failure_code(error: OpenAIError) -> str:
    """The ``response.error.code`` for a failed generation."""
    if error.code in _KEPT_CODES:
        return error.code
    if error.status == 429:
        return "insufficient_quota" if error.type == "insufficient_quota" else "rate_limit_exceeded"
    if error.status >= 500 or error.status in (408, 409):
        return "server_error"
    return "invalid_prompt"  # the request's fault, not worth a retry
