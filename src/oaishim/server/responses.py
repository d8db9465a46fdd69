"""The Responses API endpoints, generated from the backend's Chat Completions (never forwarded).

* ``POST /v1/responses``: the request is mapped (``transform.responses``; ``previous_response_id``
  and ``item_reference`` inputs resolved from the store), then takes the chat path: chat validation (the mapped request must
  pass), the profile's rewrite, the upstream through the seam, and the stream pipe — so every chat
  repair (``<think>`` split, tool calls from text, stops, end of turn) applies — with the Responses
  encoder in place of the chat one; a plain answer goes through ``plain_answer`` and
  ``chat_to_response``.
* ``GET /v1/responses/{id}`` (``stream=true`` is refused), ``DELETE /v1/responses/{id}``,
  ``GET /v1/responses/{id}/input_items`` (``after``/``before``/``limit``/``order``).

Errors before a stream's first byte are the usual HTTP error body; once the SSE started, a failure
is ``error`` then ``response.failed`` (the encoder's ``fail``).

With ``store`` (the default) the record is written before the terminal event (or the plain body)
is sent, so a client that continues at once finds it. The terminal event is held back for that:
when the write fails, a plain request gets the store's OpenAI error (500, or 400 for a record over
the size bound) and a stream ends in ``error`` + ``response.failed`` instead of
``response.completed`` — the client was told the response is stored, and a completion whose
continuation then fails with not-found would mislead it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final, Protocol
from urllib.parse import parse_qs

import orjson

from oaishim.profiles._base import Profile
from oaishim.server import relay
from oaishim.server.asgi import Headers, Receive, Scope, Send, header, parse_json, send_error, send_json
from oaishim.server.auth import KeyRing
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.dispatch import Dispatch
from oaishim.server.exchange import current, note, perf
from oaishim.server.seam import Upstream, UpstreamResponse
from oaishim.server.store import ResponseStore, tenant
from oaishim.state import Record, StoreError
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe, plain_answer
from oaishim.transform.plan import response_context
from oaishim.transform.request import rewrite
from oaishim.transform.responses import (
    ResponsesRequestInfo,
    ResponsesStreamEncoder,
    chat_to_response,
    frame,
    item_ids,
    new_id,
    page,
    referenced_responses,
    replace_references,
)
from oaishim.transform.responses._check import check_request, unsupported
from oaishim.transform.responses._info import IdFactory, failure_code
from oaishim.transform.responses.history import turn_history
from oaishim.transform.responses.request import responses_to_chat
from oaishim.transform.responses.stream import HeldTerminal
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.transform.validate import validate
from oaishim.wire.errors import OpenAIError, bad_request, not_found
from oaishim.wire.headers import retry_headers


class ChatHost(Protocol):
    """What the endpoints need of the gateway that serves them (``server.app.Gateway``): its chat
    path's pieces, so a Responses request takes exactly the way a chat request takes."""

    settings: Settings
    keys: KeyRing
    secret_texts: tuple[str, ...]  # masked in the text a model streams (transform.secrets)

    async def read_request_body(self, receive: Receive) -> bytes: ...

    def model_route(self, body: Any) -> ModelRoute: ...

    dispatch: Dispatch  # its upstream calls: open_upstream sends a prepared chat request

    async def profile_for(self, route: ModelRoute) -> Profile: ...


log: Final = logging.getLogger("oaishim.responses")
CHAT_PATH: Final = "/v1/chat/completions"


def _not_found(response_id: str) -> OpenAIError:
    return not_found(f"No response found with id '{response_id}'.", param="response_id", code="response_not_found")


def _previous_not_found(response_id: str) -> OpenAIError:
    return bad_request(
        f"Previous response with id '{response_id}' not found.", "previous_response_id", "previous_response_not_found"
    )


def _failed_instead(terminal: bytes, error: OpenAIError) -> bytes:
    """``error`` + ``response.failed`` in place of a held terminal event, numbered where it stood."""
    event = orjson.loads(terminal.split(b"\ndata: ", 1)[1])
    seq = int(event["sequence_number"])
    code = failure_code(error)
    response = {**event["response"], "status": "failed", "completed_at": None, "incomplete_details": None}
    response["error"] = {"code": code, "message": error.message}
    return frame(
        {"type": "error", "sequence_number": seq, "code": code, "message": error.message, "param": error.param}
    ) + frame({"type": "response.failed", "sequence_number": seq + 1, "response": response})


