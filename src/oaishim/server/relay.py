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
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final, cast

import orjson

from oaishim.server import direct
from oaishim.server.asgi import Headers, Receive, Send, send_bytes, send_error
from oaishim.server.config import Settings
from oaishim.server.exchange import Exchange, perf
from oaishim.server.exchange import current as current_exchange
from oaishim.server.seam import UpstreamResponse
from oaishim.transform.context import ResponseContext
from oaishim.transform.fanin import FanIn
from oaishim.transform.pipe import StreamPipe, plain_answer, upstream_too_large
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.transform.validate import Endpoint
from oaishim.wire.errors import OpenAIError, upstream_error
from oaishim.wire.headers import retry_headers

log: Final = logging.getLogger("oaishim.relay")
SSE_HEADERS: Final[Headers] = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
DEFAULT_LIMIT: Final = Settings().max_upstream_event_bytes


async def read_all(response: UpstreamResponse, limit: int = DEFAULT_LIMIT) -> bytes:
    """The whole body, at most ``limit`` bytes; a broken or idle upstream, or a longer body, raises
    OpenAIError (a read of the whole body would hold a body of any size)."""
    if (response.content_length or 0) > limit:
        raise upstream_too_large(limit, "a body")
    raw = await response.read(limit)
    if raw is None:
        raise upstream_too_large(limit, "a body")
    return raw


async def relay_plain(
    response: UpstreamResponse, ctx: ResponseContext, endpoint: Endpoint, send: Send, extra: Headers, limit: int
) -> None:
    try:
        raw = await read_all(response, limit)
    except OpenAIError as error:
        response.close()  # the rest of the body is not read: the connection cannot be reused
        fault(error)
        await send_error(send, error, extra)
        return
    failed = response.status >= 400
    retry = retry_headers(response.headers) if failed else []
    await send_answer(lambda: plain_answer(endpoint, response.status, raw, ctx), ctx, send, extra, failed, retry)


async def send_answer(
    build: Callable[[], dict[str, Any]],
    ctx: ResponseContext,
    send: Send,
    extra: Headers,
    upstream_failed: bool = False,
    error_headers: Headers | None = None,
) -> None:
    """Send the official plain answer ``build()`` makes (a 200, with what it violated: see
    ``Exchange.answered``), or the OpenAI error it raised. ``upstream_failed``: the backend's own
    error answer is being rewritten, so an error is the backend's, not a fault of its answer."""
    ex = current_exchange()
    began = perf()
    try:
        out = build()
    except OpenAIError as error:
        if ex is not None and not upstream_failed:
            ex.fault(error)  # a body that cannot be read, or an answer that broke its response_format
            ex.violated(ctx)
        await send_error(send, error, [*extra, *(error_headers or ())])
        return
    except Exception:
        log.exception("response %s (model %s): failed to relay the upstream body", ctx.response_id, ctx.model)
        failure = OpenAIError(
            502, f"The gateway failed to relay the upstream's answer ({ctx.response_id}).", "server_error"
        )
        await send_error(send, failure, extra)
        return
    if ex is not None:
        ex.answered(ctx, out, perf() - began)
    await send_whole(ex, send, orjson.dumps(out), extra)


async def send_whole(ex: Exchange | None, send: Send, body: bytes, extra: Headers) -> None:
    """A plain 200 JSON answer (a chat one, a Responses one): head and body at once through the
    exchange's ``answer`` (the server's respond, masking included), else through ``send``."""
    if ex is not None and ex.answer(send, 200, body, b"application/json", extra):
        return
    await send_bytes(send, 200, body, b"application/json", extra)


def fault(error: OpenAIError) -> None:
    """Note, for the operator, that the backend failed this request."""
    ex = current_exchange()
    if ex is not None:
        ex.fault(error)


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
    ex = current_exchange()
    current = ex.task if ex is not None and ex.task is not None else asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current
    finished = gone = False

    def client_gone(_: object = None) -> None:
        nonlocal gone
        if not finished:  # the work is still running (callbacks run between its steps)
            gone = True
            task.cancel()

    if ex is not None and ex.on_gone is not None:
        # The server calls back when the client leaves (server.http): no watcher task, no extra
        # loop turn to end it (a third of this function's cost for a small plain request).
        unregister = ex.on_gone(client_gone)
        try:
            await _run(work, task, lambda: gone)
        finally:
            finished = True
            unregister()
        return
    watcher = asyncio.ensure_future(_client_gone(receive))
    watcher.add_done_callback(client_gone)
    try:
        await _run(work, task, lambda: gone)
    finally:
        # the watcher is cancelled, not awaited: it ends on the loop's next turn (no ``finally``
        # awaits in a compiled module: tests/packaging/test_compiled_core.py)
        finished = True
        watcher.remove_done_callback(client_gone)
        watcher.cancel()


async def _run(work: Coroutine[Any, Any, None], task: asyncio.Task[Any], gone: Any) -> None:
    """``await work``; a cancel that came from the client leaving (``gone()``) ends it quietly. What
    the work raises otherwise (an OpenAIError becomes the client's error) goes up as it is."""
    try:
        await work
    except asyncio.CancelledError:
        if not gone() or task.uncancel() > 0:  # not ours alone: the server is shutting down
            raise
        log.info("client went away; closed the upstream request")
        ex = current_exchange()
        if ex is not None:
            ex.gone = True
    else:
        if gone():  # the work swallowed our cancel: take it back, or a later timeout in this task misfires
            task.uncancel()


