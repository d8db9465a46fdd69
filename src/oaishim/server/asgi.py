"""Small helpers over the raw ASGI interface (starlette's types.py is the model: the whole contract
is ``scope``, ``receive`` and ``send``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from oaishim.capture.redact import scrub_bytes
from oaishim.wire.errors import OpenAIError, bad_request

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), or None. Typed, the loop is compiled to
    index the list and compare bytes (as ``Any`` it iterated each pair and compared generically)."""
    headers: Headers = scope["headers"]
    for key, value in headers:
        if key == name:
            return value
    return None


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


class AnswerBroken(Exception):
    """A response already started cannot be finished (the upstream broke off): the server drops the
    connection without the body's end, so the client sees a broken answer."""


async def _nothing() -> None:
    return None


async def lifespan(
    receive: Receive,
    send: Send,
    startup: Callable[[], Awaitable[None]] = _nothing,
    shutdown: Callable[[], Awaitable[None]] = _nothing,
) -> None:
    """Answer an ASGI ``lifespan`` scope: ``startup()`` before the server takes requests,
    ``shutdown()`` after the last one; each acknowledged once it has returned."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


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


def _partial_tail(data: bytes, needles: tuple[bytes, ...]) -> int:
    """How many bytes at the end of ``data`` could be the start of a needle (0: none could)."""
    longest = 0
    for needle in needles:
        first = needle[:1]
        i = data.find(first, max(0, len(data) - len(needle) + 1))
        while i != -1:
            if needle.startswith(data[i:]):
                longest = max(longest, len(data) - i)
                break
            i = data.find(first, i + 1)
    return longest


def scrubbing(send: Send, needles: tuple[bytes, ...]) -> Scrubbing:
    """``send``, with every needle (a secret's bytes) masked in each header value and body piece a
    client is sent, and ``Set-Cookie`` dropped (:class:`Scrubbing`)."""
    return Scrubbing(send, needles)


class Scrubbing:
    """A ``send`` that masks every needle (a secret's bytes) in each header value and body piece a
    client is sent, and drops ``Set-Cookie``. A response with a ``Content-Length`` is held back
    until its first body piece, so the length can follow a scrubbed body.

    A secret split across two pieces (a pass-through body relayed as the backend's reads came) is
    caught too: a piece's tail that could still grow into a secret is held back and sent with the
    next piece. Only such a tail waits (usually nothing: it must be a prefix of a secret), so a
    stream is not delayed. A secret a model writes over several tokens of a stream is in separate
    JSON events, never side by side here: the stream's text is masked before it is encoded
    (``transform.secrets``). :meth:`body` is that masking alone, for a body piece written to the client without a
    message (``server.direct``)."""

    __slots__ = ("_held", "_line_ends", "_needles", "_send", "_tail")

    def __init__(self, send: Send, needles: tuple[bytes, ...]) -> None:
        self._send, self._needles = send, needles
        self._held: Message | None = None
        self._tail = b""
        # whether no secret holds a line end (keys never do): then a piece that ends with one has
        # no tail to hold, and an SSE event always ends with one (no search for a tail on each
        # chunk). Asked at the first piece that may have a tail (None until then): a whole answer
        # has none, and never asks
        self._line_ends: bool | None = None

    def body(self, body: bytes, more: bool) -> bytes:
        """``body`` masked, less a tail that may still grow into a secret (held for the next piece),
        plus the tail held from the last; the very same object when nothing changed."""
        tail, needles = self._tail, self._needles
        data = tail + body if tail else body
        keep = 0
        if more:
            line_ends = self._line_ends
            if line_ends is None:
                line_ends = self._line_ends = all(n.find(b"\n") == -1 for n in needles)
            if not (line_ends and data.endswith(b"\n")):
                keep = _partial_tail(data, needles)
        self._tail = data[len(data) - keep :] if keep else b""
        return scrub_bytes(data[: len(data) - keep] if keep else data, needles)

    def _headers(self, given: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], bool]:
        """The head's headers masked, less ``Set-Cookie``; whether a ``Content-Length`` is among them."""
        needles = self._needles
        headers: list[tuple[bytes, bytes]] = []
        length = False
        for k, v in given:
            if k != b"set-cookie":
                headers.append((k, v if type(v) is bytes else bytes(v)))  # (no copy made of bytes)
                length = length or k == b"content-length"
        # one search per needle over all the values; each value on its own only if one is there
        values = b"\n".join([v for _, v in headers])
        if scrub_bytes(values, needles) is not values:
            headers = [(k, scrub_bytes(v, needles)) for k, v in headers]
        return headers, length

    def whole(self, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """A whole sized response's headers and body, masked as :meth:`__call__` masks its two
        messages (the length follows a body the masking changed)."""
        masked, _ = self._headers(headers)
        clean = self.body(body, False)
        if clean is not body:
            masked = [(k, v) for k, v in masked if k != b"content-length"]
            masked.append((b"content-length", str(len(clean)).encode()))
        return masked, clean

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers, length = self._headers(message.get("headers", ()))
            message = {**message, "headers": headers}
            if length:
                self._held = message
                return
        elif kind == "http.response.body":
            body = message.get("body", b"")
            more = message.get("more_body", False)
            clean = self.body(body, more)
            if clean is not body:
                message = {**message, "body": clean}
            if self._held is not None:
                start, self._held = self._held, None
                if clean is not body or more:  # the length changed, or is not known yet
                    framing = [(k, v) for k, v in start["headers"] if k != b"content-length"]
                    framing += [] if more else [(b"content-length", str(len(clean)).encode())]
                    start = {**start, "headers": framing}
                await self._send(start)
        await self._send(message)
