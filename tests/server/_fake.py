"""The gateway without sockets: an in-process upstream behind the seam, and an ASGI driver.

:class:`FakeUpstream` implements ``server.seam.Upstream`` with the same :class:`_servers.Canned`
answers the replaying backend serves (status, content type, headers, the body in pieces with
``asyncio.sleep`` between them, a body cut short) and records each request as a
:class:`_servers.Seen`. It stands in for the network, not for an engine: the gateway logic tests
run through the real ASGI app with it, and the tests about sockets (disconnects, framing, timeouts,
client limits) keep the real replaying backend and the gateway's HTTP server.

A test module that sets ``IN_PROCESS = True`` gets these from conftest's ``backend`` and
``gateways`` fixtures: ``gateways(...)`` then returns a handle, ``inproc://N``, that :func:`call`
resolves to the app. :func:`gateway` and :func:`post` are the same without the fixtures, for a test
that wants a gateway of its own; :func:`stream_body` and :func:`plain_body` build the upstream's
Chat Completions answers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import unquote

import orjson
from _servers import Canned, Seen

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.seam import RawHeaders, SentRequest, read_pieces
from oaishim.server.upstream import request_headers

BASE = "http://fake.upstream"


class FakeResponse:
    def __init__(self, canned: Canned, sent: SentRequest, owner: FakeUpstream) -> None:
        self.canned, self.request, self.owner = canned, sent, owner
        self.status = canned.status
        self.content_type = canned.content_type.split(";")[0].strip().lower()
        self.headers: RawHeaders = [
            (b"Server", b"BaseHTTP/0.6 Python"),
            (b"Content-Type", canned.content_type.encode()),
            *((k.encode(), v.encode()) for k, v in canned.headers.items()),
        ]
        length = {k.lower(): v for k, v in canned.headers.items()}.get("content-length")
        self.content_length = int(length) if length else None
        self.finished = False

    async def pieces(self) -> AsyncIterator[bytes]:
        canned = self.canned
        data = canned.body if canned.cut_after is None else canned.body[: canned.cut_after]
        step = canned.piece or len(data) or 1
        for start in range(0, len(data), step):
            if start and canned.delay:
                await asyncio.sleep(canned.delay)
            yield data[start : start + step]
        self.finished = True  # as for the replaying backend, a cut body (connection: close) just ends

    async def read(self, limit: int) -> bytes | None:
        return await read_pieces(self.pieces(), limit)

    def close(self) -> None:
        if not self.finished:
            self.owner.closed_early.set()


class FakeUpstream:
    """Answers each request with the next queued Canned response (a 599 when none is queued), or
    with ``responder``'s answer when set."""

    def __init__(self) -> None:
        self.queue: deque[Canned] = deque()
        self.responder: Callable[[Seen], Canned] | None = None
        self.seen: list[Seen] = []
        self.closed_early = threading.Event()  # a response was closed before its body was read to the end

    def push(self, *canned: Canned) -> None:
        self.queue.extend(canned)

    def reset(self) -> None:
        """Forget the queue, what was seen and any early close: a fresh backend for the next test."""
        self.queue.clear()
        self.seen.clear()
        self.closed_early.clear()

    async def start(self) -> None:
        return

    async def close(self) -> None:
        return

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> FakeResponse:
        sent = dict(request_headers(route, content_type)) if headers is None else dict(headers)
        seen = Seen(method, path, {k.lower(): v for k, v in sent.items()}, body or b"")
        self.seen.append(seen)
        if self.responder is not None:
            canned = self.responder(seen)
        elif self.queue:
            canned = self.queue.popleft()
        else:
            canned = Canned(b'{"error": "nothing queued"}', 599)
        if canned.head_delay:
            await asyncio.sleep(canned.head_delay)
        return FakeResponse(canned, SentRequest(method, BASE + path, list(sent.items())), self)