async def relay_stream(
    response: UpstreamResponse, ctx: ResponseContext, send: Send, extra: Headers, limit: int
) -> StreamPipe | None:
    """Relay a stream; its pipe, once done (None when the upstream's error answer was relayed)."""
    if response.status >= 400:
        try:
            error = normalize_upstream_error(
                response.status, await read_all(response, limit), context_param=ctx.context_param
            )
        except OpenAIError as failure:
            response.close()
            error = failure
        await send_error(send, error, [*extra, *retry_headers(response.headers)])
        return None
    pipe = StreamPipe(ctx, sse=response.content_type == "text/event-stream", max_event=limit)
    head = Head(send, extra)
    tail = await pump(pipe, response, head, limit, ctx.response_id, ctx.model)
    if tail is None:  # refused before its first chunk: the client has the error
        return None
    await head(tail, more=False)
    return pipe


class Head:
    """The 200 of a stream, held back until the pipe has a chunk for the client (with ``first``, the
    bytes that open the stream, e.g. the Responses API's ``response.created``).

    OpenAI refuses a request it cannot serve (a context overflow, a rate limit) before it streams,
    with an HTTP error status the SDKs raise and retry by. Backends that validate inside their
    stream generator answer 200 and then an error event; while nothing has been sent, the gateway
    can still answer such an error as OpenAI does (:meth:`refuse`)."""

    __slots__ = ("extra", "first", "refused", "send", "sent")

    def __init__(self, send: Send, extra: Headers, first: bytes = b"") -> None:
        self.send, self.extra, self.first = send, extra, first
        self.sent = False  # the 200 went out
        self.refused = False  # an error answer went out instead

    async def __call__(self, body: bytes, *, more: bool = True) -> None:
        """Send ``body``, after the 200 and the opening bytes when they are still held."""
        if not self.sent:
            self.sent = True
            body = self.first + body
            await self.send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self.extra]})
        await self.send({"type": "http.response.body", "body": body, "more_body": more})

    async def refuse(self, pipe: StreamPipe | FanIn) -> bool:
        """The pipe's error as the whole HTTP answer, when it ended before any chunk and nothing was
        sent; whether the client has such an answer."""
        error = pipe.refused
        if not self.refused and not self.sent and error is not None:
            self.refused = True
            rid = pipe.normalizer.ctx.response_id
            log.info("stream %s: the upstream refused it before its first chunk: HTTP %d", rid, error.status)
            await send_error(self.send, error, self.extra)
        return self.refused


async def pump(
    pipe: StreamPipe, response: UpstreamResponse, head: Head, limit: int, rid: str, model: str
) -> bytes | None:
    """Feed the upstream's body through ``pipe`` and send what it gives, as it comes; return the last
    bytes for the client (the pipe's flush, or its one error event), which the caller sends to end the
    body, or None when the client got an error answer instead of a stream (:meth:`Head.refuse`). The
    upstream is closed at the end, also when the client went away (the backend stops now)."""
    tail = b""
    ex = current_exchange()
    if ex is not None:
        ex.stream_open()
    first: float | None = None
    spent = 0.0  # the pipe's own time (the gateway's), without the waits for the upstream and the client
    attach = getattr(response, "attach", None)  # the raw connection's response: pieces can go direct
    writer = direct.writer_for(ex) if attach is not None else None
    sink: direct.Sink | None = None
    try:
        if (response.content_length or 0) > limit:
            tail = pipe.fail(upstream_too_large(limit, "a body"))
        else:
            send = head.send
            async for piece in response.pieces():
                began = perf()
                out = pipe.feed(piece)
                done = perf()
                spent += done - began
                if not out:
                    pass
                elif head.sent:  # the stream is open: the piece goes straight out (no refusal can come now)
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                elif not await head.refuse(pipe):
                    first = done
                    await head(out)
                if pipe.close_upstream:
                    break
                if sink is None and writer is not None and head.sent and attach is not None:
                    # the head is out: from now on pieces that come while this loop waits go direct
                    sink = direct.Sink(pipe, writer, cast(direct.Attachable, response))
                    attach(sink)
            if sink is not None and sink.failure is not None:
                raise sink.failure
            tail = pipe.flush()
    except OpenAIError as error:  # the upstream broke, went silent or passed its deadline
        tail = pipe.fail(error)
    except Exception:
        # The pipe never raises for what the upstream sends; this is the relay or a send: still one
        # error event and the end for the client, and the details for whoever reads the log.
        log.exception("stream %s (model %s): failed while relaying the upstream stream", rid, model)
        tail = pipe.fail(upstream_error(f"The gateway failed to relay the upstream's answer ({rid})."))
    finally:
        response.close()
        if ex is not None:
            if sink is not None:
                ex.direct_taken, ex.direct_declined = sink.taken, sink.declined
            ex.streamed(pipe, first, spent + (sink.spent if sink is not None else 0.0))
    if await head.refuse(pipe):
        return None
    return tail
