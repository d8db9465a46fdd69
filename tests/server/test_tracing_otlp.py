"""Traces over OTLP/HTTP from a real ``oaishim serve`` process, configured as a user would: only
``OTEL_*`` variables. The collector is a small HTTP server on 127.0.0.1 that decodes what it is
sent with opentelemetry-proto; the backend is the replaying one, which notes the headers it got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer, free_port

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

SRC = Path(__file__).resolve().parents[2] / "src"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


class Collector:
    """Receives OTLP/HTTP trace exports (protobuf) and keeps each span with its resource."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Span]] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                collector.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans += [(resource, span) for span in scope_spans.spans]
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def attrs(span: Span) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in span.attributes}


@contextmanager
def gateway(upstream: str, environ: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(SRC), **environ)
    serve = ["serve", "--upstream", upstream, "--profile", "openai", "--port", str(port), "--log-level", "warning"]
    child = subprocess.Popen([sys.executable, "-m", "oaishim", *serve], env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                assert child.poll() is None and time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.1)
        yield url, child
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=20)


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("content-type", "application/json")
    for key, val in headers.items():
        request.add_header(key, val)
    with urllib.request.urlopen(request, timeout=30) as response:
        data: bytes = response.read()
        return data


def test_spans_reach_an_otlp_collector_and_the_trace_runs_client_gateway_backend() -> None:
    collector = Collector()
    message = {"role": "assistant", "content": "hi there"}
    plain = {"id": "up", "object": "chat.completion", "created": 1, "model": "served-model", "usage": USAGE}
    plain["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]
    try:
        with Replayer() as backend:
            backend.push(Canned(json.dumps(plain).encode()))
            environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_SERVICE_NAME": "gw-under-test"}
            with gateway(backend.url, environ) as (url, child):
                traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
                answer = json.loads(
                    post(
                        url + "/v1/chat/completions",
                        {"model": "qwen-test", "messages": [{"role": "user", "content": "hello"}]},
                        {"traceparent": traceparent},
                    )
                )
                # the spans are queued (batched) until the gateway stops: it exports them then
                child.terminate()
                child.wait(timeout=20)  # the gateway stops gracefully: the spans are exported then
            (seen,) = backend.seen
    finally:
        collector.close()
    assert collector.paths and set(collector.paths) == {"/v1/traces"}
    spans = {span.kind: (resource, span) for resource, span in collector.spans}
    assert len(collector.spans) == 2, collector.spans
    resource, server = spans[Span.SPAN_KIND_SERVER]
    _, client = spans[Span.SPAN_KIND_CLIENT]
    assert resource["service.name"] == "gw-under-test"
    assert server.name == "chat qwen-test"
    assert server.trace_id.hex() == TRACE_ID and server.parent_span_id.hex() == PARENT_ID
    a = attrs(server)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "qwen-test"
    assert a["gen_ai.response.id"] == answer["id"]
    assert a["gen_ai.response.model"] == answer["model"]
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (7, 3)
    assert a["server.address"] == "127.0.0.1"
    assert client.trace_id.hex() == TRACE_ID and client.parent_span_id == server.span_id
    assert attrs(client)["http.response.status_code"] == 200
    # the backend was told the call's span as its parent, in the client's trace
    version, trace_id, span_id, _flags = seen.headers["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", TRACE_ID, client.span_id.hex())
