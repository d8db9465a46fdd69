"""A chat completion body as the ``Response`` object (``POST /v1/responses`` without ``stream``).

The message is fed, as one chunk, through the same encoder the stream uses, with framing off: the
items, ids, statuses and terminal state come from one piece of code, so the plain body and the
stream's final response cannot disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from oaishim.transform.responses._info import ResponsesRequestInfo, new_id
from oaishim.transform.responses.stream import ResponsesStreamEncoder
from oaishim.wire.errors import upstream_error

__all__ = ["chat_to_response"]


def _as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise upstream_error("the upstream answer has no choice")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise upstream_error("the upstream answer has no message")
    delta = {k: message.get(k) for k in ("reasoning_content", "reasoning", "content", "refusal")}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(calls) if isinstance(call, dict)]
    return {
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason") or "stop",
            }
        ],
        "usage": completion.get("usage"),
    }


def chat_to_response(
    completion: dict[str, Any],
    info: ResponsesRequestInfo,
    *,
    response_id: str | None = None,
    created_at: int | None = None,
    id_factory: Callable[[str], str] = new_id,
    key: bytes | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """The official ``Response``; :class:`OpenAIError` (502) for a body without an answer."""
    encoder = ResponsesStreamEncoder(
        info, response_id=response_id, created_at=created_at, id_factory=id_factory, key=key, clock=clock, framed=False
    )
    encoder.feed(_as_chunk(completion))
    encoder.end()
    response = encoder.result()  # the encoder and the request's info end with the request: no copy
    if response["status"] == "failed":
        error = response["error"] or {}
        raise upstream_error(str(error.get("message", "the upstream answer could not be read")))
    return response
