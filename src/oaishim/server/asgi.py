"""Small helpers over the raw ASGI interface (starlette's types.py is the model: the whole contract
is ``scope``, ``receive`` and ``send``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import orjson

from oaishim.wire.errors import OpenAIError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes, extra: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    headers: Headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: Any, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, orjson.dumps(payload), b"application/json", extra)


async def send_error(send: Send, error: OpenAIError, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, error.status, error.to_bytes(), b"application/json", extra)
