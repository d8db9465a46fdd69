"""A forced ``tool_choice`` the backend cannot enforce: the answer is read until it shows the call,
and asked for once more when it does not (the I/O half; the decision is ``transform.choice_watch``).

Nothing reaches the client before the verdict: a plain answer is read whole, a stream until a call
of the forced function begins (with the function's schema: until its arguments are whole and fit it),
then what was held and the rest flow on as they come. An answer
without the call is closed and the request sent once more; a second one without it becomes the
OpenAI-shaped error of ``choice_watch.unmet``. Errors and answers the gateway cannot read are not
judged here: they go to the client as any other, except the backend's own 500 for a call the model
began that did not parse (a profile's ``unparsed`` phrase, llama.cpp L-31; on a stream, the error
event that stands in its finish): that is an answer without the call.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from oaishim.server.exchange import current
from oaishim.server.seam import ResponseWrapper, UpstreamResponse
from oaishim.transform.choice_watch import ArgumentCheck, ChoiceWatch, Verdict, plain_verdict, unmet
from oaishim.transform.context import ResponseContext

log = logging.getLogger("oaishim.gateway")


class Replayed(ResponseWrapper):
    """An upstream response whose first pieces were already read: they come again, then the rest."""

    __slots__ = ("held", "rest")

    def __init__(self, inner: UpstreamResponse, held: list[bytes], rest: AsyncIterator[bytes] | None) -> None:
        super().__init__(inner)
        self.held, self.rest = held, rest

    async def pieces(self) -> AsyncIterator[bytes]:
        held, self.held = self.held, []
        for piece in held:
            yield piece
        if self.rest is not None:
            async for piece in self.rest:
                yield piece


async def _judge(
    response: UpstreamResponse,
    check: str,
    ctx: ResponseContext,
    stream: bool,
    limit: int,
    arguments: ArgumentCheck,
    unparsed: str | None,
) -> tuple[Verdict, Replayed]:
    if not stream:
        held, whole = await _read_held(response, limit)
        if not whole:  # the relay refuses it: not for the check to judge
            return "pass", Replayed(response, held, None)
        return plain_verdict(check, response.status, b"".join(held), ctx, arguments), Replayed(response, held, None)
    held = []
    sse = response.content_type == "text/event-stream"
    watch = ChoiceWatch(check, ctx, sse=sse, max_event=limit, arguments=arguments, unparsed=unparsed)
    rest = response.pieces().__aiter__()
    size = 0
    async for piece in rest:
        held.append(piece)
        size += len(piece)
        verdict = watch.feed(piece)
        if verdict is None and size > limit:
            verdict = "pass"  # a long answer without the call yet: judged by no one, passed on as it is
        if verdict is not None:
            return verdict, Replayed(response, held, rest)
    return watch.end(), Replayed(response, held, None)


async def _unparsed(response: UpstreamResponse, phrase: str, limit: int) -> tuple[Verdict, Replayed]:
    """An error answer: "unmet" when it is the backend's own failure to parse the call the model began."""
    held, whole = await _read_held(response, limit)
    if not whole:
        return "pass", Replayed(response, held, None)
    return ("unmet" if phrase.encode() in b"".join(held) else "pass"), Replayed(response, held, None)


async def _read_held(response: UpstreamResponse, limit: int) -> tuple[list[bytes], bool]:
    """The body's pieces, kept to be replayed, up to the first that takes it past ``limit``; and
    whether that was all of it."""
    held: list[bytes] = []
    size = 0
    async for piece in response.pieces():
        held.append(piece)
        size += len(piece)
        if size > limit:
            return held, False
    return held, True


async def enforce(
    response: UpstreamResponse,
    again: Callable[[], Awaitable[UpstreamResponse]],
    check: str,
    ctx: ResponseContext,
    stream: bool,
    limit: int,
    unparsed: str | None = None,
    schemas: Mapping[str, Any] | None = None,
) -> UpstreamResponse:
    """The answer to relay (the first that has the call, its arguments fitting the function's
    ``schemas`` entry), or the ``unmet`` error raised. ``unparsed``: the phrase of the backend's 500
    for a call that did not parse (``ToolChoiceSupport.unparsed``)."""
    ex = current()
    arguments = ArgumentCheck(schemas)
    for attempt in (1, 2):
        if response.status >= 400 and (response.status != 500 or unparsed is None):
            return response
        try:
            if response.status >= 400:
                verdict, replayed = await _unparsed(response, unparsed or "", limit)
            else:
                verdict, replayed = await _judge(response, check, ctx, stream, limit, arguments, unparsed)
        except BaseException:
            response.close()
            raise
        if verdict != "unmet":
            return replayed
        response.close()
        rid = ex.request_id if ex is not None else "-"
        log.warning(
            "request %s (response %s): the answer has no %s although tool_choice forces it (attempt %d of 2)",
            rid,
            ctx.response_id,
            "tool call" if check == "" else f"call of {check!r}",
            attempt,
        )
        if ex is not None:
            ex.repaired(("tool_choice_retried",) if attempt == 1 else ("tool_choice_unmet",))
        if attempt == 1:
            response = await again()
    raise unmet(check)
