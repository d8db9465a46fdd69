"""Sending one prepared request upstream and relaying its answer: the dispatch half of the gateway
(``server.app.Gateway`` holds one).

One request or ``n`` fanned out (``server.fanout``); the resend of a tool choice the backend refused
for want of a tool-call parser (with ``none``, or with its guided decoding); a forced
``tool_choice`` checked and asked again (``server.forced``); then the plain or streamed relay
(``server.relay``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Final

import orjson

from oaishim.profiles._base import Profile
from oaishim.server import fanout, forced, relay
from oaishim.server.asgi import Headers, Send, send_error
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.exchange import current
from oaishim.server.seam import Upstream, UpstreamResponse
from oaishim.transform.context import ResponseContext
from oaishim.transform.params.reasoning_effort import without_switch
from oaishim.transform.params.tool_choice import guided_body
from oaishim.transform.request import Endpoint, PreparedRequest
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.wire.errors import OpenAIError
from oaishim.wire.headers import retry_headers

log: Final = logging.getLogger("oaishim.gateway")


class Dispatch:
    """The upstream calls of the OpenAI endpoints (chat, completions, embeddings; the Responses API
    through ``open_upstream``): one per gateway, which holds it (``Gateway.dispatch``; a part, not a
    base class: compiled with mypyc 2.4, calling a subclass's ``__call__`` whose base has none
    crashes the interpreter)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.n_short: set[str] = set()  # routes whose "native" backend answered fewer than n choices

    async def exchange(
        self,
        upstream: Upstream,
        route: ModelRoute,
        path: str,
        endpoint: Endpoint,
        prepared: PreparedRequest,
        ctx: ResponseContext,
        send: Send,
        extra: Headers,
        profile: Profile,
    ) -> None:
        limit = self.settings.max_upstream_event_bytes

        def open_one(one: PreparedRequest, to: Send) -> Awaitable[UpstreamResponse | None]:
            return self.open_upstream(upstream, route, path, one, ctx, to, extra, profile)

        ex = current()
        copies = prepared.fan_out if prepared.fan_out > 1 else prepared.n if route.name in self.n_short else 1
        if copies > 1:
            if ex is not None:
                ex.repaired(("n_fanned_out",))
            await fanout.fan_out(open_one, prepared, ctx, send, extra, limit, copies)
            return
        response = await self.open_upstream(upstream, route, path, prepared, ctx, send, extra, profile)
        if response is None:
            return
        try:
            if prepared.n > 1 and profile.n_refusal and response.status >= 400:
                await self._n_refused(open_one, response, prepared, ctx, send, extra, profile.n_refusal)
            elif prepared.stream:
                pipe = await relay.relay_stream(response, ctx, send, extra, limit)
                got = len(pipe.normalizer.choices) if pipe is not None and pipe.normalizer.error is None else 0
                if 0 < got < prepared.n:  # too late to fan out this one: report it, fan out the next ones
                    log.warning("model %s: the backend answered %d of n=%d choices", route.name, got, prepared.n)
                    self._short(route, "n_short")
            elif prepared.n > 1:
                if await fanout.native_plain(open_one, response, prepared, ctx, send, extra, limit):
                    self._short(route, "n_fanned_out")
            else:
                await relay.relay_plain(response, ctx, endpoint, send, extra, limit)
        finally:
            response.close()

    def _short(self, route: ModelRoute, kind: str) -> None:
        """The route's backend gave fewer choices than asked although its profile says it honours n."""
        self.n_short.add(route.name)
        ex = current()
        if ex is not None:
            ex.repaired((kind,))

    async def _n_refused(
        self,
        open_one: fanout.Opener,
        response: UpstreamResponse,
        prepared: PreparedRequest,
        ctx: ResponseContext,
        send: Send,
        extra: Headers,
        refusal: str,
    ) -> None:
        """An error answer to n > 1: fanned out when it is the profile's refusal of n, else relayed."""
        limit = self.settings.max_upstream_event_bytes
        try:
            raw = await relay.read_all(response, limit)
        except OpenAIError as failure:
            await send_error(send, failure, extra)
            return
        finally:
            response.close()
        if refusal.encode() not in raw:
            error = normalize_upstream_error(response.status, raw, context_param=ctx.context_param)
            await send_error(send, error, [*extra, *retry_headers(response.headers)])
            return
        log.info("the backend refuses n=%d; fanning out %d requests", prepared.n, prepared.n)
        ex = current()
        if ex is not None:
            ex.repaired(("n_fanned_out",))
        await fanout.fan_out(open_one, prepared, ctx, send, extra, limit, prepared.n)

    async def open_upstream(
        self,
        upstream: Upstream,
        route: ModelRoute,
        path: str,
        prepared: PreparedRequest,
        ctx: ResponseContext,
        send: Send,
        extra: Headers,
        profile: Profile,
    ) -> UpstreamResponse | None:
        """Send the prepared request; None when the client already has its error."""
        ex = current()
        if ex is not None:
            ex.sending()
        try:
            response = await upstream.open(route, "POST", path, orjson.dumps(prepared.body))
        except OpenAIError as failure:
            if ex is not None:
                ex.fault(failure)
            raise
        body = prepared.body
        # (only an error answer can be a refusal: the bodies to resend are not built for the others)
        resends = (
            [r for r in self._resends(prepared, ctx, profile) if r[0] == response.status]
            if response.status >= 400
            else []
        )
        if resends:
            # A backend without a tool-call parser refuses tool_choice "auto" (vLLM, V-5): the gateway
            # parses tool calls written as text, so it asks again with "none". A forced choice it
            # refuses is asked again with its guided decoding forcing one call (ToolChoiceSupport). A
            # thinking switch the template does not read is refused by TensorRT-LLM's guard: asked
            # again without it (ReasoningEffortIn.switch_refusal). llama.cpp answers 500 when what the
            # model began as a call under "auto" does not parse (L-31): asked again with "none", the
            # gateway parsing calls written as text; so is its 500 when the lazy grammar of a call
            # had completed and one more token came (L-33). The refusal's wording says which.
            try:
                raw = await relay.read_all(response, self.settings.max_upstream_event_bytes)
            finally:
                response.close()
            resend = next((r for r in resends if r[1].encode() in raw), None)
            if resend is None:
                error = normalize_upstream_error(response.status, raw, context_param=ctx.context_param)
                await send_error(send, error, [*extra, *retry_headers(response.headers)])
                return None
            _status, _phrase, body, kind = resend
            log.info("model %s: the backend refused what it cannot read; resending (%s)", route.name, kind)
            if ex is not None:
                ex.repaired((kind,))
            response = await upstream.open(route, "POST", path, orjson.dumps(body))
        if prepared.tool_check is not None:
            sent = orjson.dumps(self._second_try(prepared, body, profile))
            response = await forced.enforce(
                response,
                lambda: upstream.open(route, "POST", path, sent),
                prepared.tool_check,
                ctx,
                prepared.stream,
                self.settings.max_upstream_event_bytes,
                profile.tool_choice.unparsed,
                prepared.tool_schemas,
            )
        if ex is not None:
            ex.opened(response.status)
        return response

    @staticmethod
    def _second_try(prepared: PreparedRequest, body: dict[str, Any], profile: Profile) -> dict[str, Any]:
        """What a forced choice is asked with when the first answer lacks the call: the same request,
        or, where the backend's own forcing may not hold (``verify``), its guided decoding forcing one call."""
        if profile.tool_choice.verify:
            guided = guided_body(body, prepared.tool_choice, profile)
            if guided is not None:
                return guided
        return body

    @staticmethod
    def _resends(
        prepared: PreparedRequest, ctx: ResponseContext, profile: Profile
    ) -> list[tuple[int, str, dict[str, Any], str]]:
        """Each (status and phrase of a refusal, the body to send instead, the repair's kind) for what
        the backend may refuse: a tool choice, for want of a tool-call parser, or a call under "auto"
        it could not parse; a thinking switch its template does not read."""
        out: list[tuple[int, str, dict[str, Any], str]] = []
        switch_refusal = profile.reasoning_effort_in.switch_refusal
        unswitched = without_switch(prepared.body, prepared.thinking) if switch_refusal else None
        if switch_refusal and unswitched is not None:
            out.append((400, switch_refusal, unswitched, "thinking_switch_refused"))
        if ctx.repair is None or not ctx.repair.tools:
            return out
        if prepared.tool_choice == "auto":
            as_none = {**prepared.body, "tool_choice": "none"}
            if profile.auto_tools_refusal:
                out.append((400, profile.auto_tools_refusal, as_none, "tool_choice_none_resent"))
            for phrase in (profile.tool_choice.unparsed, profile.tool_choice.grammar_done):  # L-31, L-33
                if phrase:
                    out.append((500, phrase, as_none, "tool_choice_none_resent"))
            return out
        refusal = profile.tool_choice.refusal
        if refusal and prepared.body.get("tool_choice") == prepared.tool_choice:
            guided = guided_body(prepared.body, prepared.tool_choice, profile)
            if guided is not None:
                out.append((400, refusal, guided, "tool_choice_guided"))
        return out
