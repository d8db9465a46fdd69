"""What the operating features cost per request: metrics, tracing and key limits, each on vs off.

    .venv/bin/python bench/features.py [--rounds 7] [--requests 400] [--out bench/results/features.json]

The whole gateway (its ASGI app: routing, the key, validation, rewriting, relaying, the access
path) runs in process against an in-process upstream behind the seam, so what is timed is the
gateway's own CPU time (``time.process_time``: every thread of the process, the span exporter's
included), without sockets. Each round runs every configuration in turn; the figures are the
medians over rounds of:

* ``plain_us``: one plain chat request (128 tokens);
* ``stream_us``: one streamed chat request of 128 chunks;
* ``chunk_us``: one more streamed chunk: (a 128-chunk stream − a 16-chunk stream) / 112.

Configurations: ``off`` (none of the three), ``metrics`` (``Metrics.observe`` per request; off, it
is replaced by a no-op, as the gateway has no switch for it), ``tracing`` (the real SDK, a batch
processor, and an exporter that encodes each batch as OTLP protobuf and drops it: all but the POST),
``limits`` (a virtual key with rpm and tpm, counted in memory; off, the same key as a plain key), and
``all``. The access line is off throughout. Writes ``bench/results/features.json`` and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream
from loadgen import request_body

from oaishim.profiles import get_profile
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings, VirtualKey
from oaishim.server.seam import RawHeaders, SentRequest, read_pieces
from oaishim.server.upstream import request_headers

RESULTS = Path(__file__).resolve().parent / "results"
KEY = "sk-bench-features-key"
ROUTE = ModelRoute("bench", ("http://127.0.0.1:1",), "vllm")
CONFIGS = ("off", "metrics", "tracing", "limits", "all")


def _dechunk(raw: bytes) -> bytes:
    return raw.split(b"\r\n", 1)[1][:-2]


PLAIN = upstream._plain(128).split(b"\r\n\r\n", 1)[1]


def _events(tokens: int) -> list[bytes]:
    words = [upstream.TOKENS[i % len(upstream.TOKENS)] for i in range(tokens - 2)]
    return [_dechunk(e) for e in (upstream.ROLE, upstream.FIRST, *words, upstream.FINISH)] + [b"data: [DONE]\n\n"]


class Answer:
    """One canned upstream answer behind the seam, its body in the pieces given (one per event)."""

    __slots__ = ("content_length", "content_type", "headers", "parts", "request", "status")

    def __init__(self, parts: Sequence[bytes], content_type: str, sent: SentRequest) -> None:
        self.parts, self.content_type, self.request = parts, content_type, sent
        self.status, self.content_length = 200, None
        self.headers: RawHeaders = [(b"content-type", content_type.encode())]

    async def pieces(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part

    async def read(self, limit: int) -> bytes | None:
        return await read_pieces(self.pieces(), limit)

    def close(self) -> None:
        return


class Canned:
    """The upstream: a plain body, or the stream of the ``max_tokens`` asked for."""

    def __init__(self) -> None:
        self.streams = {n: _events(n) for n in (16, 128)}

    async def start(self) -> None:
        return

    async def close(self) -> None:
        return

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> Answer:
        sent = request_headers(route, content_type)  # as the real client: the ids and traceparent added
        request = SentRequest(method, "http://127.0.0.1:1" + path, list(sent.items()))
        asked = orjson.loads(body or b"{}")
        if asked.get("stream"):
            return Answer(self.streams[asked["max_tokens"]], "text/event-stream", request)
        return Answer([PLAIN], "application/json", request)


def _tracing() -> Any:
    """The SDK with a batch processor and an exporter that encodes (OTLP protobuf) and drops."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from oaishim.server.spans import Spans

    class Encoded(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Encoded()))
    return Spans(provider)


def gateway(config: str) -> Gateway:
    limits = config in ("limits", "all")
    keys = (VirtualKey(KEY, "bench", rpm=10**9, tpm=10**12),) if limits else ()
    settings = Settings(models=(ROUTE,), api_keys=() if limits else (KEY,), virtual_keys=keys, access_log="off")
    app = Gateway(settings, Canned(), tracing=_tracing() if config in ("tracing", "all") else None)
    app.profiles[ROUTE.name] = get_profile("vllm")  # no detection
    if config not in ("metrics", "all"):
        app.metrics.observe = lambda ex, ended: None  # type: ignore[method-assign]
    return app


async def _request(app: Gateway, body: bytes) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {KEY}".encode())],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    received = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Future()  # the client stays
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _timed(app: Gateway, body: bytes, n: int) -> float:
    """µs of CPU per request, over ``n`` requests (the span exporter's queue flushed inside)."""
    assert await _request(app, body) == 200  # warm: label children, the key's bucket
    began = time.process_time()
    for _ in range(n):
        await _request(app, body)
    if app.tracing is not None:
        app.tracing.provider.force_flush()
    return (time.process_time() - began) / n * 1e6


async def measure(rounds: int, n: int, say: Callable[[str], None]) -> dict[str, dict[str, float]]:
    apps = {config: gateway(config) for config in CONFIGS}
    for app in apps.values():
        await app.startup()
    plain_body = request_body(128, False)
    long_body, short_body = request_body(128, True), request_body(16, True)
    got: dict[str, dict[str, list[float]]] = {c: {"plain": [], "stream": [], "short": []} for c in CONFIGS}
    for r in range(rounds):
        for config, app in apps.items():
            got[config]["plain"].append(await _timed(app, plain_body, n))
            got[config]["stream"].append(await _timed(app, long_body, max(n // 8, 10)))
            got[config]["short"].append(await _timed(app, short_body, max(n // 4, 10)))
        say(f"round {r + 1}/{rounds}")
    for app in apps.values():
        await app.shutdown()
    out: dict[str, dict[str, float]] = {}
    for config, series in got.items():
        chunks = [(s - t) / 112 for s, t in zip(series["stream"], series["short"], strict=True)]
        out[config] = {
            "plain_us": round(statistics.median(series["plain"]), 1),
            "stream_us": round(statistics.median(series["stream"]), 1),
            "chunk_us": round(statistics.median(chunks), 2),
        }
    base = out["off"]
    for config in CONFIGS[1:]:
        for key in ("plain_us", "stream_us", "chunk_us"):
            out[config][f"{key}_added"] = round(out[config][key] - base[key], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=400, help="plain requests per configuration and round")
    parser.add_argument("--out", type=Path, default=RESULTS / "features.json")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args()
    say = (lambda _: None) if args.quiet else (lambda line: print(f"features: {line}", file=sys.stderr))
    figures = asyncio.run(measure(args.rounds, args.requests, say))
    result = {
        "what": "CPU µs per request / per streamed chunk, in process, medians of rounds (bench/features.py)",
        "rounds": args.rounds,
        "requests": args.requests,
        "python": sys.version.split()[0],
        "configs": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
