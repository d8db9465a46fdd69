"""Relaying one upstream response to the client: a plain body normalised, or a stream rewritten
event by event as it arrives.

Streams are never buffered: each upstream read is decoded, rewritten and written at once. A task
watches the client side; when the client goes away the upstream response is closed at once (that
is what frees the GPU), instead of being read to its end.

What the gateway holds of the backend's answer is bounded (``max_upstream_event_bytes``): one SSE
event, or one plain body. Past it the upstream is closed and the client gets a 502 (in a stream: one
error event and the end). Any other fault while relaying is logged with the response id and reaches
the client the same way, never as a cut connection or a bare 500.
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
from oaishim.server.config import Settings
from oaishim.server.upstream import Tap, chunks
from oaishim.transform.context import ResponseContext
from oaishim.transform.stream import StreamNormalizer
from oaishim.wire.errors import OpenAIError, normalize_upstream_error
from oaishim.wire.headers import retry_headers
from oaishim.wire.sse import EventTooLarge, SSEDecoder

log = logging.getLogger("oaishim.relay")
Normalize = Callable[[Mapping[str, Any], ResponseContext], dict[str, Any]]
SSE_HEADERS: Headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
DEFAULT_LIMIT = Settings().max_upstream_event_bytes


def too_large(limit: int, what: str) -> OpenAIError:
    return OpenAIError(
        502,
        f"the upstream sent {what} larger than the gateway's limit of {limit} bytes "
        "(--max-upstream-event-mb, OAISHIM_MAX_UPSTREAM_EVENT_MB)",
        "server_error",
        code="upstream_response_too_large",
    )


async def read_all(response: aiohttp.ClientResponse, tap: Tap | None = None, limit: int = DEFAULT_LIMIT) -> bytes:
    """The whole body, at most ``limit`` bytes; a broken or idle upstream, or a longer body, raises
    OpenAIError (``response.read()`` would raise aiohttp's own errors, which reach the client as a
    bare 500, and would hold a body of any size)."""
    if (response.content_length or 0) > limit:
        raise too_large(limit, "a body")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks(response, tap):
        size += len(chunk)
        if size > limit:
            raise too_large(limit, "a body")
        parts.append(chunk)
    return b"".join(parts)


async def relay_plain(
    response: aiohttp.ClientResponse,
    ctx: ResponseContext,
    normalize: Normalize,
    send: Send,
    extra: Headers,
    tap: Tap | None = None,
    limit: int = DEFAULT_LIMIT,
) -> None:
    try:
        raw = await read_all(response, tap, limit)
    except OpenAIError as error:
        response.close()  # the rest of the body is not read: the connection cannot be reused
        await send_error(send, error, extra)
        return
    try:
        out = _plain_answer(response.status, raw, ctx, normalize)
    except OpenAIError as error:
        retry = retry_headers(response.raw_headers) if response.status >= 400 else []
        await send_error(send, error, [*extra, *retry])
        return
    except Exception:
        log.exception("response %s (model %s): failed to relay the upstream body", ctx.response_id, ctx.model)
        failure = OpenAIError(
            502, f"The gateway failed to relay the upstream's answer ({ctx.response_id}).", "server_error"
        )
        await send_error(send, failure, extra)
        return
    await send_json(send, 200, out, extra)


def _plain_answer(status: int, raw: bytes, ctx: ResponseContext, normalize: Normalize) -> dict[str, Any]:
    """The client's body for the backend's, or the OpenAIError the client gets instead."""
    if status >= 400:
        raise normalize_upstream_error(status, raw, context_param=ctx.context_param)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise OpenAIError(502, "The upstream answered with a body that is not JSON.", "server_error") from None
    if not isinstance(body, Mapping) or ("error" in body and "choices" not in body and "data" not in body):
        raise normalize_upstream_error(status, body, context_param=ctx.context_param)
    try:
        return normalize(body, ctx)  # a body it cannot read raises OpenAIError 502, as does its own fault
    except OpenAIError as error:
        log.warning("response %s: %s", ctx.response_id, error.message)
        raise


def _plain_as_chunk(body: Mapping[str, Any]) -> str:
    """A plain chat or completion body as one stream chunk (for a backend that ignored stream: true).
    What is not a list of objects stays as it is, for the stream normaliser to refuse."""
    choices = body.get("choices")
    if isinstance(choices, list):
        choices = [
            {**c, "delta": c.get("message") if isinstance(c.get("message"), Mapping) else {}}
            if isinstance(c, Mapping)
            else c
            for c in choices
        ]
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
    response: aiohttp.ClientResponse,
    ctx: ResponseContext,
    send: Send,
    extra: Headers,
    tap: Tap | None = None,
    limit: int = DEFAULT_LIMIT,
) -> None:
    if response.status >= 400:
        try:
            error = normalize_upstream_error(
                response.status, await read_all(response, tap, limit), context_param=ctx.context_param
            )
        except OpenAIError as failure:
            response.close()
            error = failure
        await send_error(send, error, [*extra, *retry_headers(response.raw_headers)])
        return
    normalizer = StreamNormalizer(ctx)
    is_sse = (response.content_type or "").startswith("text/event-stream")
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]})
    tail: list[bytes] = []
    try:
        if not is_sse:
            raw = await read_all(response, tap, limit)
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = None
            tail = normalizer.feed(_plain_as_chunk(body)) if isinstance(body, Mapping) else []
            tail += normalizer.feed("[DONE]") + normalizer.flush()
        else:
            decoder = SSEDecoder(limit)
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
    except EventTooLarge as exc:
        log.warning("stream %s: the upstream sent an SSE event over %d bytes; closed it", ctx.response_id, exc.limit)
        tail = normalizer.fail(too_large(exc.limit, "one SSE event"))
    except (aiohttp.ClientError, ConnectionError) as exc:
        tail = normalizer.fail(
            OpenAIError(
                502,
                f"The upstream connection broke in the middle of the stream ({type(exc).__name__}).",
                "server_error",
                code="upstream_disconnected",
            )
        )
    except Exception:
        # The normaliser never raises; this is the decoder, the relay or a send: still one error
        # event and the end for the client, and the details for whoever reads the log.
        log.exception("stream %s (model %s): failed while relaying the upstream stream", ctx.response_id, ctx.model)
        tail = normalizer.fail(
            OpenAIError(502, f"The gateway failed to relay the upstream's answer ({ctx.response_id}).", "server_error")
        )
    finally:
        response.close()  # also when cancelled because the client went away: the backend stops now
    await send({"type": "http.response.body", "body": b"".join(tail), "more_body": False})
