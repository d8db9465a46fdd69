"""The upstream client's HTTP framing against a raw socket server (this is about bytes on a socket):
an answer to HEAD ends with its head, whatever length it declares, and the next request is not
read as its body."""

from __future__ import annotations

import asyncio

from oaishim.server import relay
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.upstream import Upstreams

HEAD_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n"
GET_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request by its method, on one kept-alive connection (no body is ever sent)."""
    try:
        while line := await reader.readline():
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            writer.write(HEAD_ANSWER if line.startswith(b"HEAD ") else GET_ANSWER)
            await writer.drain()
    finally:
        writer.close()


async def _exchange() -> tuple[int, bytes, int, bytes]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    route = ModelRoute("m", (f"http://127.0.0.1:{port}",), profile="vllm@0.32")
    upstreams = Upstreams(Settings(models=(route,), idle_timeout=1.0))
    await upstreams.start()
    try:
        head = await upstreams.open(route, "HEAD", "/version", None, None)
        head_body = await asyncio.wait_for(relay.read_all(head), 5)
        head.close()
        got = await upstreams.open(route, "GET", "/version", None, None)
        body = await asyncio.wait_for(relay.read_all(got), 5)
        got.close()
        return head.status, head_body, got.status, body
    finally:
        await upstreams.close()
        server.close()
        await server.wait_closed()


def test_an_answer_to_head_ends_with_its_head() -> None:
    assert asyncio.run(_exchange()) == (200, b"", 200, b"{}")
