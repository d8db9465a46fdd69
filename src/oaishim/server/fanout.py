"""``n`` fanned out: the n upstream requests of one client request, run at once, their answers
merged by ``transform.fanin`` (the merge itself is pure and lives there).

All copies are opened together. Before anything reached the client, one failing copy is the
client's answer: its error in the official shape (the first failing copy's, in copy order), and the
other copies are closed. In a stream, a copy that fails later ends the client's stream with one
error event, as a single upstream's does. A client that goes away cancels the request's task, which
closes every copy (that is what frees the backend's slots).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from oaishim.server.asgi import Headers, Message, Send, send_error
from oaishim.server.exchange import current as current_exchange
from oaishim.server.relay import Head, fault, read_all, send_answer
from oaishim.server.seam import UpstreamResponse
from oaishim.transform.context import ResponseContext
from oaishim.transform.fanin import FanIn, merge_plain
from oaishim.transform.params.n import copy_bodies
from oaishim.transform.pipe import normalize_body, upstream_body, upstream_too_large
from oaishim.transform.request import PreparedRequest
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.wire.errors import OpenAIError, upstream_error
from oaishim.wire.headers import retry_headers

log = logging.getLogger("oaishim.relay")
# Open one prepared request upstream; None when its error answer was already given to ``send``.
Opener = Callable[[PreparedRequest, Send], Awaitable[UpstreamResponse | None]]


async def fan_out(
    open_one: Opener,
    prepared: PreparedRequest,
    ctx: ResponseContext,
    send: Send,
    extra: Headers,
    limit: int,
    copies: int,
    *,
    first: int = 0,
    before: tuple[dict[str, Any], ...] = (),
) -> None:
    """Send ``copies`` copies of ``prepared`` (copy numbers from ``first``: their seeds) and answer
    the client with their merged answer; ``before``: plain bodies already in hand (their choices come
    first)."""
    bodies = copy_bodies(prepared.body, copies, first)
    responses = await _open_all(open_one, [dataclasses.replace(prepared, body=b) for b in bodies], send, extra)
    if responses is None:
        return
    try:
        failed = next((r for r in responses if r.status >= 400), None)
        if failed is not None:
            try:
                error = normalize_upstream_error(
                    failed.status, await read_all(failed, limit), context_param=ctx.context_param
                )
            except OpenAIError as failure:
                error = failure
            await send_error(send, error, [*extra, *retry_headers(failed.headers)])
            return
        if prepared.stream:
            await _stream(responses, ctx, send, extra, limit)
        else:
            await _plain(responses, prepared, ctx, send, extra, limit, before)
    finally:
        for response in responses:
            response.close()


async def _open_all(
    open_one: Opener, prepared: list[PreparedRequest], send: Send, extra: Headers
) -> list[UpstreamResponse] | None:
    """Every copy opened, or None when the client already has the error answer of one of them."""
    held: list[list[Message]] = [[] for _ in prepared]

    def holder(k: int) -> Send:
        async def hold(message: Message) -> None:
            held[k].append(message)

        return hold

    tasks = [asyncio.ensure_future(open_one(p, holder(k))) for k, p in enumerate(prepared)]
    try:
        opened = await asyncio.gather(*tasks)
    except BaseException:  # one copy failed to open (or the client went away): close the others
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is None:
                response = task.result()
                if response is not None:
                    response.close()
        raise
    if all(response is not None for response in opened):
        return [r for r in opened if r is not None]
    for response in opened:
        if response is not None:
            response.close()
    k = next(k for k, r in enumerate(opened) if r is None)
    for message in held[k]:  # that copy's error answer, as open_one gave it
        await send(message)
    return None


async def _plain(
    responses: list[UpstreamResponse],
    prepared: PreparedRequest,
    ctx: ResponseContext,
    send: Send,
    extra: Headers,
    limit: int,
    before: tuple[dict[str, Any], ...],
) -> None:
    try:
        raws = await asyncio.gather(*(read_all(r, limit) for r in responses))
        bodies = [upstream_body(r.status, raw, ctx) for r, raw in zip(responses, raws, strict=True)]
    except OpenAIError as error:
        fault(error)
        await send_error(send, error, extra)
        return
    await send_answer(lambda: normalize_body(prepared.endpoint, merge_plain([*before, *bodies]), ctx), ctx, send, extra)


async def _stream(
    responses: list[UpstreamResponse], ctx: ResponseContext, send: Send, extra: Headers, limit: int
) -> None:
    merger = FanIn(ctx, len(responses), sse=[r.content_type == "text/event-stream" for r in responses], max_event=limit)
    head = Head(send, extra)  # the 200 held until the first chunk, as for one upstream
    tail = await pump_all(merger, responses, head, limit, ctx.response_id, ctx.model)
    if tail is not None:
        await head(tail, more=False)


async def pump_all(
    merger: FanIn, responses: list[UpstreamResponse], head: Head, limit: int, rid: str, model: str
) -> bytes | None:
    """``relay.pump`` for n bodies: each copy is read by its own task, and what any of them brings is
    merged and sent as it comes; returns the last bytes for the client, or None when a copy refused
    the request before any chunk and the client got that error as the answer (``Head.refuse``).
    Every copy is closed at the end, also when the client went away."""
    ex = current_exchange()
    if ex is not None:
        ex.stream_open()
    queue: asyncio.Queue[tuple[int, bytes | OpenAIError | None]] = asyncio.Queue(maxsize=len(responses))

    async def read(k: int, response: UpstreamResponse) -> None:
        try:
            if (response.content_length or 0) > limit:
                raise upstream_too_large(limit, "a body")
            async for piece in response.pieces():
                await queue.put((k, piece))
            await queue.put((k, None))
        except OpenAIError as error:
            await queue.put((k, error))

    readers = [asyncio.ensure_future(read(k, r)) for k, r in enumerate(responses)]
    perf = time.perf_counter
    first: float | None = None
    spent = 0.0
    tail = b""
    try:
        while not merger.ended:
            k, item = await queue.get()
            began = perf()
            if isinstance(item, OpenAIError):
                out = merger.fail(item)
            elif item is None:
                out = merger.end(k)
            else:
                out = merger.feed(k, item)
            done = perf()
            spent += done - began
            if merger.ended:
                tail = out
                break
            if out and not await head.refuse(merger):
                first = done if first is None else first
                await head(out)
            for copy in merger.closable:  # a stop at the gateway ended that copy: its backend stops now
                readers[copy].cancel()
                responses[copy].close()
            merger.closable.clear()
    except Exception:
        log.exception("stream %s (model %s): failed while relaying the upstream streams", rid, model)
        tail = merger.fail(upstream_error(f"The gateway failed to relay the upstream's answer ({rid})."))
    finally:
        for reader in readers:
            reader.cancel()
        for response in responses:
            response.close()
        if ex is not None:
            ex.streamed(merger, first, spent)
    if await head.refuse(merger):
        return None
    return tail


async def native_plain(
    open_one: Opener,
    response: UpstreamResponse,
    prepared: PreparedRequest,
    ctx: ResponseContext,
    send: Send,
    extra: Headers,
    limit: int,
) -> bool:
    """A plain answer to ``n > 1`` from a backend said to honour ``n``: relayed as it is when it has
    n choices; when it has fewer, the missing ones are fanned out and merged after its own. True when
    it had fewer (the caller fans out this route's later requests from the start)."""
    ex = current_exchange()
    try:
        body = upstream_body(response.status, await read_all(response, limit), ctx)
    except OpenAIError as error:
        response.close()
        if ex is not None and response.status < 400:
            ex.fault(error)
        retry = retry_headers(response.headers) if response.status >= 400 else []
        await send_error(send, error, [*extra, *retry])
        return False
    choices = body.get("choices")
    have = len(choices) if isinstance(choices, list) else prepared.n
    if 0 < have < prepared.n:
        log.warning(
            "response %s: the backend answered %d of n=%d choices; fanning out the rest",
            ctx.response_id,
            have,
            prepared.n,
        )
        await fan_out(open_one, prepared, ctx, send, extra, limit, prepared.n - have, first=have, before=(body,))
        return True
    await send_answer(lambda: normalize_body(prepared.endpoint, body, ctx), ctx, send, extra)
    return False
