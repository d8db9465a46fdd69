"""Rule e: what the request asked for, held against what came back.

Skipped when the request is unknown. Defaults are the official ones: ``n`` 1; legacy completions
``max_tokens`` 16 (docs/wire-format.md §2; vLLM and others generate far more, V-9); stop
strings never appear in the text unless the vLLM-style ``include_stop_str_in_output`` asked for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.check._findings import Sink, jpath


def _limit(request: Mapping[str, Any], chat: bool) -> int | None:
    for key in ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",):
        value = request.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None if chat else 16


def _stops(request: Mapping[str, Any]) -> list[str]:
    stop = request.get("stop")
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str) and s]
    return []


def _text(choice: Mapping[str, Any], chat: bool) -> str | None:
    if chat:
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else None
    text = choice.get("text")
    return text if isinstance(text, str) else None


def check_against_request(result: Mapping[str, Any], request: Mapping[str, Any], sink: Sink, *, chat: bool) -> None:
    """``result`` is the final object: a plain body, or a stream accumulated."""
    choices = [c for c in result.get("choices") or [] if isinstance(c, dict)]
    n = request.get("n")
    want_n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    if not chat and isinstance(request.get("prompt"), list) and request["prompt"]:
        prompt = request["prompt"]
        want_n *= len(prompt) if all(isinstance(p, (str, list)) for p in prompt) else 1
    if len(choices) != want_n:
        sink.add("request.n", "$.choices", f"{len(choices)} choices, {want_n} expected")
    limit = _limit(request, chat)
    usage = result.get("usage")
    if limit is not None and isinstance(usage, dict):
        used = usage.get("completion_tokens")
        if isinstance(used, int) and used > limit * max(want_n, 1):
            sink.add(
                "request.max-tokens",
                "$.usage.completion_tokens",
                f"{used} completion tokens, limit {limit} per choice",
            )
    stops = _stops(request)
    if stops and not request.get("include_stop_str_in_output"):
        for i, choice in enumerate(choices):
            text = _text(choice, chat)
            prompt = request.get("prompt")
            if text and not chat and request.get("echo") and isinstance(prompt, str) and text.startswith(prompt):
                text = text[len(prompt) :]  # an echoed prompt may hold the stop string legitimately
            hit = next((s for s in stops if text and s in text), None)
            if hit is not None:
                where = jpath("choices", i, "message", "content") if chat else jpath("choices", i, "text")
                sink.add("request.stop", where, f"stop string {hit!r} appears in the text")
