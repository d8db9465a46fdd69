"""The stream load generator, run as its own process so its CPU is never the proxy's.

Raw asyncio on uvloop with httptools parsing: a keep-alive HTTP/1.1 client that costs little and
timestamps the first content token as the bytes arrive. (Plain requests use ``wrk``.)

    loadgen.py ttft URL --requests N --tokens T        sequential streams; time to first token
    loadgen.py streams URL --requests N --concurrency C --tokens T
                                                       (each stream's duration too)
    loadgen.py hold URL --requests N                   open N streams, print "open K", wait for a
                                                       line on stdin, close them all

A URL ending in ``/v1/responses`` gets the same request in the Responses shape. Each prints one
JSON line with its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

# The first token: a content string that is not empty (a role chunk's is ""). Not the first word
# itself: a proxy may send a word's last characters with the next token (oaishim holds a tail that
# could begin a key it masks, such as the "s" of " Greetings" under the key "sk-bench").
FIRST_TOKEN = re.compile(rb'"content":"[^"]')
KEY = "sk-bench"


def request_body(tokens: int, stream: bool) -> bytes:
    """The chat request every path gets: ~400 bytes, ``max_tokens`` = the number of chunks."""
    return orjson.dumps(
        {
            "model": "bench",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely."},
                {"role": "user", "content": "How much latency does a reverse proxy add to each request? " * 3},
            ],
            "max_tokens": tokens,
            "temperature": 0.7,
            "stream": stream,
        }
    )


def responses_body(tokens: int, stream: bool) -> bytes:
    """The same request for ``POST /v1/responses`` (instructions and input instead of messages)."""
    return orjson.dumps(
        {
            "model": "bench",
            "instructions": "You are a helpful assistant. Answer briefly and precisely.",
            "input": "How much latency does a reverse proxy add to each request? " * 3,
            "max_output_tokens": tokens,
            "temperature": 0.7,
            "stream": stream,
            "store": False,
        }
    )


def request_bytes(url: str, tokens: int, stream: bool) -> bytes:
    """The request for ``url``: a Responses one when the URL's path ends in /responses."""
    parts = urlsplit(url)
    body = responses_body(tokens, stream) if parts.path.endswith("/responses") else request_body(tokens, stream)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Client(asyncio.Protocol):
    """One keep-alive connection; ``call()`` sends a request and waits for the whole response."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.done: asyncio.Future[None] | None = None
        self.t_first = 0
        self.seen = b""
        self.events = 0
        self.lost = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))
            self.done.exception()  # retrieved here: a caller that no longer waits must not be warned about

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc)

    def on_body(self, body: bytes) -> None:
        self.events += body.count(b"data: ")
        if not self.t_first:
            self.seen = self.seen[-16:] + body
            if FIRST_TOKEN.search(self.seen):
                self.t_first = time.perf_counter_ns()

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def start(self, raw: bytes) -> int:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.t_first, self.seen, self.events = 0, b"", 0
        t0 = time.perf_counter_ns()
        self.transport.write(raw)
        return t0

    async def call(self, raw: bytes) -> tuple[int, int]:
        """(start, first-token) in perf_counter ns; raises on a non-200 or a broken connection."""
        t0 = self.start(raw)
        assert self.done is not None
        await asyncio.wait_for(self.done, 60)
        if self.parser.get_status_code() != 200:
            raise RuntimeError(f"status {self.parser.get_status_code()}")
        return t0, self.t_first


async def connect(url: str) -> Client:
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(Client, parts.hostname, parts.port)
    return client


async def ttft(url: str, requests: int, tokens: int) -> dict[str, Any]:
    raw = request_bytes(url, tokens, True)
    client = await connect(url)
    samples: list[float] = []
    errors = 0
    for _ in range(requests):
        try:
            if client.lost:
                client = await connect(url)
            t0, t1 = await client.call(raw)
            if t1:
                samples.append((t1 - t0) / 1000)
            else:
                errors += 1
        except (RuntimeError, ConnectionError, TimeoutError, httptools.HttpParserError):
            errors += 1
            client = await connect(url)
    return {"ttft_us": samples, "errors": errors}


async def streams(url: str, requests: int, concurrency: int, tokens: int) -> dict[str, Any]:
    raw = request_bytes(url, tokens, True)
    left = requests
    events = errors = 0
    durations: list[float] = []  # µs from writing each request to its last byte

    async def worker() -> None:
        nonlocal left, events, errors
        client = await connect(url)
        while left > 0:
            left -= 1
            try:
                if client.lost:
                    client = await connect(url)
                t0, _ = await client.call(raw)
                durations.append((time.perf_counter_ns() - t0) / 1000)
                events += client.events
            except (RuntimeError, ConnectionError, TimeoutError, httptools.HttpParserError):
                errors += 1
                client = await connect(url)
        client.transport.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"events": events, "errors": errors, "wall_s": time.perf_counter() - t0, "durations_us": durations}


async def hold(url: str, requests: int) -> dict[str, Any]:
    raw = request_bytes(url, 4, True)
    clients: list[Client] = []
    for start in range(0, requests, 50):  # in batches, so no listen backlog overflows
        batch = await asyncio.gather(*(connect(url) for _ in range(start, min(start + 50, requests))))
        for client in batch:
            client.start(raw)
        clients += batch
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(c.t_first or c.lost for c in clients):
        await asyncio.sleep(0.05)
    opened = sum(1 for c in clients if c.t_first and not c.lost)
    print(f"open {opened}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for client in clients:
        client.done = None  # nobody waits any more
        client.transport.close()
    return {"open": opened}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("ttft", "streams", "hold"))
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    if args.mode == "ttft":
        result = uvloop.run(ttft(args.url, args.requests, args.tokens))
    elif args.mode == "streams":
        result = uvloop.run(streams(args.url, args.requests, args.concurrency, args.tokens))
    else:
        result = uvloop.run(hold(args.url, args.requests))
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
