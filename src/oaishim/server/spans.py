"""The gateway's OpenTelemetry spans (the ``otel`` extra; :mod:`oaishim.server.tracing` decides if).

Per request, one SERVER span, continued from the client's W3C ``traceparent`` (and ``tracestate``)
when it sent one. A generating request's span is named ``{gen_ai.operation.name} {model}`` and
carries the GenAI semantic conventions' attributes (v1.41: ``gen_ai.operation.name``,
``gen_ai.provider.name`` — the backend's profile —, ``gen_ai.request.model``, ``gen_ai.response.*``,
``gen_ai.usage.*``, ``gen_ai.response.time_to_first_chunk``, ``server.address`` — the backend that
served it); any other request's is named ``{method} {route}``. Each repair the gateway made is an
``oaishim.repair`` event. Each backend call is a CLIENT child span with the HTTP client attributes,
and the backend is sent a ``traceparent`` naming that child.

Facts come from the request's :class:`~oaishim.server.exchange.Exchange` and three hooks
(:class:`RequestSpan` ``prepared``, ``answered``, ``streamed``); the span is finished when the
exchange is, after a stream's last byte or the client's leaving. No header is recorded, no query, no
message text unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and every string
is masked with the gateway's secrets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from importlib.metadata import entry_points
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from oaishim import __version__
from oaishim.capture.redact import scrub_bytes
from oaishim.server import gen_ai_messages as messages
from oaishim.server.asgi import Scope
from oaishim.server.config import ModelRoute
from oaishim.server.exchange import Exchange, current
from oaishim.server.seam import RawHeaders, SentRequest, Upstream, UpstreamResponse, UpstreamWrapper
from oaishim.transform.fanin import FanIn
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.request import PreparedRequest
from oaishim.wire.errors import OpenAIError

__all__ = ["RequestSpan", "Spans", "TracedUpstream", "from_env"]

log = logging.getLogger("oaishim.tracing")
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# gen_ai.operation.name per endpoint (a Responses turn is a chat; openai.api.type tells them apart)
OPERATIONS = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings", "responses": "chat"}
API_TYPES = {"chat": "chat_completions", "responses": "responses"}
ROUTES = {
    "chat": "/v1/chat/completions", "completions": "/v1/completions", "embeddings": "/v1/embeddings",
    "responses": "/v1/responses", "responses_store": "/v1/responses/{response_id}", "models": "/v1/models",
    "health": "/health", "metrics": "/metrics",
}  # fmt: skip


class Spans:
    """The tracer and what every span needs: the secrets to mask, whether message text is recorded."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False, secrets: tuple[bytes, ...] = ()):
        self.provider = provider
        self.tracer = provider.get_tracer("oaishim", __version__)
        self.capture_content = capture_content
        self.secrets = secrets

    def begin(self, scope: Scope, ex: Exchange) -> RequestSpan:
        return RequestSpan(self, scope, ex)

    def wrap(self, upstream: Upstream) -> TracedUpstream:
        return TracedUpstream(upstream, self)

    def shutdown(self) -> None:
        """Export what is still queued (the gateway is stopping)."""
        self.provider.shutdown()

    def mask(self, text: str) -> str:
        if not self.secrets:
            return text
        data = text.encode()
        scrubbed = scrub_bytes(data, self.secrets)
        return text if scrubbed is data else scrubbed.decode("utf-8", "replace")