class ResponsesAPI:
    """The four endpoints of one gateway, and its store."""

    def __init__(self, gateway: ChatHost) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        routes = [route.upstream_api_key for route in self.settings.models]
        self.state = ResponseStore(self.settings, (*self.settings.client_keys, *routes))

    async def startup(self) -> None:
        await self.state.startup()

    async def shutdown(self) -> None:
        await self.state.shutdown()

    def _tenant(self, scope: Scope) -> str:
        keys = self.gateway.keys
        return tenant(keys.presented(header(scope, b"authorization"), header(scope, b"api-key")), keys.enabled)

    def _key(self) -> bytes:
        try:
            return self.state.key()
        except OSError as exc:
            log.error("cannot read or create the encrypted_content key beside %s: %s", self.state.target, exc)
            raise OpenAIError(500, "The response store is unavailable; please retry.", "server_error") from None

    # -- routing -------------------------------------------------------------------------------
    async def serve(
        self, method: str, path: str, scope: Scope, receive: Receive, send: Send, upstream: Upstream
    ) -> None:
        if path == "/v1/responses":
            await self._create(scope, receive, send, upstream)  # the gateway answered other methods 405
            return
        parts = path.removeprefix("/v1/responses/").split("/")
        allowed = {1: ("GET", "DELETE"), 2: ("GET",)}.get(len(parts), ())
        if not parts[0] or (len(parts) == 2 and parts[1] != "input_items") or not allowed:
            raise not_found(f"Invalid URL ({method} {path})")
        if method not in allowed:
            raise OpenAIError(405, f"Invalid method for URL ({method} {path})", "invalid_request_error")
        await self.gateway.read_request_body(receive)  # a body is read (and bounded) even where none is expected
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        owner = self._tenant(scope)
        if len(parts) == 2:
            await self._input_items(parts[0], owner, query, send)
        elif method == "DELETE":
            if not await self._store_call(self.state.open().delete(parts[0], owner)):
                raise _not_found(parts[0])
            await send_json(send, 200, {"id": parts[0], "object": "response.deleted", "deleted": True})
        else:
            if query.get("stream", "false").lower() not in ("false", "0"):
                raise unsupported("stream", "streaming a stored response again is not available on this server")
            record = await self._store_call(self.state.open().get(parts[0], owner))
            if record is None:
                raise _not_found(parts[0])
            await send_json(send, 200, record.response)

    async def _input_items(self, response_id: str, owner: str, query: dict[str, str], send: Send) -> None:
        record = await self._store_call(self.state.open().get(response_id, owner))
        if record is None:
            raise _not_found(response_id)
        listing = page(
            record.input_items,
            after=query.get("after"),
            before=query.get("before"),
            limit=query.get("limit"),
            order=query.get("order"),
        )
        await send_json(send, 200, listing)

    @staticmethod
    async def _store_call(call: Any) -> Any:
        try:
            return await call
        except StoreError as error:
            log.error("response store: %s", error)
            raise error.openai() from None

    # -- POST /v1/responses ----------------------------------------------------------------------
    async def _create(self, scope: Scope, receive: Receive, send: Send, upstream: Upstream) -> None:
        gateway = self.gateway
        body = parse_json(await gateway.read_request_body(receive))
        check_request(body)  # the official refusals first, before the store or the backend is asked
        route = gateway.model_route(body)
        owner = self._tenant(scope)
        history: list[Any] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            found = await self._store_call(self.state.open().history(previous, owner))
            if found is None:
                raise _previous_not_found(previous)
            history = found
        records: dict[str, tuple[list[Any], list[Any]] | None] = {}
        for response_id in referenced_responses(body):
            record = await self._store_call(self.state.open().get(response_id, owner))
            records[response_id] = None if record is None else (record.response.get("output") or [], record.input_items)
        body = replace_references(body, records)
        key = self._key()
        turn_id = new_id("resp")
        ids = item_ids(turn_id)  # an item_reference to any of this turn's items finds this record
        chat, info = responses_to_chat(body, key=key, history=history, id_factory=ids)
        client = validate("chat", chat)  # the mapped request passes what a chat request must
        profile = await gateway.profile_for(route)
        prepared = rewrite("chat", client, profile, upstream_model=route.upstream_model)
        ctx = response_context(
            "chat",
            prepared,
            self.settings,
            profile.display_markup,
            profile.tool_choice.unparsed,
            profile.tool_choice.grammar_done,
            gateway.secret_texts,
        )
        # The encoder reads reasoning from reasoning_content whatever the chat setting says (set on
        # this request's own context: dataclasses.replace copied it field by field, as Python)
        ctx.reasoning_field, ctx.keep_extensions, ctx.context_param = "reasoning_content", False, "input"
        extra: Headers = [(b"x-oaishim-dropped", ",".join(prepared.dropped).encode())] if prepared.dropped else []
        note(route.name, profile.name, prepared)
        turn = _Turn(self, owner, key, info, chat["messages"], history, turn_id, ids)

        async def work() -> None:
            response = await gateway.dispatch.open_upstream(
                upstream, route, CHAT_PATH, prepared, ctx, send, extra, profile
            )
            if response is None:
                return
            try:
                if info.stream:
                    await turn.stream(response, ctx, send, extra)
                else:
                    await turn.plain(response, ctx, send, extra)
            finally:
                response.close()

        await relay.watching_client(receive, work())


