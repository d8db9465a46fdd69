"""``oaishim mock``: recorded responses served as an OpenAI-compatible backend (raw ASGI).

Each request is answered from the playbook: the recorded status, headers (minus the
connection-level ones, and any whose value was redacted) and body bytes, in the recorded pieces.
With ``timing="original"`` each piece leaves at the offset it had from the recorded request (the
headers too), so a mock streams as slowly as the engine did; with ``"fast"`` everything is sent at
once, still piece by piece. A recorded response that broke off is broken off again. ``GET
/v1/models`` without a recording lists the recorded models; ``GET /health`` answers 200; anything
else unrecorded is a 404 in the official error shape that says what did not match.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Literal

from oaishim.capture.playbook import Play, Playbook
from oaishim.capture.record import body_bytes
from oaishim.capture.redact import MASK
from oaishim.server.asgi import (
    BodyTooLarge,
    ClientGone,
    Headers,
    Receive,
    Scope,
    Send,
    lifespan,
    read_body,
    send_error,
    send_json,
)
from oaishim.wire.errors import OpenAIError, not_found, too_large
from oaishim.wire.headers import is_hop_by_hop

Timing = Literal["original", "fast"]


class RecordingBrokeOff(Exception):
    """The recorded response ended without its last piece: the mock breaks off as the backend did."""


def replay_headers(response: Mapping[str, Any]) -> Headers:
    out: Headers = []
    for pair in response.get("headers") or []:
        name, value = str(pair[0]), str(pair[1])
        if not is_hop_by_hop(name) and name.lower() != "content-length" and value != MASK:
            out.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    return out


class MockBackend:
    def __init__(self, playbook: Playbook, timing: Timing = "original", *, max_body_bytes: int = 16 << 20) -> None:
        self.playbook = playbook
        self.timing = timing
        self.max_body_bytes = max_body_bytes
        self.started = int(time.time())
        self.served = 0
        self.unmatched = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            await self._http(scope, receive, send)
        except OpenAIError as error:
            await send_error(send, error)
        except ClientGone:
            return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            raise too_large(self.max_body_bytes) from None
        method, path = scope["method"], scope["path"]
        play = self.playbook.match(method, path, body)
        if play is not None:
            self.served += 1
            await self._play(play, send)
        elif method == "GET" and path == "/v1/models":
            await send_json(send, 200, self.playbook.models(self.started))
        elif method == "GET" and path == "/health":
            await send_json(send, 200, {"status": "ok"})
        else:
            self.unmatched += 1
            near = self.playbook.near_misses(method, path)
            raise not_found(
                f"oaishim mock: no recorded exchange matches {method} {path} with this body "
                f"({near} recorded for {method} {path} with other bodies)",
                code="mock_no_match",
            )

    async def _play(self, play: Play, send: Send) -> None:
        response = play.response
        sent_at = float(play.request.get("t") or 0.0)  # offsets are from the recorded request
        start = asyncio.get_running_loop().time()

        async def at(offset_ms: float) -> None:
            if self.timing == "original":
                delay = start + (offset_ms - sent_at) / 1000 - asyncio.get_running_loop().time()
                if delay > 0:
                    await asyncio.sleep(delay)

        await at(float(response.get("t") or 0.0))
        status = int(response.get("status") or 200)
        await send({"type": "http.response.start", "status": status, "headers": replay_headers(response)})
        data = body_bytes(response)
        position = 0
        for t_ms, size in response.get("reads") or []:
            await at(float(t_ms))
            await send({"type": "http.response.body", "body": data[position : position + size], "more_body": True})
            position += size
        if position < len(data):
            await send({"type": "http.response.body", "body": data[position:], "more_body": True})
        if response.get("complete") is False:
            raise RecordingBrokeOff(f"the recorded response of {play.record_id} broke off here")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
