"""Relaying one upstream response to the client: a plain body normalised, or a stream rewritten
event by event as it arrives.

Streams are never buffered: each upstream read is decoded, rewritten and written at once. A task
watches the client side; when the client goes away the upstream response is closed at once (that
is what frees the GPU), instead of being read to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import aiohttp
import orjson

from oaishim.server.asgi import Headers, Receive, Send, send_error, send_json
from oaishim.server.upstream import Tap, chunks
from oaishim.transform.context import ResponseContext
from oaishim.transform.stream import StreamNormalizer
from oaishim.wire.errors import OpenAIError, normalize_upstream_error
from oaishim.wire.headers import retry_headers
from oaishim.wire.sse import SSEDecoder

log = logging.getLogger("oaishim.relay")
Normalize = Callable[[Mapping[str, Any], ResponseContext], dict[str, Any]]
SSE_HEADERS: Headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


async def _read_all(response: aiohttp.ClientResponse, tap: Tap | None = None) -> bytes:
    """The whole body; a broken or idle upstream raises OpenAIError (``response.read()`` would raise
    aiohttp's own errors, which reach the client as a bare 500)."""
    return b"".join([chunk async for chunk in chunks(response, tap)])


async def relay_plain(
    response: aiohttp.ClientResponse,
    ctx: ResponseContext,
    normalize: Normalize,
    send: Send,
    extra: Headers,
    tap: Tap | None = None,
) -> None:
    raw = await _read_all(response, tap)
    if response.status >= 400:
        error = normalize_upstream_error(response.status, raw, context_param=ctx.context_param)
        await send_error(send, error, [*extra, *retry_headers(response.raw_headers)])
        return
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        await send_error(
            send, OpenAIError(502, "The upstream answered with a body that is not JSON.", "server_error"), extra
        )
        return
    if not isinstance(body, Mapping) or ("error" in body and "choices" not in body and "data" not in body):
        await send_error(send, normalize_upstream_error(response.status, body, context_param=ctx.context_param), extra)
        return
    await send_json(send, 200, normalize(body, ctx), extra)


def _plain_as_chunk(body: Mapping[str, Any]) -> str:
    """A plain chat or completion body as one stream chunk (for a backend that ignored stream: true)."""
    choices = []
    for choice in body.get("choices") or []:
        if isinstance(choice, Mapping):
            delta = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
            choices.append({**choice, "delta": delta})
    return orjson.dumps({**body, "choices": choices, "usage": body.get("usage")}).decode()


def _field_errors(decoder: SSEDecoder, normalizer: StreamNormalizer) -> list[bytes]:
    """Old llama.cpp sends a failure as an ``error:`` line, which clients ignore: make it an error event."""
    out: list[bytes] = []
    for name, value in decoder.unknown_fields:
        if name == "error":
            out += normalizer.fail(normalize_upstream_error(500, value))
    decoder.unknown_fields.clear()
    return out


async def _client_gone(receive: Receive) -> None:
    """Returns when the client disconnects (the request body was already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def watching_client(receive: Receive, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` (open the upstream request and relay its answer) until it ends or the client
    goes away, whichever comes first. On a disconnect the work is cancelled, which closes the
    upstream connection at once: that is what frees the GPU, for plain requests and streams alike.

    The work runs in the calling task and the watcher cancels that task: a second task per request
    and ``asyncio.wait`` cost more than a small plain request's own relaying (bench/README.md)."""
    current = asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current
    finished = gone = False

    def client_gone(_: object) -> None:
        nonlocal gone
        if not finished:  # the work is still running (callbacks run between its steps)
            gone = True
            task.cancel()

    watcher = asyncio.ensure_future(_client_gone(receive))
    watcher.add_done_callback(client_gone)
    try:
        await work  # what the work raises (an OpenAIError becomes the client's error) goes up as it is
    except asyncio.CancelledError:
        if not gone or task.uncancel() > 0:  # not ours alone: the server is shutting down
            raise
        log.info("client went away; closed the upstream request")
    else:
        if gone:  # the work swallowed our cancel: take it back, or a later timeout in this task misfires
            task.uncancel()
    finally:
        finished = True
        watcher.remove_done_callback(client_gone)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def relay_stream(
    response: aiohttp.ClientResponse, ctx: ResponseContext, send: Send, extra: Headers, tap: Tap | None = None
) -> None:
    if response.status >= 400:
        await send_error(
            send,
            normalize_upstream_error(response.status, await _read_all(response, tap), context_param=ctx.context_param),
            [*extra, *retry_headers(response.raw_headers)],
        )
        return
    normalizer = StreamNormalizer(ctx)
    is_sse = (response.content_type or "").startswith("text/event-stream")
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]})
    tail: list[bytes] = []
    try:
        if not is_sse:
            raw = await _read_all(response, tap)
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = None
            tail = normalizer.feed(_plain_as_chunk(body)) if isinstance(body, Mapping) else []
            tail += normalizer.feed("[DONE]") + normalizer.flush()
        else:
            decoder = SSEDecoder()
            async for piece in chunks(response, tap):
                out: list[bytes] = []
                for event in decoder.feed(piece):
                    out += normalizer.feed(event.data)
                if decoder.unknown_fields:
                    out += _field_errors(decoder, normalizer)
                if out:
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                if normalizer.ended or normalizer.stopped:
                    break  # an error, or a stop string at the gateway, ended it: the rest is not needed
            if not (normalizer.ended or normalizer.stopped):  # else a half-read event is not the client's
                for event in decoder.flush():
                    tail += normalizer.feed(event.data)
            tail += normalizer.flush()
    except OpenAIError as error:
        tail = normalizer.fail(error)
    except (aiohttp.ClientError, ConnectionError) as exc:
        tail = normalizer.fail(
            OpenAIError(
                502,
                f"The upstream connection broke in the middle of the stream ({type(exc).__name__}).",
                "server_error",
                code="upstream_disconnected",
            )
        )
    finally:
        response.close()  # also when cancelled because the client went away: the backend stops now
    await send({"type": "http.response.body", "body": b"".join(tail), "more_body": False})