class _Turn:
    """One ``POST /v1/responses``: its id, the pieces its record is made of, the two ways to answer."""

    def __init__(
        self,
        api: ResponsesAPI,
        owner: str,
        key: bytes,
        info: ResponsesRequestInfo,
        messages: list[dict[str, Any]],
        history: list[Any],
        response_id: str,
        ids: IdFactory,
    ) -> None:
        self.api, self.owner, self.key, self.info = api, owner, key, info
        self.messages, self.history = messages, history
        self.id, self.ids = response_id, ids
        self.created_at = int(time.time())
        self.limit = api.settings.max_upstream_event_bytes

    async def _keep(self, response: dict[str, Any]) -> None:
        """Store the response (when asked) before the client hears it is done; StoreError when not."""
        if not self.info.store:
            return
        record = Record(
            id=self.id,
            tenant=self.owner,
            created_at=int(response.get("created_at") or self.created_at),
            model=self.info.model,
            response=response,
            input_items=self.info.input_items,
            history=turn_history(self.messages, self.info, self.history, response),
            previous_response_id=self.info.previous_response_id,
        )
        try:
            await self.api.state.open().put(record)
        except StoreError:
            log.exception("response %s: storing it failed", self.id)
            raise

    async def plain(self, response: UpstreamResponse, ctx: ResponseContext, send: Send, extra: Headers) -> None:
        try:
            raw = await relay.read_all(response, self.limit)
        except OpenAIError as error:
            response.close()
            relay.fault(error)
            await send_error(send, error, extra)
            return
        began = perf()
        try:
            completion = plain_answer("chat", response.status, raw, ctx)
            body = chat_to_response(
                completion,
                self.info,
                response_id=self.id,
                created_at=self.created_at,
                key=self.key,
                id_factory=self.ids,
            )
        except OpenAIError as error:
            if response.status < 400:
                relay.fault(error)
                if (ex := current()) is not None:
                    ex.violated(ctx)  # an answer that broke its response_format (the error policy)
            retry = retry_headers(response.headers) if response.status >= 400 else []
            await send_error(send, error, [*extra, *retry])
            return
        except Exception:
            log.exception("response %s (model %s): failed to relay the upstream body", self.id, ctx.model)
            failure = OpenAIError(
                502, f"The gateway failed to relay the upstream's answer ({self.id}).", "server_error"
            )
            await send_error(send, failure, extra)
            return
        try:
            await self._keep(body)
        except StoreError as refused:  # (not ``error``: compiled, one name has one type in a function)
            await send_error(send, refused.openai(), extra)
            return
        ex = current()
        if ex is not None:
            ex.answered(ctx, body, perf() - began)
        await relay.send_whole(ex, send, orjson.dumps(body), extra)  # with what it violated (Exchange.answered)

    async def stream(self, response: UpstreamResponse, ctx: ResponseContext, send: Send, extra: Headers) -> None:
        if response.status >= 400:
            try:
                raw = await relay.read_all(response, self.limit)
                error = normalize_upstream_error(response.status, raw, context_param=ctx.context_param)
            except OpenAIError as failure:
                response.close()
                error = failure
            await send_error(send, error, [*extra, *retry_headers(response.headers)])
            return
        encoder = ResponsesStreamEncoder(
            self.info, response_id=self.id, created_at=self.created_at, key=self.key, id_factory=self.ids
        )
        held = HeldTerminal(encoder)
        pipe = StreamPipe(ctx, sse=response.content_type == "text/event-stream", max_event=self.limit, encoder=held)
        head = relay.Head(send, extra, b"".join(encoder.start()))
        tail = await relay.pump(pipe, response, head, self.limit, self.id, ctx.model)
        if tail is None:  # refused before its first chunk: the client has the error, nothing is stored
            return
        ex = current()
        if ex is not None and ex.trace is not None:
            ex.trace.answered(encoder.response)  # the id the client saw (resp_…), not the chat stream's
        terminal = held.terminal
        try:
            if self.info.store:  # (a copy of the response is made only to be kept)
                await self._keep(encoder.response)
        except StoreError as error:
            if b"response.failed" not in terminal.split(b"\n", 1)[0]:
                terminal = _failed_instead(terminal, error.openai())
        await head(tail + terminal, more=False)
