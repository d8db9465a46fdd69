"""Reading a server the way its users do: the official ``openai`` SDKs for Python and Node, and raw HTTP.

``read_with_python`` and ``read_with_node`` take the same cases (``{"name", "kind", "request"}``,
kinds ``chat | chat_stream | chat_helper | completions | completions_stream``) and give the same
result per case: ``{name, ok, error, status, text, reasoning, tool_calls: [{id, name, arguments}],
finish_reason}`` for choice 0, as a client holds it in the end. ``error`` is
``"ClassName: message"`` of what the SDK raised (``BadRequestError``, ``APIError``, …).

``raw_exchange`` sends one request with urllib and returns the status, the headers and the body
bytes exactly as they came (no SDK between the server and the checker).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletion

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
NODE_SCRIPT = NODE_DIR / "read.mjs"
KINDS = ("chat", "chat_stream", "chat_helper", "completions", "completions_stream")


def node_available() -> bool:
    return shutil.which("node") is not None and (NODE_DIR / "node_modules" / "openai").is_dir()


# ---------------------------------------------------------------------------------------------------
# Raw HTTP


def raw_exchange(
    base_url: str, path: str, request: Mapping[str, Any] | bytes, *, timeout: float = 60.0
) -> tuple[int, dict[str, str], bytes]:
    """POST ``request`` (a JSON body, or raw bytes sent as they are) to ``base_url + path``."""
    data = request if isinstance(request, bytes) else json.dumps(request).encode()
    http = urllib.request.Request(
        base_url.rstrip("/") + path, data, {"Content-Type": "application/json", "Authorization": "Bearer x"}
    )
    try:
        with urllib.request.urlopen(http, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


# ---------------------------------------------------------------------------------------------------
# The official Python SDK


def _split(method: Callable[..., Any], request: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's keys the SDK method takes by name, and the rest (sent in ``extra_body``)."""
    names = set(inspect.signature(method).parameters) - {"extra_headers", "extra_query", "extra_body", "timeout"}
    named = {k: v for k, v in request.items() if k in names and k != "stream"}
    extra = {k: v for k, v in request.items() if k not in names}
    return named, extra


def _calls(calls: Iterable[Any] | None) -> list[dict[str, Any]]:
    return [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in calls or ()]


def _reasoning(obj: Any) -> str:
    """``reasoning_content`` (or ``reasoning``): not in the SDK's types, kept as an extra attribute."""
    value = getattr(obj, "reasoning_content", None) or getattr(obj, "reasoning", None)
    return value if isinstance(value, str) else ""


def _from_message(message: Any, finish: Any) -> dict[str, Any]:
    return {
        "text": message.content or "",
        "reasoning": _reasoning(message),
        "tool_calls": _calls(message.tool_calls),
        "finish_reason": finish,
    }


def _read_python(client: openai.OpenAI, kind: str, request: Mapping[str, Any]) -> dict[str, Any]:
    chat = client.chat.completions
    if kind.startswith("chat") and "messages" not in request:
        # create() cannot be called without messages; the generic post sends the body as it is.
        body = {k: v for k, v in request.items() if k != "stream"}
        response = client.post("/chat/completions", body=body, cast_to=ChatCompletion)
        return _from_message(response.choices[0].message, response.choices[0].finish_reason)
    if kind == "chat":
        named, extra = _split(chat.create, request)
        response = chat.create(**named, stream=False, extra_body=extra or None)
        return _from_message(response.choices[0].message, response.choices[0].finish_reason)
    if kind == "chat_stream":
        named, extra = _split(chat.create, request)
        text, reasoning, finish = "", "", None
        calls: dict[int, dict[str, Any]] = {}
        for chunk in chat.create(**named, stream=True, extra_body=extra or None):
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                text += delta.content or ""
                reasoning += _reasoning(delta)
                for call in delta.tool_calls or ():
                    slot = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                    slot["id"] = slot["id"] or call.id
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["arguments"] += call.function.arguments or ""
                finish = choice.finish_reason or finish
        return {
            "text": text,
            "reasoning": reasoning,
            "tool_calls": [calls[i] for i in sorted(calls)],
            "finish_reason": finish,
        }
    if kind == "chat_helper":
        named, extra = _split(chat.stream, request)
        with chat.stream(**named, extra_body=extra or None) as stream:
            final = stream.get_final_completion()
        return _from_message(final.choices[0].message, final.choices[0].finish_reason)
    completions = client.completions
    if kind == "completions":
        named, extra = _split(completions.create, request)
        response = completions.create(**named, stream=False, extra_body=extra or None)
        choice = response.choices[0]
        return {"text": choice.text, "reasoning": "", "tool_calls": [], "finish_reason": choice.finish_reason}
    if kind == "completions_stream":
        named, extra = _split(completions.create, request)
        text, finish = "", None
        for chunk in completions.create(**named, stream=True, extra_body=extra or None):
            for choice in chunk.choices:
                if choice.index == 0:
                    text += choice.text or ""
                    finish = choice.finish_reason or finish
        return {"text": text, "reasoning": "", "tool_calls": [], "finish_reason": finish}
    raise ValueError(f"unknown kind {kind!r}")


def read_with_python(base_url: str, cases: Sequence[Mapping[str, Any]], *, api_key: str = "x") -> list[dict[str, Any]]:
    """Each case read by the official Python SDK (sync client, no retries)."""
    client = openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0, timeout=60)
    results = []
    try:
        for case in cases:
            try:
                read = _read_python(client, case["kind"], case["request"])
                results.append({"name": case["name"], "ok": True, "error": None, **read})
            except openai.OpenAIError as exc:
                status = getattr(exc, "status_code", None)
                results.append(
                    {"name": case["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}", "status": status}
                )
    finally:
        client.close()
    return results


# ---------------------------------------------------------------------------------------------------
# The official Node SDK


def read_with_node(base_url: str, cases: Sequence[Mapping[str, Any]], *, api_key: str = "x") -> list[dict[str, Any]]:
    """Each case read by the official Node SDK (``tests/node/read.mjs``, one node process for all)."""
    payload = {"baseURL": base_url.rstrip("/") + "/v1", "apiKey": api_key, "cases": list(cases)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        ["node", str(NODE_SCRIPT)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        cwd=NODE_DIR,
        env=env,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"node exited with {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


__all__ = ["KINDS", "node_available", "raw_exchange", "read_with_node", "read_with_python"]