def _headers(scope: Scope) -> dict[str, str]:
    return {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers", ())}


def _host(url: str) -> tuple[str | None, int | None, str]:
    """Host, port and the URL without credentials or query (``url.full`` as the HTTP conventions want it)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, None, ""
    host = parts.hostname
    netloc = (f"[{host}]" if host and ":" in host else host or "") + (f":{parts.port}" if parts.port else "")
    return host, port, f"{parts.scheme}://{netloc}{parts.path}"


class RequestSpan:
    """One request's SERVER span, and what its hooks noted until it ends."""

    __slots__ = (
        "calling", "calls", "finish", "inputs", "outputs", "owner", "request_model", "response_id", "response_model",
        "server", "span", "started_ns", "system",
    )  # fmt: skip

    def __init__(self, owner: Spans, scope: Scope, ex: Exchange) -> None:
        self.owner = owner
        parent = propagate.extract(_headers(scope))
        attributes: dict[str, AttributeValue] = {
            "http.request.method": ex.method,
            "url.path": owner.mask(ex.path),
            "url.scheme": scope.get("scheme", "http"),
            "oaishim.request_id": ex.request_id,
        }
        client = scope.get("client")
        if client:
            attributes["client.address"], attributes["client.port"] = client[0], client[1]
        self.started_ns = time.time_ns()
        self.span: Span = owner.tracer.start_span(
            ex.method, context=parent, kind=SpanKind.SERVER, attributes=attributes, start_time=self.started_ns
        )
        self.calling: Span | None = None  # the backend call in flight (its child span)
        self.calls: list[TracedResponse] = []  # the calls answered, their spans ended with the request's
        self.request_model: str | None = None
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish: list[str] = []
        self.server: tuple[str | None, int | None] | None = None
        self.inputs: str | None = None
        self.system: str | None = None
        self.outputs: str | None = None

    # -- the hooks ---------------------------------------------------------------------------
    def inject(self, headers: dict[str, str]) -> None:
        """Add ``traceparent`` (and ``tracestate``) for the backend: its parent is the call's child span."""
        span = self.calling or self.span
        propagate.inject(headers, context=trace.set_span_in_context(span))

    def prepared(self, prepared: PreparedRequest) -> None:
        self.request_model = prepared.client_model
        if self.owner.capture_content:
            self.system, self.inputs = messages.inputs(prepared.body)

    def answered(self, body: object) -> None:
        """The answer the client got (a chat, completion, embeddings or Responses object)."""
        if not isinstance(body, dict):
            return
        if isinstance(body.get("id"), str):
            self.response_id = body["id"]
        if isinstance(body.get("model"), str):
            self.response_model = body["model"]
        if not self.finish:
            self.finish = messages.finish_reasons(body)
        if self.owner.capture_content:
            self.outputs = messages.outputs(body) or self.outputs

    def streamed(self, pipe: StreamPipe | FanIn) -> None:
        normalizer = pipe.normalizer
        self.response_id = normalizer.ctx.response_id
        self.response_model = normalizer.ctx.model
        self.finish = [c.finish for _, c in sorted(normalizer.choices.items()) if c.finish is not None]

    # -- the end -----------------------------------------------------------------------------
    def end(self, ex: Exchange, ended: float) -> None:
        span, mask = self.span, self.owner.mask
        attributes: dict[str, AttributeValue] = {}
        route = ROUTES.get(ex.endpoint)
        name = f"{ex.method} {route}" if route else ex.method
        if route:
            attributes["http.route"] = route
        if ex.status:
            attributes["http.response.status_code"] = ex.status
        operation = OPERATIONS.get(ex.endpoint)
        if operation is not None and ex.model is not None:
            model = self.request_model or ex.model
            name = f"{operation} {model}"
            attributes["gen_ai.operation.name"] = operation
            attributes["gen_ai.provider.name"] = ex.profile or "unknown"
            attributes["gen_ai.request.model"] = model
            attributes["gen_ai.request.stream"] = ex.stream
            attributes["oaishim.route"] = ex.model
            if ex.endpoint in API_TYPES:
                attributes["openai.api.type"] = API_TYPES[ex.endpoint]
        self._response(ex, attributes)
        if ex.key_label is not None:
            attributes["oaishim.key"] = ex.key_label
        if ex.gone:
            attributes["oaishim.client_gone"] = True
        if ex.upstream_status is not None:
            attributes["oaishim.upstream.status_code"] = ex.upstream_status
        attributes["oaishim.added_seconds"] = ex.added
        for kind in ex.repairs:
            span.add_event("oaishim.repair", {"oaishim.repair.kind": kind})
        self._end_calls(ex)
        failed = ex.status >= 500 or (ex.upstream_fault is not None and not ex.gone)
        if failed:
            cause = ex.upstream_fault or str(ex.status)
            attributes["error.type"] = cause
            span.set_status(Status(StatusCode.ERROR, f"{cause} (HTTP {ex.status})"))
        span.update_name(mask(name))
        span.set_attributes({k: mask(v) if isinstance(v, str) else v for k, v in attributes.items()})
        span.end()

    def _end_calls(self, ex: Exchange) -> None:
        """End the backend calls' spans at the times their bodies ended. Only now is it known whether
        the last one's body broke off (the relay notes it after closing), which marks it failed."""
        fault = ex.upstream_fault
        for call in self.calls:
            if call is self.calls[-1] and fault is not None and not fault.startswith("http_") and not ex.gone:
                call.span.set_attribute("error.type", fault)
                call.span.set_status(Status(StatusCode.ERROR, "the backend's body could not be relayed"))
            call.span.end(call.ended)
        self.calls.clear()

    def _response(self, ex: Exchange, attributes: dict[str, AttributeValue]) -> None:
        if self.response_id is not None and ex.status == 200:
            attributes["gen_ai.response.id"] = self.response_id
        if self.response_model is not None:
            attributes["gen_ai.response.model"] = self.response_model
        if self.finish:
            attributes["gen_ai.response.finish_reasons"] = self.finish
        if ex.tokens_in is not None:
            attributes["gen_ai.usage.input_tokens"] = ex.tokens_in
        if ex.tokens_out is not None:
            attributes["gen_ai.usage.output_tokens"] = ex.tokens_out
        if self.server is not None:
            host, port = self.server
            if host:
                attributes["server.address"] = host
            if port:
                attributes["server.port"] = port
        if ex.first_token is not None:
            first = ex.first_token - ex.started
            attributes["gen_ai.response.time_to_first_chunk"] = first
            self.span.add_event("gen_ai.first_chunk", timestamp=self.started_ns + int(first * 1e9))
        for key, value in (
            ("gen_ai.system_instructions", self.system),
            ("gen_ai.input.messages", self.inputs),
            ("gen_ai.output.messages", self.outputs),
        ):
            if value is not None:
                attributes[key] = value


def _failed(span: Span, error: OpenAIError) -> None:
    span.set_attribute("error.type", error.code or type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, error.message))


