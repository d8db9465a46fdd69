"""The secret scrub on what a client is sent (``server.asgi.scrubbing``), at every split point: a
secret cut across two body pieces is masked all the same, and only a tail that could still become a
secret is held back."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from oaishim.capture.redact import secret_needles
from oaishim.server.asgi import scrubbing

SECRET = "sk-upstream-echo-4c1d9e2a"
NEEDLES = secret_needles([SECRET, "sk-client-key-0b7f3e55"])
BODY = b'data: {"note": "before ' + SECRET.encode() + b' after s sk- sk-u"}\n\n'


def sent(pieces: list[bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    async def run() -> None:
        scrub = scrubbing(send, NEEDLES)
        await scrub({"type": "http.response.start", "status": 200, "headers": []})
        for i, piece in enumerate(pieces):
            await scrub({"type": "http.response.body", "body": piece, "more_body": i < len(pieces) - 1})

    asyncio.run(run())
    return out


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


def test_a_secret_split_anywhere_is_masked() -> None:
    want = BODY.replace(SECRET.encode(), b"[REDACTED]")
    for a, b in itertools.combinations(range(1, len(BODY)), 2):
        got = body_of(sent([BODY[:a], BODY[a:b], BODY[b:]]))
        assert got == want, (a, b)


def test_only_a_possible_secret_start_waits() -> None:
    messages = sent([b"plain text ", b"ends in sk-ups", b"tream-echo-4c1d9e2a!"])
    bodies = [m["body"] for m in messages if m["type"] == "http.response.body"]
    assert bodies == [b"plain text ", b"ends in ", b"[REDACTED]!"]


def test_a_whole_answer_is_masked_as_its_two_messages_are() -> None:
    """``Scrubbing.whole`` (a plain answer written at once) gives the head and the body the two
    messages give: a secret in a header value or in the body masked, Set-Cookie dropped, and the
    length following the masked body."""
    for body in (BODY, b'{"plain": "nothing to mask"}', b""):
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"set-cookie", b"a=b"),
            (b"x-echo", b"key " + SECRET.encode()),
        ]
        out: list[dict[str, Any]] = []

        async def send(message: dict[str, Any], out: list[dict[str, Any]] = out) -> None:
            out.append(message)

        async def two_messages(headers: list[tuple[bytes, bytes]] = headers, body: bytes = body) -> None:
            scrub = scrubbing(send, NEEDLES)
            await scrub({"type": "http.response.start", "status": 200, "headers": headers})
            await scrub({"type": "http.response.body", "body": body, "more_body": False})

        asyncio.run(two_messages())
        start, end = out
        assert scrubbing(send, NEEDLES).whole(headers, body) == (start["headers"], end["body"])
        assert SECRET.encode() not in end["body"] + b"".join(v for _, v in start["headers"])
