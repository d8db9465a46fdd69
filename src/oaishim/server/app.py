"""The gateway as an ASGI application: routing, keys, body limits, and the OpenAI endpoints.

Phases, as in mitmproxy's hooks: read and validate the request (nothing reaches the backend until
it passes what the official API would check), open the upstream request (replicas tried in turn
while connecting fails), then relay the answer, plain or streamed.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

import orjson

from oaishim.capture.redact import MIN_SECRET, scrub_bytes, secret_needles
from oaishim.profiles import get_profile
from oaishim.profiles._base import Profile
from oaishim.profiles.detect import probe_paths, resolve, template_paths, with_template
from oaishim.server import relay
from oaishim.server.access import AccessLog
from oaishim.server.asgi import (
    AnswerBroken,
    BodyTooLarge,
    ClientGone,
    Headers,
    Receive,
    Scope,
    Send,
    header,
    lifespan,
    parse_json,
    read_body,
    scrubbing,
    send_bytes,
    send_error,
    send_json,
)
from oaishim.server.auth import KeyRing
from oaishim.server.capture_feed import RemoteRecording
from oaishim.server.cluster import Cluster
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.dispatch import Dispatch
from oaishim.server.exchange import Exchange, StreamCount, current, name_requests, new_request_id, note, perf
from oaishim.server.limits import limiter_for
from oaishim.server.metrics import CONTENT_TYPE, Metrics
from oaishim.server.recorder import Recorder
from oaishim.server.recording import Recording, RecordingUpstream, recording_for
from oaishim.server.responses import ResponsesAPI
from oaishim.server.seam import Upstream, UpstreamResponse
from oaishim.server.seam import header as response_header
from oaishim.server.tracing import configured as tracing_configured
from oaishim.server.upstream import Upstreams
from oaishim.transform.plan import response_context
from oaishim.transform.request import Endpoint, rewrite
from oaishim.transform.upstream_errors import normalize_upstream_error
from oaishim.transform.validate import validate
from oaishim.wire.errors import (
    OpenAIError,
    bad_request,
    not_found,
    too_large,
    unauthorized,
)
from oaishim.wire.headers import passthrough_headers, retry_headers
from oaishim.wire.paths import BadTarget, allowed, normalize_path, parse_rule, quote_query

if TYPE_CHECKING:
    from oaishim.server.spans import Spans

log: Final = logging.getLogger("oaishim.gateway")
ENDPOINTS: Final[dict[str, Endpoint]] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}
# The gateway's own routes and the one method each answers; another method gets 405.
OWN_ROUTES: Final = {**dict.fromkeys(ENDPOINTS, "POST"), "/v1/responses": "POST", "/v1/models": "GET", "/health": "GET"}
UNLOGGED: Final = frozenset({"/health", "/metrics"})  # not captured


class Gateway:
    def __init__(
        self,
        settings: Settings,
        upstream: Upstream | None = None,
        *,
        tracing: Spans | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        """``upstream``: what the backends are reached through (``server.upstream`` unless given;
        the tests give an in-process one). ``tracing``: the spans' exporter (else as OTEL_* say).
        ``cluster``: what this process shares with the gateway's other processes (server.cluster:
        the capture process, the workers' limits and metrics)."""
        self.settings = settings
        # Settings.route's answers, asked once per name (the settings are frozen; it runs as Python):
        # a name not among the routes gets the answer for "*"
        self._routes = {route.name: settings.route(route.name) for route in settings.models}
        self._any_route = settings.route("*")
        self.dispatch = Dispatch(settings)  # the upstream calls (server.dispatch)
        self.cluster = cluster
        self.keys = KeyRing(settings.api_keys, settings.virtual_keys)
        buckets = cluster.buckets if cluster is not None else None
        self.limiter = limiter_for(settings.limits, settings.virtual_keys, buckets)  # None: no key has a limit
        self.upstreams: Upstream = upstream if upstream is not None else Upstreams(settings)
        self.profiles: dict[str, Profile] = {}
        self.started = int(time.time())
        remote = cluster.recording() if cluster is not None else None
        self.recording: Recording | RemoteRecording | None = remote or recording_for(settings)  # --capture DIR
        if self.recording is not None and isinstance(self.upstreams, Upstreams):
            self.upstreams.record_wire = True  # its connections note the reads of each answer (server.capture_wire)
        # the HTTP server notes the read that carried a whole request (server.http), which the recorder keeps
        self.notes_reads = self.recording is not None
        self.passthrough = tuple(parse_rule(entry) for entry in settings.passthrough)
        # Every secret the gateway knows, masked in whatever a client is sent (a backend that echoes
        # its key in an error, a header that repeats it, a model that was told it).
        known = [*settings.client_keys, settings.metrics_key, *(route.upstream_api_key for route in settings.models)]
        self.secrets = secret_needles(known)
        # and as text, masked in what a model writes over several tokens of a stream (transform.secrets)
        self.secret_texts = tuple(sorted({k for k in known if k and len(k) >= MIN_SECRET}, key=len, reverse=True))
        self.responses = ResponsesAPI(self)  # /v1/responses and its store
        self.streams = StreamCount()
        self._charging: set[asyncio.Future[None]] = set()  # a charge left running when a request was cut short
        self.metrics = Metrics(self.streams, self.recording.writer if self.recording is not None else None)
        self.access = AccessLog(settings.access_log, self.secrets)
        self.metrics_key = KeyRing((settings.metrics_key,) if settings.metrics_key else ())
        name_requests()
        self.tracing = tracing if tracing is not None else tracing_configured()  # None unless OTEL_* ask
        if self.tracing is not None:
            self.tracing.secrets = self.secrets  # masked in every span attribute
            self.upstreams = self.tracing.wrap(self.upstreams)

    # -- lifespan ----------------------------------------------------------------------------
    async def startup(self) -> None:
        if self.recording is not None:
            self.recording.start()
        await self.upstreams.start()
        await self.responses.startup()
        if self.cluster is not None:
            await self.cluster.start(self.metrics.render)

    async def shutdown(self) -> None:
        if self.cluster is not None:
            await self.cluster.close()
        if self.limiter is not None:
            await self.limiter.close()
        await self.responses.shutdown()
        await self.upstreams.close()
        if self.recording is not None:
            self.recording.close()
        if self.tracing is not None:
            self.tracing.shutdown()

    async def profile_for(self, route: ModelRoute) -> Profile:
        cached = self.profiles.get(route.name)
        if cached is not None:
            return cached
        paths = probe_paths(route.profile)  # auto and a family name detect; a pinned key does not
        if not paths:
            profile = get_profile(route.profile)
        else:
            profile, reason = await self._detect(route, paths)
            log.info("model %s: profile %s (%s)", route.name, profile.name, reason)
        self.profiles[route.name] = profile
        return profile

    async def _detect(self, route: ModelRoute, paths: tuple[str, ...]) -> tuple[Profile, str]:
        found: dict[str, Any] = {}
        server = await self._fetch(route, paths, found)
        profile, reason = resolve(route.profile, server, found)
        if not self.settings.text_repair:  # the gateway parses no call text: the backend's parser stays
            return profile, reason
        await self._fetch(route, template_paths(profile, found), found)  # the chat template (L-34)
        return with_template(profile, reason, found)

    async def _own_get(self, route: ModelRoute, path: str) -> UpstreamResponse:
        """A GET of the gateway's own (a profile's detection, the backend's model list), made while
        some request waits: not that request's upstream exchange, so not in its record (the
        upstream client hands what it sends to the exchange's recorder: ``Exchange.upstream_sent``)."""
        ex = current()
        noting = None if ex is None else ex.upstream_sent
        if ex is not None:
            ex.upstream_sent = None
        try:
            return await self.upstreams.open(route, "GET", path, None, None)
        finally:
            if ex is not None:
                ex.upstream_sent = noting

    async def _fetch(self, route: ModelRoute, paths: tuple[str, ...], found: dict[str, Any]) -> str | None:
        """GET each of ``paths`` into ``found`` (its parsed body, None for no usable answer) -> the Server header."""
        server: str | None = None
        for path in paths:
            response = await self._own_get(route, path)
            server = server or response_header(response, b"server")
            try:
                raw = await relay.read_all(response, self.settings.max_upstream_event_bytes)
                found[path] = orjson.loads(raw) if response.status == 200 else None
            except (orjson.JSONDecodeError, OpenAIError):  # a body cut off or too large: no answer
                found[path] = None
            finally:
                response.close()
            # An OpenAIError (no replica reachable, no answer in time) goes to the client: a profile
            # guessed from no answer at all would be cached for good.
        return server

    # -- ASGI --------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send, self.startup, self.shutdown)
            return
        if scope["type"] != "http":
            return
        ex = Exchange(scope, self.streams)
        rid = ex.request_id.encode()
        if self.secrets and scrub_bytes(rid, self.secrets) is not rid:
            ex.request_id = new_request_id()  # a client's id that holds a key is never echoed or logged
        token = ex.enter()
        if self.tracing is not None and scope["path"] not in UNLOGGED:
            ex.trace = self.tracing.begin(scope, ex)
        rec = None if self.recording is None or scope["path"] in UNLOGGED else self.recording.begin(scope, ex.wall)
        upstream = self.upstreams
        if rec is not None:
            receive, send = rec.wrap(receive, send)
            if isinstance(upstream, Upstreams) and upstream.record_wire:
                ex.upstream_sent = rec.upstream_sent  # the client hands each request it sent to the recorder
            else:
                upstream = RecordingUpstream(upstream, rec)  # another upstream (a test's): noted around it
            ex.direct_body = rec.direct(ex.direct_body)  # pieces written direct are recorded too (server.direct)
            ex.respond = rec.respond(ex.respond)  # an answer written whole is recorded too
        if self.secrets:
            send = ex.scrubbing = scrubbing(send, self.secrets)
        send = ex.watch(send)
        # No ``finally`` here awaits (compiled with mypyc 2.4, one that does can raise again an
        # exception long handled: tests/packaging/test_compiled_core.py), so the end is written twice.
        try:
            try:
                await self._http(scope, receive, send, upstream)
            except OpenAIError as error:
                await send_error(send, error)
            except ClientGone:
                ex.gone = True
            except AnswerBroken:
                pass
        except BaseException:  # cancelled (the server stops), or a fault the server logs
            self._ended(ex, token, rec)
            charge = self._charge(ex)
            if charge is not None:
                self._charging.add(task := asyncio.ensure_future(charge))
                task.add_done_callback(self._charging.discard)
            raise
        self._ended(ex, token, rec)
        charge = self._charge(ex)
        if charge is not None:
            await charge

    def _ended(self, ex: Exchange, token: contextvars.Token[Exchange | None], rec: Recorder | None) -> None:
        """The request is over: its capture, access log line, metrics and span end."""
        if rec is not None:
            rec.end(profile=ex.profile)  # (the profile a generating request was prepared for: exchange.note)
        ended = perf()
        self.access.write(ex, ended)
        self.metrics.observe(ex, ended)
        if ex.trace is not None:
            ex.trace.end(ex, ended)
        ex.sink = ex.respond = None  # (the chain's head holds the exchange: no cycle left to the collector)
        ex.leave(token)

    def _charge(self, ex: Exchange) -> Coroutine[Any, Any, None] | None:
        """What charges the tokens the request used to its virtual key's limit (None: nothing to charge)."""
        if ex.vkey is not None and self.limiter is not None and (ex.tokens_in or ex.tokens_out):
            return self.limiter.charge(ex.vkey, (ex.tokens_in or 0) + (ex.tokens_out or 0))
        return None

    async def _http(self, scope: Scope, receive: Receive, send: Send, upstream: Upstream) -> None:
        method = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        try:
            # Routing and the backend both see this one canonical path (wire.paths says why)
            path = normalize_path(raw_path)
        except BadTarget as exc:
            shown = raw_path[:200].decode("latin-1")
            raise bad_request(f"Invalid URL ({method} {shown}): {exc.reason}") from None
        ex = current()
        assert ex is not None
        ex.path = path
        if path == "/health" and method == "GET":
            ex.endpoint = "health"
            await send_json(send, 200, {"status": "ok"}, self.cluster.health_headers() if self.cluster else ())
            return
        if path == "/metrics" and method == "GET":
            ex.endpoint = "metrics"
            if not self.metrics_key.allows(header(scope, b"authorization")):
                raise unauthorized()
            page = self.metrics.render()
            if self.cluster is not None:
                page = await self.cluster.metrics_page(page)
            await send_bytes(send, 200, page, CONTENT_TYPE)
            return
        known, vkey = self.keys.identify(header(scope, b"authorization"), header(scope, b"api-key"))
        if not known:
            raise unauthorized()
        if vkey is not None:
            ex.vkey, ex.key_label = vkey, vkey.label
            generates = method == "POST" and (path in ENDPOINTS or path == "/v1/responses")
            if generates and self.limiter is not None and not await self.limiter.admit(vkey, ex, send):
                self.metrics.rate_limited.labels(vkey.label, ex.limited).inc()
                return
        own = OWN_ROUTES.get(path)
        if own is not None and method != own:
            raise OpenAIError(405, f"Invalid method for URL ({method} {path})", "invalid_request_error")
        if path in ENDPOINTS:
            ex.endpoint = ENDPOINTS[path]
            await self._openai(ENDPOINTS[path], path, receive, send, upstream)
        elif path == "/v1/responses" or path.startswith("/v1/responses/"):
            ex.endpoint = "responses" if path == "/v1/responses" else "responses_store"
            await self.responses.serve(method, path, scope, receive, send, upstream)
        elif path == "/v1/models":
            ex.endpoint = "models"
            await self._models(send)
        elif path.startswith("/v1/models/") and method == "GET":
            ex.endpoint = "models"
            await self._model(path.removeprefix("/v1/models/"), send)
        else:
            ex.endpoint = "passthrough"
            verdict = allowed(self.passthrough, method, path)
            if verdict is None or not self.settings.models:
                raise not_found(f"Invalid URL ({method} {path})")
            if not verdict:
                raise OpenAIError(405, f"Invalid method for URL ({method} {path})", "invalid_request_error")
            await self._passthrough(path, scope, receive, send, upstream)

    async def read_request_body(self, receive: Receive) -> bytes:
        try:
            return await read_body(receive, self.settings.max_body_bytes)
        except BodyTooLarge:
            raise too_large(self.settings.max_body_bytes) from None

    def model_route(self, body: Any) -> ModelRoute:
        """The route for the body's ``model``; the official 404 or 400 when there is none."""
        model = body.get("model") if isinstance(body, dict) else None
        route = (self._routes.get(model) or self._any_route) if isinstance(model, str) else None
        ex = current()
        vkey = ex.vkey if ex is not None else None
        if route is not None and vkey is not None and vkey.models is not None:
            route = route if route.name in vkey.models or model in vkey.models else None  # not this key's
        if route is None:
            if isinstance(model, str):
                raise not_found(
                    f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found"
                )
            raise bad_request("you must provide a model parameter", param="model")
        return route

    async def _openai(self, endpoint: Endpoint, path: str, receive: Receive, send: Send, upstream: Upstream) -> None:
        body = parse_json(await self.read_request_body(receive))
        route = self.model_route(body)
        # Validated once, before detection, which would reach the backend for a refused request
        client = validate(endpoint, body, from_json=True)  # (parse_json is orjson's)
        profile = await self.profile_for(route)
        prepared = rewrite(endpoint, client, profile, upstream_model=route.upstream_model)
        ctx = response_context(
            endpoint,
            prepared,
            self.settings,
            profile.display_markup,
            profile.tool_choice.unparsed,
            profile.tool_choice.grammar_done,
            self.secret_texts,
        )
        extra: Headers = [(b"x-oaishim-dropped", ",".join(prepared.dropped).encode())] if prepared.dropped else []
        note(route.name, profile.name, prepared)
        work = self.dispatch.exchange(upstream, route, path, endpoint, prepared, ctx, send, extra, profile)
        await relay.watching_client(receive, work)

    async def _names(self) -> list[str]:
        """The model names clients may use: the routes', and a wildcard backend's own."""
        names = [r.name for r in self.settings.models if r.name != "*"]
        wildcard = next((r for r in self.settings.models if r.name == "*"), None)
        if wildcard is not None:
            response = await self._own_get(wildcard, "/v1/models")
            try:
                raw = await relay.read_all(response, self.settings.max_upstream_event_bytes)
                listing = orjson.loads(raw) if response.status == 200 else {}
            except orjson.JSONDecodeError:
                listing = {}
            finally:
                response.close()
            data = listing.get("data") if isinstance(listing, dict) else None
            names += [m["id"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        ex = current()
        if ex is not None and ex.vkey is not None and ex.vkey.models is not None:
            names = [n for n in names if n in ex.vkey.models]  # a key lists only the models it may use
        return list(dict.fromkeys(names))

    def _card(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.started, "owned_by": "oaishim"}

    async def _models(self, send: Send) -> None:
        await send_json(send, 200, {"object": "list", "data": [self._card(n) for n in await self._names()]})

    async def _model(self, name: str, send: Send) -> None:
        """``GET /v1/models/{model}`` (the SDK's ``models.retrieve``), from the same list."""
        if name not in await self._names():
            raise not_found(
                f"The model `{name}` does not exist or you do not have access to it.", code="model_not_found"
            )
        await send_json(send, 200, self._card(name))

    async def _passthrough(self, path: str, scope: Scope, receive: Receive, send: Send, upstream: Upstream) -> None:
        """A listed backend path (``/tokenize``, ``/version``, …), sent to the first model's backend with
        the gateway's upstream key: the answer's body as it is, its errors in the official shape."""
        body = await self.read_request_body(receive)
        query = quote_query(scope.get("query_string", b""))
        content_type = header(scope, b"content-type")
        response = await upstream.open(
            self.settings.models[0],
            scope["method"],
            path + ("?" + query if query else ""),
            body or None,
            content_type.decode("latin-1") if content_type else None,
        )
        try:
            if response.status >= 400:
                raw = await relay.read_all(response, self.settings.max_upstream_event_bytes)
                error = normalize_upstream_error(response.status, scrub_bytes(raw, self.secrets))
                await send_error(send, error, retry_headers(response.headers))
                return
            headers = passthrough_headers(response.headers)
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            try:
                async for piece in response.pieces():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            except OpenAIError as error:
                # The answer has started: no error body can follow. The connection is dropped without
                # the body's end, so the client sees a broken answer, never a short one that looks whole.
                log.warning("pass-through %s %s broke off: %s", scope["method"], path, error.message)
                raise AnswerBroken from error
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            response.close()