# -- the ASGI driver ---------------------------------------------------------------------------
APPS: dict[str, Gateway] = {}
_numbers = itertools.count()


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, parts: list[bytes]) -> None:
        self.status, self.headers, self.body, self.parts = status, headers, body, parts

    def json(self) -> Any:
        return orjson.loads(self.body)


async def _call(app: Gateway, method: str, target: str, body: bytes, headers: dict[str, str]) -> Reply:
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Future()  # the client stays: no disconnect (those tests use real sockets)
        raise AssertionError("unreachable")

    status, out_headers, parts = 0, {}, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, out_headers
        if message["type"] == "http.response.start":
            status = message["status"]
            out_headers = {k.decode().lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return Reply(status, out_headers, b"".join(parts), parts)


def request(url: str, method: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
    """One request to an in-process gateway: ``url`` is a handle from ``gateways`` (``inproc://N``)
    followed by the target."""
    handle, slash, target = url.removeprefix("inproc://").partition("/")
    all_headers = {"content-type": "application/json", **(headers or {})} if body is not None else dict(headers or {})
    return asyncio.run(_call(APPS["inproc://" + handle], method, slash + target, body or b"", all_headers))


def call(
    url: str, method: str = "GET", body: bytes | dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request, in process for an ``inproc://`` URL, else over HTTP
    (so helpers shared with the socket tests serve both)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    if url.startswith("inproc://"):
        reply = request(url, method, data, headers)
        return reply.status, reply.headers, reply.body
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def inprocess_gateways(backend: FakeUpstream) -> Iterator[Callable[..., str]]:
    """As conftest's ``gateways``: one gateway per distinct configuration, here in process."""
    made: dict[tuple[object, ...], str] = {}

    def start(profile: str = "openai", *, name: str = "*", api_keys: tuple[str, ...] = (), **settings: object) -> str:
        key = (profile, name, api_keys, tuple(sorted(settings.items())))
        if key not in made:
            route = ModelRoute(name=name, upstreams=(BASE,), profile=profile)
            app = Gateway(Settings(models=(route,), api_keys=api_keys, **settings), backend)  # type: ignore[arg-type]
            asyncio.run(app.startup())
            made[key] = handle = f"inproc://{next(_numbers)}"
            APPS[handle] = app
        return made[key]

    yield start
    for handle in made.values():
        asyncio.run(APPS.pop(handle).shutdown())


def gateway(profile: str, *answers: Canned) -> tuple[Gateway, FakeUpstream]:
    """A started gateway with one route ``m`` (``profile``) on a fake upstream that answers ``answers``."""
    fake = FakeUpstream()
    fake.push(*answers)
    app = Gateway(Settings(models=(ModelRoute("m", (BASE,), profile),), state="memory"), fake)
    asyncio.run(app.startup())
    return app, fake


def post(app: Gateway, body: dict[str, Any], path: str = "/v1/chat/completions") -> Reply:
    return asyncio.run(_call(app, "POST", path, json.dumps(body).encode(), {}))


def sse_answer(body: bytes) -> Canned:
    """A canned event stream."""
    return Canned(body, content_type="text/event-stream")


# -- upstream answers ----------------------------------------------------------------------------
USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


def chunk(finish: Any = None, usage: Any = None, **delta: Any) -> dict[str, Any]:
    """A chunk of choice 0 (``delta``, ``finish``), or with ``usage`` the usage chunk (no choices)."""
    choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if usage is None else []
    body: dict[str, Any] = {
        "id": "up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def stream_body(pieces: list[str], finish: str = "stop") -> bytes:
    """A streamed answer of ``pieces`` ending with ``finish``, then the usage chunk and ``[DONE]``."""
    events: list[dict[str, Any] | str] = [chunk(role="assistant", content="")]
    events += [chunk(content=t) for t in pieces]
    return sse(*events, chunk(finish), chunk(usage=USAGE), "[DONE]")


def plain_body(content: str, finish: str = "stop") -> bytes:
    message = {"role": "assistant", "content": content}
    body = {"id": "up", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
    body["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
    return json.dumps(body).encode()
