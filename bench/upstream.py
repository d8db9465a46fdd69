"""A fast synthetic upstream: vLLM-shaped chat completions, plain and streamed, and nothing else.

The point is to cost as little as possible, so that what the benchmark sees on top of the direct
path is the proxy. It is raw asyncio on uvloop with httptools parsing, keep-alive, every body
rendered once at start-up. Chunks are shaped like vLLM 0.32's (tests/fixtures/recorded/
vllm-0.32-cpu): the role chunk with ``prompt_token_ids``, ``token_ids: null`` on every choice,
``stop_reason`` and ``system_fingerprint`` on the last one, so the gateway has real rewriting to do.

* ``POST /v1/chat/completions``: ``max_tokens`` (or ``max_completion_tokens``) is the number of
  content chunks; ``stream_options.include_usage`` adds the usage chunk.
* ``POST /_bench/mode`` ``{"gap_ms": float, "hold": bool}``: the pause between chunks, and whether a
  stream stops after its first token until ``POST /_bench/release`` (the open-streams memory test).
* ``GET /_bench/stats``: connections accepted so far. ``GET /health``, ``GET /v1/models``.

Usage: ``python bench/upstream.py PORT`` (prints ``ready`` when listening).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, ClassVar

import httptools
import orjson
import uvloop

MODEL = "Qwen/Qwen3-8B"
CREATED = 1795986276
RID = "chatcmpl-a3f61ec29ed511e2"
FIRST_WORD = " Greetings"  # the load generator's first-token marker
WORDS = [
    " the", " answer", " depends", " on", " how", " you", " measure", " it", ",", " but", " in", " most",
    " cases", " a", " reverse", " proxy", " adds", " less", " than", " one", " millisecond", ".",
]  # fmt: skip
PROMPT_TOKENS = 64


def _sse(obj: dict[str, Any]) -> bytes:
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)  # one HTTP/1.1 chunk per event, as uvicorn writes them


def _chunk(choice: dict[str, Any], **top: Any) -> bytes:
    body = {"id": RID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL, "choices": [choice]}
    return _sse({**body, **top})


ROLE = _chunk(
    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
    prompt_token_ids=None,
    prompt_text=None,
)


def _token(word: str) -> bytes:
    return _chunk({"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": None, "token_ids": None})


FIRST = _token(FIRST_WORD)
TOKENS = [_token(w) for w in WORDS]
FINISH = _chunk(
    {
        "index": 0,
        "delta": {"content": "."},
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
        "token_ids": None,
    },
    system_fingerprint="vllm-0.32.0-ded366e7",
)
DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Sun, 29 Nov 2026 21:04:36 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\nvary: Origin\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _usage(n: int) -> dict[str, Any]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "total_tokens": PROMPT_TOKENS + n,
        "completion_tokens": n,
        "prompt_tokens_details": None,
    }


def _plain(n: int) -> bytes:
    text = FIRST_WORD + "".join(WORDS[i % len(WORDS)] for i in range(max(n - 1, 0)))
    body = orjson.dumps(
        {
            "id": RID,
            "object": "chat.completion",
            "created": CREATED,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "reasoning": None,
                    },
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": None,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": "vllm-0.32.0-ded366e7",
            "usage": {**_usage(n), "completion_tokens_details": None},
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    )
    return _response(body, b"application/json")


def _response(body: bytes, content_type: bytes, status: bytes = b"200 OK") -> bytes:
    return (
        b"HTTP/1.1 %s\r\ndate: Sun, 29 Nov 2026 21:04:36 GMT\r\nserver: uvicorn\r\ncontent-length: %d\r\n"
        b"content-type: %s\r\n\r\n%s" % (status, len(body), content_type, body)
    )


OK = _response(b'{"status":"ok"}', b"application/json")
MODELS = _response(
    orjson.dumps(
        {"object": "list", "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "vllm"}]}
    ),
    b"application/json",
)
NOT_FOUND = _response(b'{"detail":"Not Found"}', b"application/json", b"404 Not Found")


class State:
    connections = 0  # accepted so far: a proxy that pools its upstream connections opens few
    gap = 0.0
    hold = False
    release = asyncio.Event()
    plain: ClassVar[dict[int, bytes]] = {}


class Handler(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.queue: list[tuple[bytes, bytes]] = []
        self.busy: asyncio.Task[None] | None = None  # the task answering this connection's requests
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport (TCP_NODELAY is on)
        State.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        self.queue.append((method + b" " + self.url, b"".join(self.body)))
        self.url, self.body = b"", []
        if self.busy is None:
            self.busy = asyncio.ensure_future(self.serve())

    async def serve(self) -> None:
        assert self.transport is not None
        while self.queue and not self.closed:
            target, body = self.queue.pop(0)
            path = target.split(b"?")[0]
            if path == b"POST /v1/chat/completions":
                request = orjson.loads(body)
                n = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
                if request.get("stream"):
                    usage = bool((request.get("stream_options") or {}).get("include_usage"))
                    await self.stream(n, usage)
                else:
                    plain = State.plain.get(n) or State.plain.setdefault(n, _plain(n))
                    self.transport.write(plain)
            elif path == b"POST /_bench/mode":
                mode = orjson.loads(body)
                State.gap = float(mode.get("gap_ms", 0)) / 1000
                State.hold = bool(mode.get("hold", False))
                State.release = asyncio.Event()
                self.transport.write(OK)
            elif path == b"POST /_bench/release":
                State.release.set()
                self.transport.write(OK)
            elif path == b"GET /_bench/stats":
                self.transport.write(_response(orjson.dumps({"connections": State.connections}), b"application/json"))
            elif path in (b"GET /health", b"GET /version"):
                self.transport.write(OK)
            elif path == b"GET /v1/models":
                self.transport.write(MODELS)
            else:
                self.transport.write(NOT_FOUND)
        self.busy = None

    async def stream(self, n: int, usage: bool) -> None:
        transport = self.transport
        assert transport is not None
        gap, hold, release = State.gap, State.hold, State.release
        transport.write(STREAM_HEAD + ROLE + FIRST)  # vLLM sends these in the same iteration
        if hold:
            while not release.is_set() and not self.closed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), 0.5)
        for i in range(max(n - 2, 0)):
            if self.closed:
                return
            if gap:
                await asyncio.sleep(gap)
            transport.write(TOKENS[i % len(TOKENS)])
        if gap:
            await asyncio.sleep(gap)
        if self.closed:
            return
        tail = FINISH
        if usage:
            tail += _sse({"id": RID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL,
                          "choices": [], "usage": _usage(n)})  # fmt: skip
        transport.write(tail + DONE)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Handler, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
