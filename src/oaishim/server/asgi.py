"""Small helpers over the raw ASGI interface (starlette's types.py is the model: the whole contract
is ``scope``, ``receive`` and ``send``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import orjson

from oaishim.capture.redact import scrub_bytes
from oaishim.wire.errors import OpenAIError, bad_request

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


def parse_json(raw: bytes) -> Any:
    """A request body as JSON; the official 400 when it is not."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
            "HTTP library correctly. The OpenAI API expects a JSON payload.)"
        ) from None


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


def scrubbing(send: Send, needles: tuple[bytes, ...]) -> Send:
    """``send``, with every needle (a secret's bytes) masked in each header value and body piece a
    client is sent, and ``Set-Cookie`` dropped. A response with a ``Content-Length`` is held back
    until its first body piece, so the length can follow a scrubbed body.

    A piece is scrubbed on its own: a secret split across two pieces is not caught. Error bodies and
    plain bodies are one piece; a stream could only split one inside content a model wrote token by
    token, and holding bytes back to catch that would delay every stream."""
    held: Message | None = None

    async def scrubbed(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start":
            headers = [(k, scrub_bytes(bytes(v), needles)) for k, v in message.get("headers", ()) if k != b"set-cookie"]
            message = {**message, "headers": headers}
            if any(k == b"content-length" for k, _ in headers):
                held = message
                return
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            clean = scrub_bytes(body, needles)
            if clean is not body:
                message = {**message, "body": clean}
            if held is not None:
                start, held = held, None
                more = message.get("more_body", False)
                if clean is not body or more:  # the length changed, or is not known yet
                    framing = [(k, v) for k, v in start["headers"] if k != b"content-length"]
                    framing += [] if more else [(b"content-length", str(len(clean)).encode())]
                    start = {**start, "headers": framing}
                await send(start)
        await send(message)

    return scrubbed
