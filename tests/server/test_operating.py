"""Operating the gateway: request ids, the access line, ``/metrics`` (README "Operating oaishim").

In process (``_fake``): these are about what the gateway notes of each request, not about sockets.
The metrics are read back as a scraper reads them (``text_string_to_metric_families``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from _fake import BASE, FakeUpstream, Reply, _call, plain_body, stream_body
from _servers import Canned
from prometheus_client.parser import text_string_to_metric_families

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings

IN_PROCESS = True
CANARY = "sk-canary-0123456789abcdef-SECRET"
UPSTREAM_CANARY = "up-canary-9876543210fedcba-SECRET"
GENERATED = re.compile(r"^req_[0-9a-f]{32}$")
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


class Harness:
    def __init__(self, **settings: Any) -> None:
        self.fake = FakeUpstream()
        route = ModelRoute("m1", (BASE,), "generic", upstream_api_key=settings.pop("upstream_api_key", None))
        self.app = Gateway(Settings(models=(route,), state="memory", **settings), self.fake)
        asyncio.run(self.app.startup())

    def call(
        self, method: str, target: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> Reply:
        data = json.dumps(body).encode() if body is not None else b""
        all_headers = {"content-type": "application/json", **(headers or {})}
        return asyncio.run(_call(self.app, method, target, data, all_headers))

    def metrics(self, headers: dict[str, str] | None = None) -> dict[str, Any]:
        reply = self.call("GET", "/metrics", headers=headers)
        assert reply.status == 200, reply.body
        return {f.name: f for f in text_string_to_metric_families(reply.body.decode())}

    def close(self) -> None:
        asyncio.run(self.app.shutdown())


@pytest.fixture
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    made = Harness(**getattr(request, "param", {}))  # settings: parametrize("harness", [{...}], indirect=True)
    yield made
    made.close()


def value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    """The value of one sample (0 when there is none: a counter not incremented yet)."""
    total = 0.0
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "oaishim.access"]


# -- request ids -------------------------------------------------------------------------------
def test_every_response_has_a_generated_request_id(harness: Harness) -> None:
    harness.fake.push(Canned(plain_body("hello")))
    answers = [
        harness.call("POST", "/v1/chat/completions", CHAT),
        harness.call("GET", "/v1/models"),
        harness.call("GET", "/health"),
        harness.call("GET", "/nowhere"),
        harness.call("POST", "/v1/chat/completions", {"model": "m1"}),  # a 400
    ]
    ids = [a.headers.get("x-request-id", "") for a in answers]
    assert all(GENERATED.match(i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    # the backend is told the same id
    assert harness.fake.seen[0].headers["x-request-id"] == ids[0]


@pytest.mark.parametrize("name", ["x-request-id", "x-client-request-id"])
def test_a_sane_client_id_is_kept_and_sent_upstream(harness: Harness, name: str) -> None:
    harness.fake.push(Canned(stream_body(["a", "b"]), content_type="text/event-stream"))
    reply = harness.call("POST", "/v1/chat/completions", {**CHAT, "stream": True}, {name: "trace-42.abc_DEF"})
    assert reply.status == 200
    assert reply.headers["x-request-id"] == "trace-42.abc_DEF"
    assert harness.fake.seen[-1].headers["x-request-id"] == "trace-42.abc_DEF"


@pytest.mark.parametrize("given", ["a" * 129, "has space", "tab\there", "ünï", ""])
def test_an_odd_client_id_is_replaced(harness: Harness, given: str) -> None:
    reply = harness.call("GET", "/v1/models", headers={"x-request-id": given})
    assert GENERATED.match(reply.headers["x-request-id"]), reply.headers["x-request-id"]


def test_x_request_id_wins_over_x_client_request_id(harness: Harness) -> None:
    reply = harness.call("GET", "/v1/models", headers={"x-client-request-id": "client-1", "x-request-id": "req-2"})
    assert reply.headers["x-request-id"] == "req-2"


def test_error_logs_name_the_request(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    # a body that is JSON but not a chat completion: the relay logs a warning and answers 502
    harness.fake.push(Canned(b'{"choices": "nope"}'))
    with caplog.at_level(logging.WARNING, logger="oaishim.relay"):
        reply = harness.call("POST", "/v1/chat/completions", CHAT, {"x-request-id": "trace-err-1"})
    assert reply.status == 502
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "oaishim.relay"]
    assert warnings and all("trace-err-1" in w for w in warnings), warnings


# -- the access line ---------------------------------------------------------------------------
def test_one_text_access_line_per_request(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.fake.push(Canned(stream_body(["<think>hm", "m</think>", "hello"]), content_type="text/event-stream"))
    with caplog.at_level(logging.INFO, logger="oaishim.access"):
        reply = harness.call("POST", "/v1/chat/completions", {**CHAT, "stream": True}, {"x-request-id": "trace-7"})
        harness.call("GET", "/v1/models")
    lines = access_lines(caplog)
    assert len(lines) == 2, lines
    line = lines[0]
    assert line.split()[1] == "trace-7"
    assert '"POST /v1/chat/completions"' in line
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    assert fields["model"] == "m1"
    assert fields["status"] == "200"
    assert fields["upstream_status"] == "200"
    assert (fields["tokens_in"], fields["tokens_out"]) == ("11", "5")
    assert "think_split" in fields["repairs"].split(",")
    assert int(fields["bytes"]) == len(reply.body)
    assert float(fields["ttft_ms"]) <= float(fields["duration_ms"])


@pytest.mark.parametrize("harness", [{"access_log": "json"}], indirect=True)
def test_json_access_line(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.fake.push(Canned(plain_body("hello")))
    with caplog.at_level(logging.INFO, logger="oaishim.access"):
        reply = harness.call("POST", "/v1/chat/completions", CHAT)
    (line,) = access_lines(caplog)
    record = json.loads(line)
    assert record["request_id"] == reply.headers["x-request-id"]
    assert record["path"] == "/v1/chat/completions"
    assert record["client"] == "127.0.0.1:50000"
    assert (record["status"], record["upstream_status"]) == (200, 200)
    assert (record["tokens_in"], record["tokens_out"]) == (11, 5)
    assert record["ttft_ms"] is None  # not a stream
    assert record["bytes"] == len(reply.body)


@pytest.mark.parametrize("harness", [{"access_log": "off"}], indirect=True)
def test_access_log_off(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="oaishim.access"):
        harness.call("GET", "/v1/models")
    assert access_lines(caplog) == []


def test_metrics_scrapes_are_logged_at_debug_only(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="oaishim.access"):
        harness.call("GET", "/metrics")
    assert access_lines(caplog) == []
    with caplog.at_level(logging.DEBUG, logger="oaishim.access"):
        harness.call("GET", "/metrics")
    assert len(access_lines(caplog)) == 1


@pytest.mark.parametrize(
    "harness", [{"api_keys": (CANARY,), "upstream_api_key": UPSTREAM_CANARY, "access_log": "json"}], indirect=True
)
def test_no_secret_in_the_access_line_or_the_id(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.fake.push(Canned(plain_body(f"the key is {UPSTREAM_CANARY}")))
    auth = {"authorization": f"Bearer {CANARY}"}
    with caplog.at_level(logging.DEBUG):
        chat = harness.call("POST", "/v1/chat/completions", CHAT, {**auth, "x-request-id": CANARY})
        harness.call("GET", f"/v1/{CANARY}", headers={**auth, "x-client-request-id": f"id-{UPSTREAM_CANARY}"})
        harness.call("GET", "/v1/models", headers={"authorization": f"Bearer {CANARY}x"})  # refused: 401
    assert chat.status == 200
    assert GENERATED.match(chat.headers["x-request-id"])  # a client id holding a key is not echoed
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert len(access_lines(caplog)) == 3
    assert CANARY not in logged and UPSTREAM_CANARY not in logged
    assert harness.fake.seen[0].headers["x-request-id"] == chat.headers["x-request-id"]


# -- /metrics ----------------------------------------------------------------------------------
def test_metrics_after_a_stream_and_a_plain_request(harness: Harness) -> None:
    harness.fake.push(
        Canned(stream_body(["<think>a</think>", "one ", "two"]), content_type="text/event-stream", piece=7),
        Canned(plain_body("plain")),
    )
    assert harness.call("POST", "/v1/chat/completions", {**CHAT, "stream": True}).status == 200
    assert harness.call("POST", "/v1/chat/completions", CHAT).status == 200
    m = harness.metrics()
    chat = {"gen_ai_operation_name": "chat", "gen_ai_request_model": "m1", "profile": "generic"}
    duration = "gen_ai_client_operation_duration_seconds"
    assert value(m, duration, duration + "_count", **chat, status_class="2xx", endpoint="chat") == 2
    usage = "gen_ai_client_token_usage"
    assert value(m, usage, usage + "_sum", gen_ai_token_type="input", **chat) == 22
    assert value(m, usage, usage + "_sum", gen_ai_token_type="output", **chat) == 10
    ttft = "gen_ai_server_time_to_first_token_seconds"
    assert value(m, ttft, ttft + "_count", **chat) == 1  # the stream only
    tpot = "gen_ai_server_time_per_output_token_seconds"
    assert value(m, tpot, tpot + "_count", **chat) == 1
    added = "oaishim_added_seconds"
    assert value(m, added, added + "_count", endpoint="chat", gen_ai_request_model="m1") == 2
    total_added = value(m, added, added + "_sum", endpoint="chat")
    assert 0 < total_added < value(m, duration, duration + "_sum", endpoint="chat")
    assert value(m, "oaishim_repairs", "oaishim_repairs_total", kind="think_split") == 1
    assert value(m, "oaishim_open_streams", "oaishim_open_streams") == 0
    assert value(m, "oaishim_capture_dropped", "oaishim_capture_dropped_total") == 0
    assert value(m, "oaishim_requests", "oaishim_requests_total", endpoint="chat", status_class="2xx") == 2
    # the buckets are the conventions' (the first and last finite ones)
    bounds = [s.labels["le"] for s in m[ttft].samples if s.name == ttft + "_bucket"]
    assert bounds[0] == "0.001" and bounds[-2] == "10.0" and bounds[-1] == "+Inf"


def test_model_label_is_the_route_never_the_clients_string(harness: Harness) -> None:
    for name in ("m1", "attacker-chosen-1", "attacker-chosen-2"):
        harness.call("POST", "/v1/chat/completions", {**CHAT, "model": name})  # 404 for the unknown
    m = harness.metrics()
    models = {s.labels.get("gen_ai_request_model") for f in m.values() for s in f.samples}
    assert "attacker-chosen-1" not in models and "attacker-chosen-2" not in models
    assert value(m, "oaishim_requests", "oaishim_requests_total", endpoint="chat", status_class="4xx") == 2


def test_upstream_errors_by_cause(harness: Harness) -> None:
    harness.fake.push(
        Canned(b'{"error": {"message": "boom"}}', 500),
        Canned(stream_body(["abc"]), content_type="text/event-stream", cut_after=40),
    )
    assert harness.call("POST", "/v1/chat/completions", CHAT).status == 500
    harness.call("POST", "/v1/chat/completions", {**CHAT, "stream": True})  # cut short: an error event
    m = harness.metrics()
    errors = "oaishim_upstream_errors"
    assert value(m, errors, errors + "_total", cause="http_5xx") == 1
    assert value(m, errors, errors + "_total", cause="bad_response") == 1
    assert value(m, "oaishim_repairs", "oaishim_repairs_total", kind="error_normalized") == 1


@pytest.mark.parametrize("harness", [{"metrics_key": "scrape-key-123", "api_keys": (CANARY,)}], indirect=True)
def test_metrics_key(harness: Harness) -> None:
    assert harness.call("GET", "/metrics").status == 401
    assert harness.call("GET", "/metrics", headers={"authorization": f"Bearer {CANARY}"}).status == 401
    assert harness.metrics({"authorization": "Bearer scrape-key-123"})


def test_metrics_needs_no_key_by_default_even_with_api_keys() -> None:
    made = Harness(api_keys=(CANARY,))
    try:
        assert made.call("GET", "/metrics").status == 200
        assert made.call("GET", "/v1/models").status == 401
    finally:
        made.close()


def test_the_gateways_metrics_never_reach_the_backend(harness: Harness) -> None:
    assert "gen_ai_client_operation_duration_seconds" in harness.metrics()
    assert harness.fake.seen == []


def test_a_client_id_with_percent_signs_is_logged_as_it_is(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.fake.push(Canned(b'{"choices": "nope"}'))
    with caplog.at_level(logging.WARNING, logger="oaishim.relay"):
        reply = harness.call("POST", "/v1/chat/completions", CHAT, {"x-request-id": "id-%s-%d"})
    assert reply.headers["x-request-id"] == "id-%s-%d"
    warnings = [r.getMessage() for r in caplog.records if r.name == "oaishim.relay"]
    assert warnings and warnings[0].startswith("[id-%s-%d] ")
