"""OpenTelemetry traces of the gateway (README "Operating oaishim", tracing), in process.

The spans go through the real SDK into its ``InMemorySpanExporter``; the backend is the in-process
fake (``_fake``), which records the headers the gateway sent it (the ``traceparent``). The OTLP/HTTP
export of a real gateway process is in ``test_tracing_otlp``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _fake import BASE, FakeUpstream, Reply, _call, plain_body, stream_body
from _servers import Canned

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.spans import Spans
from oaishim.server.tracing import wanted

SRC = Path(__file__).resolve().parents[2] / "src"
CANARY = "sk-canary-0123456789abcdef-SECRET"
UPSTREAM_CANARY = "up-canary-9876543210fedcba-SECRET"
CHAT = {"model": "m1", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


class Traced:
    """A gateway (generic profile, one route ``m1``) whose spans land in an in-memory exporter."""

    def __init__(self, capture_content: bool = False, **settings: Any) -> None:
        self.exported = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exported))
        self.fake = FakeUpstream()
        route = ModelRoute("m1", (BASE,), "generic", upstream_api_key=settings.pop("upstream_api_key", None))
        tracing = Spans(provider, capture_content=capture_content)
        self.app = Gateway(Settings(models=(route,), state="memory", **settings), self.fake, tracing=tracing)
        asyncio.run(self.app.startup())

    def call(self, target: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Reply:
        data = json.dumps(body).encode() if body is not None else b""
        method = "POST" if body is not None else "GET"
        return asyncio.run(
            _call(self.app, method, target, data, {"content-type": "application/json", **(headers or {})})
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.exported.get_finished_spans())

    def server(self) -> ReadableSpan:
        (span,) = [s for s in self.spans() if s.kind is SpanKind.SERVER]
        return span

    def clients(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.kind is SpanKind.CLIENT]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


def test_a_plain_chat_is_one_server_span_with_the_gen_ai_attributes_and_a_client_child() -> None:
    t = Traced()
    t.fake.push(Canned(plain_body("hello", finish="length")))
    reply = t.call("/v1/chat/completions", CHAT, {"x-request-id": "trace-me-1"})
    assert reply.status == 200
    server = t.server()
    a = attrs(server)
    assert server.name == "chat m1"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "generic"  # the backend's profile
    assert a["gen_ai.request.model"] == "m1"
    assert a["gen_ai.response.model"] == reply.json()["model"]
    assert a["gen_ai.response.id"] == reply.json()["id"]
    assert a["gen_ai.response.finish_reasons"] == ("length",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 5)
    assert a["server.address"] == "fake.upstream"
    assert a["openai.api.type"] == "chat_completions"
    assert a["http.response.status_code"] == 200
    assert a["oaishim.request_id"] == reply.headers["x-request-id"] == "trace-me-1"
    assert "gen_ai.response.time_to_first_chunk" not in a  # not a stream
    assert server.status.status_code is StatusCode.UNSET
    (client,) = t.clients()
    assert client.parent is not None and client.parent.span_id == server.context.span_id
    assert client.context.trace_id == server.context.trace_id
    c = attrs(client)
    assert (c["http.request.method"], c["http.response.status_code"]) == ("POST", 200)
    assert (c["server.address"], c["server.port"]) == ("fake.upstream", 80)
    assert c["url.full"] == BASE + "/v1/chat/completions"
    assert client.end_time is not None and server.end_time is not None and client.end_time <= server.end_time
    # no message text unless opted in
    assert not {k for k in a if k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system_instructions"))}
    assert "hello" not in server.to_json() and "be brief" not in server.to_json()


def test_a_stream_span_ends_with_the_stream_and_records_time_to_first_chunk() -> None:
    t = Traced()
    t.fake.push(
        Canned(stream_body(["<think>hm", "m</think>", "hello"]), content_type="text/event-stream", piece=9, delay=0.001)
    )
    reply = t.call("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert reply.status == 200 and b"[DONE]" in reply.body
    server = t.server()
    a = attrs(server)
    assert server.name == "chat m1"
    assert a["gen_ai.request.stream"] is True
    first_id = json.loads(reply.parts[0].split(b"data: ", 1)[1].split(b"\n", 1)[0])["id"]
    assert a["gen_ai.response.id"] == first_id
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 5)
    assert server.start_time is not None and server.end_time is not None
    elapsed = (server.end_time - server.start_time) / 1e9
    ttft = a["gen_ai.response.time_to_first_chunk"]
    assert 0 < ttft < elapsed
    assert elapsed >= 0.05  # the span lasted the stream (123 pieces, at least 1 ms apart)
    (first,) = [e for e in server.events if e.name == "gen_ai.first_chunk"]
    assert server.start_time < first.timestamp < server.end_time
    assert {"oaishim.repair.kind": "think_split"} in events(server, "oaishim.repair")
    (client,) = t.clients()
    assert client.end_time is not None and client.end_time <= server.end_time


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_turn_is_a_chat_span_with_the_responses_id(stream: bool) -> None:
    t = Traced()
    if stream:
        t.fake.push(Canned(stream_body(["hel", "lo"]), content_type="text/event-stream"))
    else:
        t.fake.push(Canned(plain_body("hello")))
    reply = t.call("/v1/responses", {"model": "m1", "input": "hi", "stream": stream})
    assert reply.status == 200
    if stream:
        done = [
            line for line in reply.body.split(b"\n") if line.startswith(b"data: ") and b"response.completed" in line
        ]
        response = json.loads(done[-1][6:])["response"]
    else:
        response = reply.json()
    server = t.server()
    a = attrs(server)
    assert server.name == "chat m1"
    assert a["openai.api.type"] == "responses"
    assert a["gen_ai.response.id"] == response["id"] and response["id"].startswith("resp_")
    assert a["gen_ai.response.model"] == response["model"]
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 5)
    assert len(t.clients()) == 1


def test_an_upstream_error_sets_both_spans_status() -> None:
    t = Traced()
    t.fake.push(Canned(b'{"error": {"message": "boom", "type": "internal"}}', status=500))
    reply = t.call("/v1/chat/completions", CHAT)
    assert reply.status >= 500
    server = t.server()
    assert server.status.status_code is StatusCode.ERROR
    assert attrs(server)["error.type"] == "http_5xx"
    assert attrs(server)["oaishim.upstream.status_code"] == 500
    assert {"oaishim.repair.kind": "error_normalized"} in events(server, "oaishim.repair")
    (client,) = t.clients()
    assert client.status.status_code is StatusCode.ERROR
    assert attrs(client)["http.response.status_code"] == 500
    assert attrs(client)["error.type"] == "500"


def test_a_backend_that_breaks_mid_stream_marks_the_spans_failed() -> None:
    t = Traced()
    body = stream_body(["one ", "two ", "three"])
    t.fake.push(Canned(body, content_type="text/event-stream", cut_after=len(body) // 2))
    reply = t.call("/v1/chat/completions", {**CHAT, "stream": True})
    assert reply.status == 200  # the stream had begun: its error is an event
    server = t.server()
    assert server.status.status_code is StatusCode.ERROR
    assert attrs(server)["error.type"] == "bad_response"
    (client,) = t.clients()
    assert client.status.status_code is StatusCode.ERROR
    assert attrs(client)["error.type"] == "bad_response"
    assert client.end_time is not None and server.end_time is not None and client.end_time <= server.end_time


def test_a_request_the_gateway_refuses_is_not_an_error_span() -> None:
    t = Traced()
    reply = t.call("/v1/chat/completions", {"model": "nope", "messages": []})
    assert reply.status == 404
    server = t.server()
    assert server.name == "POST /v1/chat/completions"
    assert server.status.status_code is StatusCode.UNSET
    assert attrs(server)["http.response.status_code"] == 404
    assert t.clients() == []


def test_the_clients_traceparent_is_continued_and_sent_upstream() -> None:
    t = Traced()
    t.fake.push(Canned(plain_body("hello")))
    t.call("/v1/chat/completions", CHAT, {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"})
    server = t.server()
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert server.parent is not None and f"{server.parent.span_id:016x}" == PARENT_ID
    assert server.parent.is_remote
    (client,) = t.clients()
    (seen,) = t.fake.seen
    version, trace_id, span_id, flags = seen.headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert span_id == f"{client.context.span_id:016x}"  # the backend's parent is the call's span
    assert seen.headers["tracestate"] == "vendor=abc"


def test_without_a_traceparent_the_backend_still_joins_the_gateways_trace() -> None:
    t = Traced()
    t.fake.push(Canned(plain_body("hello")))
    t.call("/v1/chat/completions", CHAT)
    server, (client,), (seen,) = t.server(), t.clients(), t.fake.seen
    assert server.parent is None
    version, trace_id, span_id, flags = seen.headers["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{server.context.trace_id:032x}", f"{client.context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


def test_the_client_leaving_ends_the_span() -> None:
    t = Traced()
    t.fake.push(Canned(stream_body(["x"] * 50), content_type="text/event-stream", piece=20, delay=0.005))
    sent: list[bytes] = []
    gone = asyncio.Event()

    async def run() -> None:
        async def receive() -> dict[str, Any]:
            if not sent:
                sent.append(b"")
                return {"type": "http.request", "body": json.dumps({**CHAT, "stream": True}).encode()}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(message["body"])
                if len(sent) > 3:
                    gone.set()

        scope = {
            "type": "http", "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
            "query_string": b"", "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
        }  # fmt: skip
        await t.app(scope, receive, send)

    asyncio.run(run())
    server = t.server()
    assert attrs(server)["oaishim.client_gone"] is True
    assert server.status.status_code is StatusCode.UNSET  # the client's choice, not a failure
    (client,) = t.clients()
    assert client.end_time is not None  # the backend call's span ended with it
    assert t.fake.closed_early.is_set()


def test_message_text_only_when_opted_in() -> None:
    t = Traced(capture_content=True)
    t.fake.push(Canned(plain_body("hello there")))
    t.call("/v1/chat/completions", CHAT)
    a = attrs(t.server())
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "be brief"}]
    assert json.loads(a["gen_ai.input.messages"]) == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    (out,) = json.loads(a["gen_ai.output.messages"])
    assert out == {"role": "assistant", "parts": [{"type": "text", "content": "hello there"}], "finish_reason": "stop"}


def test_no_secret_in_any_span() -> None:
    t = Traced(capture_content=True, api_keys=(CANARY,), upstream_api_key=UPSTREAM_CANARY)
    auth = {"authorization": f"Bearer {CANARY}"}
    t.fake.push(Canned(plain_body(f"the key is {UPSTREAM_CANARY}")))
    said = {**CHAT, "messages": [{"role": "user", "content": f"my key: {CANARY}"}]}
    assert t.call("/v1/chat/completions", said, {**auth, "x-request-id": CANARY}).status == 200
    t.fake.push(Canned(b'{"error": {"message": "bad key ' + UPSTREAM_CANARY.encode() + b'"}}', status=401))
    t.call("/v1/chat/completions", CHAT, auth)
    t.call(f"/v1/{CANARY}", headers={**auth, "x-client-request-id": f"id-{UPSTREAM_CANARY}"})
    t.call("/v1/chat/completions", {"model": CANARY, "messages": []}, auth)
    t.call("/v1/models", headers={"authorization": f"Bearer {CANARY}x"})  # refused: 401
    spans = t.spans()
    assert len([s for s in spans if s.kind is SpanKind.SERVER]) == 5
    dumped = "".join(s.to_json() for s in spans)
    assert "gen_ai.input.messages" in dumped  # the text was recorded, masked
    assert CANARY not in dumped and UPSTREAM_CANARY not in dumped
    (seen, _) = t.fake.seen
    assert seen.headers["authorization"] == f"Bearer {UPSTREAM_CANARY}"  # what was masked was really there


def test_health_and_metrics_make_no_span() -> None:
    t = Traced()
    t.call("/health")
    t.call("/metrics")
    assert t.spans() == []


# -- switched by the OTEL_* variables ------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "gw"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none,otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_which_variables_turn_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert wanted(environ) is on


def _gateway_in_a_child(extra_env: dict[str, str], prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = (
        prelude + "import sys, logging\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from oaishim.server.app import Gateway\n"
        "from oaishim.server.config import ModelRoute, Settings\n"
        "gw = Gateway(Settings(models=(ModelRoute('m', ('http://127.0.0.1:9',), 'openai'),)))\n"
        "Gateway(Settings(models=(ModelRoute('m', ('http://127.0.0.1:9',), 'openai'),)))\n"
        "print('tracing', gw.tracing is not None)\n"
        "print('imported', sorted({m.split('.')[0] for m in sys.modules if m.startswith('opentelemetry')}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(SRC), **extra_env)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)


def test_off_nothing_of_opentelemetry_is_imported() -> None:
    done = _gateway_in_a_child({})
    assert "tracing False" in done.stdout
    assert "imported []" in done.stdout
    assert "OpenTelemetry" not in done.stderr


def test_on_the_sdk_is_loaded() -> None:
    done = _gateway_in_a_child({"OTEL_TRACES_EXPORTER": "console"})
    assert "tracing True" in done.stdout
    assert "imported ['opentelemetry']" in done.stdout


def test_configured_without_the_extra_one_warning_and_no_traces() -> None:
    """The extra's absence is simulated by blocking the import (``sys.modules[...] = None``): this
    environment has it installed."""
    block = "import sys\nsys.modules['opentelemetry'] = None\n"
    done = _gateway_in_a_child({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, prelude=block)
    assert "tracing False" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "OpenTelemetry is not installed" in line]
    assert len(warnings) == 1, done.stderr  # two gateways, one warning
    assert "oaishim[otel]" in warnings[0]
