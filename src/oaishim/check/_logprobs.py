"""Rule d (logprobs): each endpoint has its own shape, and alternatives match what was asked.

Chat: ``{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal"}``
with ``top_logprobs`` of the length the request's ``top_logprobs`` asked for (the spec: "may be fewer
than requested", so fewer is a note). Legacy completions: ``{tokens, token_logprobs, top_logprobs:
[{token: logprob}], text_offset}``, with at most ``logprobs + 1`` alternatives per token ("up to
``logprobs+1`` elements"). llama.cpp answers /v1/completions in the chat shape (docs/backend-quirks.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from oaishim.check._findings import Sink, jpath

_LEGACY_KEYS: Final = frozenset({"tokens", "token_logprobs", "top_logprobs", "text_offset"})


def _is_chat_shaped(logprobs: Mapping[str, Any]) -> bool:
    return "content" in logprobs or "refusal" in logprobs


def _is_legacy_shaped(logprobs: Mapping[str, Any]) -> bool:
    return not _LEGACY_KEYS.isdisjoint(logprobs.keys())


def _asked(request: Mapping[str, Any] | None, chat: bool) -> bool | None:
    if request is None:
        return None
    if chat:
        return request.get("logprobs") is True
    return isinstance(request.get("logprobs"), int) and not isinstance(request.get("logprobs"), bool)


def check_choice_logprobs(
    choice: Mapping[str, Any],
    i: int,
    request: Mapping[str, Any] | None,
    sink: Sink,
    *,
    chat: bool,
    chunk: int | None = None,
) -> None:
    """Check one choice's ``logprobs`` (in a plain body when ``chunk`` is None, else in a chunk)."""
    path = jpath("choices", i, "logprobs")
    logprobs = choice.get("logprobs")
    asked = _asked(request, chat)
    if not isinstance(logprobs, dict):
        if asked and chunk is None:
            sink.add("logprobs.shape", path, "logprobs were requested but the choice has none", chunk=chunk)
        return
    if chat and _is_legacy_shaped(logprobs) and not _is_chat_shaped(logprobs):
        sink.add("logprobs.shape", path, "legacy completions-shaped logprobs on the chat endpoint", chunk=chunk)
        return
    if not chat and _is_chat_shaped(logprobs):
        sink.add("logprobs.shape", path, "chat-shaped logprobs on the legacy completions endpoint", chunk=chunk)
        return
    if asked is False:
        sink.add(
            "logprobs.unrequested",
            path,
            "logprobs sent although the request did not ask for them",
            chunk=chunk,
        )
        return
    if request is None:
        return
    if chat:
        _check_chat_top(logprobs, path, request, sink, chunk)
    else:
        _check_legacy_top(logprobs, path, request, sink, chunk)


def _check_chat_top(
    logprobs: Mapping[str, Any], path: str, request: Mapping[str, Any], sink: Sink, chunk: int | None
) -> None:
    want = request.get("top_logprobs") or 0
    for j, entry in enumerate(logprobs.get("content") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            continue  # rule a reports a missing or mistyped top_logprobs
        got = len(entry["top_logprobs"])
        where = f"{path}.content[{j}].top_logprobs"
        if got > want:
            sink.add("logprobs.top-n", where, f"{got} alternatives, {want} requested", chunk=chunk)
        elif got < want:
            sink.add("logprobs.top-n", where, f"{got} alternatives, {want} requested", chunk=chunk, severity="note")


def _check_legacy_top(
    logprobs: Mapping[str, Any], path: str, request: Mapping[str, Any], sink: Sink, chunk: int | None
) -> None:
    want = request["logprobs"]
    for j, entry in enumerate(logprobs.get("top_logprobs") or []):
        if isinstance(entry, dict) and len(entry) > want + 1:
            sink.add(
                "logprobs.top-n",
                f"{path}.top_logprobs[{j}]",
                f"{len(entry)} alternatives, at most {want + 1} for logprobs={want}",
                chunk=chunk,
            )