class TracedUpstream(UpstreamWrapper):
    """The seam's ``Upstream`` with a CLIENT span around each backend call (head to body's end)."""

    __slots__ = ("owner",)

    def __init__(self, inner: Upstream, owner: Spans) -> None:
        super().__init__(inner)
        self.owner = owner

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> UpstreamResponse:
        ex = current()
        request = ex.trace if ex is not None else None
        if not isinstance(request, RequestSpan):
            return await self.inner.open(route, method, path, body, content_type, headers)
        span = self.owner.tracer.start_span(
            method,
            context=trace.set_span_in_context(request.span),
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": method, "oaishim.route": route.name},
        )
        request.calling = span
        try:
            response = await self.inner.open(route, method, path, body, content_type, headers)
        except OpenAIError as error:
            _failed(span, error)
            span.end()
            raise
        except BaseException:
            span.end()  # cancelled (the client left): the call's span ends with it
            raise
        finally:
            request.calling = None
        host, port, full = _host(response.request.url)
        request.server = (host, port)
        if host:
            span.set_attributes({"server.address": host, "url.full": self.owner.mask(full)})
        if port:
            span.set_attribute("server.port", port)
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 400:
            span.set_attribute("error.type", str(response.status))
            span.set_status(Status(StatusCode.ERROR))
        traced = TracedResponse(response, span)
        request.calls.append(traced)
        return traced


class TracedResponse:
    """A backend response whose ``close`` notes when the call ended (its span is ended with the
    request's, see :meth:`RequestSpan._end_calls`); the body passes through untouched."""

    __slots__ = ("_inner", "content_length", "content_type", "ended", "headers", "span", "status")

    def __init__(self, inner: UpstreamResponse, span: Span) -> None:
        self._inner, self.span = inner, span
        self.status: int = inner.status
        self.headers: RawHeaders = inner.headers
        self.content_type: str = inner.content_type
        self.content_length: int | None = inner.content_length
        self.ended: int | None = None  # time_ns() at close; None: still open when the request ended

    @property
    def request(self) -> SentRequest:
        return self._inner.request

    def pieces(self) -> AsyncIterator[bytes]:
        return self._inner.pieces()  # no layer of its own: a streamed chunk costs nothing here

    async def read(self, limit: int) -> bytes | None:
        return await self._inner.read(limit)

    def close(self) -> None:
        self._inner.close()
        if self.ended is None:
            self.ended = time.time_ns()


# -- configuration from the environment ------------------------------------------------------------
def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    """An exporter by its ``OTEL_TRACES_EXPORTER`` name, as the SDK's entry points register them
    (``otlp``: the protocol's exporter, which reads its own ``OTEL_EXPORTER_OTLP_*`` settings)."""
    if name == "otlp":
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
        ).strip()
        name = "otlp_proto_grpc" if protocol == "grpc" else "otlp_proto_http"
        if protocol not in ("", "grpc", "http/protobuf"):
            log.warning("OTLP protocol %r is not supported; exporting traces with http/protobuf", protocol)
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        log.warning("no trace exporter named %r is installed: those traces are not exported", name)
        return None
    made: SpanExporter = next(iter(found)).load()()
    return made


def _resource() -> Resource:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; the service is
    ``oaishim`` unless they name one."""
    resource = Resource.create({"service.version": __version__})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "oaishim"}))
    return resource


def from_env(environ: Mapping[str, str]) -> Spans:
    """Spans exported as the ``OTEL_*`` variables say (exporters, sampler, batch settings, resource)."""
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    provider = TracerProvider(resource=_resource())  # the sampler from OTEL_TRACES_SAMPLER
    for name in dict.fromkeys(n for n in names if n and n != "none"):
        exporter = _exporter(name, environ)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* settings
    capture = environ.get(CAPTURE, "").strip().lower() in ("true", "span_only", "span_and_event")
    return Spans(provider, capture_content=capture)
