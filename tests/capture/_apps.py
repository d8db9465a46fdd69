"""What the capture tests share: ASGI apps (gateway, proxy, mock) under the gateway's HTTP server in a thread on
127.0.0.1, stopped by the fixture or ``with`` block that started them, and small HTTP helpers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from _threadserver import ThreadServer
from oaishim.capture.build import build_record
from oaishim.capture.raw import RawExchange, RawRequest, RawResponse
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter
from oaishim.server.serving import Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RunningApp:
    """Any ASGI app under the gateway's HTTP server, in a thread of this process, on 127.0.0.1."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.server = ThreadServer(Server(app, "127.0.0.1", self.port, date_header=False))
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RunningApp:
        self.server.start("the app")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def sse(*chunks: Mapping[str, Any] | str) -> list[bytes]:
    """SSE events, one per chunk (a str is sent as data as it is, e.g. "[DONE]")."""
    return [b"data: " + (c.encode() if isinstance(c, str) else orjson.dumps(c)) + b"\n\n" for c in chunks]


def chat_chunks(text_pieces: Sequence[str], *, model: str = "tiny", finish: str = "stop") -> list[bytes]:
    """A llama.cpp-like chat stream: role chunk, one chunk per piece, the finish, [DONE]."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-abc",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    return sse(
        chunk({"role": "assistant", "content": None}),
        *(chunk({"content": p}) for p in text_pieces),
        chunk({}, finish),
        "[DONE]",
    )


def chat_answer(
    content: str,
    *,
    answer_id: str = "chatcmpl-1",
    model: str = "tiny",
    prompt_tokens: int = 1,
    completion_tokens: int = 1,
) -> dict[str, Any]:
    """A plain chat completion answering ``content``, as the streams of :func:`chat_chunks` end."""
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def backend_record(
    request: Mapping[str, Any],
    pieces: Sequence[bytes],
    *,
    path: str = "/v1/chat/completions",
    step_ms: float = 0.0,
    status: int = 200,
    content_type: str = "text/event-stream",
) -> RawExchange:
    """A finished exchange as a recorder would collect it: a client request to the backend and its
    answer in ``pieces``, one every ``step_ms`` (a proxy capture; the mock serves its upstream side)."""
    t0 = time.perf_counter_ns()
    step = int(step_ms * 1e6)
    body = orjson.dumps(request)
    headers = [(b"content-type", b"application/json")]
    raw = RawExchange(t0, time.time(), "proxy")
    raw.client_request = RawRequest(t0, "POST", path, headers, [body])
    raw.upstream_request = RawRequest(t0, "POST", "http://127.0.0.1:1" + path, headers, [body])
    for which in ("client_response", "upstream_response"):
        response = RawResponse(t0 + step, status, [(b"content-type", content_type.encode())])
        response.reads = [(t0 + step * (i + 2), p) for i, p in enumerate(pieces)]
        response.complete = True
        setattr(raw, which, response)
    raw.end_ns = t0 + step * (len(pieces) + 2)
    return raw


def write_store(directory: Path, exchanges: Sequence[RawExchange], **writer: Any) -> None:
    store = CaptureWriter(directory, lambda raw: build_record(raw, Redactor()), **writer).start()
    for exchange in exchanges:
        assert store.submit(exchange)
    store.close()


async def read_stream(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any], **kw: Any) -> bytes:
    async with session.post(url, json=body, **kw) as response:
        return await response.read()


def post(url: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    async def go() -> tuple[int, bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json=body, headers=dict(headers or {})) as response,
        ):
            return response.status, await response.read()

    return asyncio.run(go())


def get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    async def go() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session, session.get(url, headers=dict(headers or {})) as response:
            return response.status, await response.read()

    return asyncio.run(go())


class EchoBackend:
    """A small backend (ASGI) that notes each request's headers and answers a chat request with a
    short stream or body; ``/echo-auth`` answers 401 quoting the Authorization it got, as some
    servers do. Every answer sets a cookie, so response headers carry a secret too."""

    def __init__(self, cookie: str = "session=none") -> None:
        self.cookie = cookie
        self.seen: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append(headers)
        cookie = (b"set-cookie", self.cookie.encode())
        if scope["path"] == "/echo-auth":
            payload = orjson.dumps({"error": {"message": f"invalid key: {headers.get('authorization')}"}})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), cookie],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        request = orjson.loads(body) if body else {}
        if request.get("stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), cookie],
                }
            )
            for piece in chat_chunks(["Hi", " there"]):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = chat_answer("Hi there", prompt_tokens=3, completion_tokens=2)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), cookie]}
        )
        await send({"type": "http.response.body", "body": orjson.dumps(answer)})
