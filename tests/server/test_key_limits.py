"""Virtual keys (the config's ``keys``): the models each may use, requests and tokens per minute,
OpenAI's 429 and ``x-ratelimit-*`` headers; limits in memory, and in a real Redis shared by two
gateways (``tests/_redis.py`` starts a private ``redis-server``).

In process (``_fake``) for the gateway side: these are about counting, not sockets (Redis is real).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from _fake import BASE, FakeUpstream, Reply, _call
from _servers import Canned
from prometheus_client.parser import text_string_to_metric_families

from _redis import RedisServer, find_server
from oaishim.server.app import Gateway
from oaishim.server.config import ConfigError, ModelRoute, Settings, VirtualKey, build_settings

IN_PROCESS = True
KEY_A = "sk-team-a-0123456789"
KEY_B = "sk-team-b-9876543210"
PLAIN = "sk-plain-key-000000"
USAGE = {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}
RATE_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")


def answer() -> Canned:
    message = {"role": "assistant", "content": "ok"}
    body = {"id": "up", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
    body["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]
    return Canned(json.dumps(body).encode())


def chat(model: str = "m1") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


def gateway(keys: tuple[VirtualKey, ...], limits: str | None = None) -> tuple[Gateway, FakeUpstream]:
    fake = FakeUpstream()
    fake.responder = lambda seen: answer()
    routes = (ModelRoute("m1", (BASE,), "generic"), ModelRoute("m2", (BASE,), "generic"))
    settings = Settings(models=routes, state="memory", api_keys=(PLAIN,), virtual_keys=keys, limits=limits)
    return Gateway(settings, fake), fake


async def post(app: Gateway, key: str, body: bytes | None = None, target: str = "/v1/chat/completions") -> Reply:
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    return await _call(app, "POST" if body is not None else "GET", target, body or b"", headers)


def run(app: Gateway, *calls: tuple[str, bytes | None, str]) -> list[Reply]:
    async def go() -> list[Reply]:
        await app.startup()
        try:
            return [await post(app, key, body, target) for key, body, target in calls]
        finally:
            await app.shutdown()

    return asyncio.run(go())


def test_requests_per_minute_then_openais_429() -> None:
    app, fake = gateway((VirtualKey(KEY_A, "team-a", rpm=3),))
    replies = run(app, *[(KEY_A, chat(), "/v1/chat/completions")] * 5, (PLAIN, chat(), "/v1/chat/completions"))
    assert [r.status for r in replies] == [200, 200, 200, 429, 429, 200]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies[:4]] == ["2", "1", "0", "0"]
    assert all(r.headers["x-ratelimit-limit-requests"] == "3" for r in replies[:5])
    refused = replies[3]
    error = refused.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"], error["param"]) == ("requests", "rate_limit_exceeded", None)
    assert "team-a" in error["message"] and KEY_A not in error["message"]
    assert refused.headers["x-ratelimit-reset-requests"].endswith("s")
    assert int(refused.headers["retry-after"]) >= 1
    assert len(fake.seen) == 4  # a refused request never reached the backend
    assert not any(h in replies[5].headers for h in RATE_HEADERS)  # a plain key has no limits


def test_tokens_per_minute_from_the_usage() -> None:
    app, _ = gateway((VirtualKey(KEY_A, "team-a", tpm=20),))
    replies = run(app, *[(KEY_A, chat(), "/v1/chat/completions")] * 3)
    # 20 tokens: the first request uses 16, the second is admitted with 4 left and takes the bucket
    # below zero; the third is refused until it refills
    assert [r.status for r in replies] == [200, 200, 429]
    assert [r.headers["x-ratelimit-remaining-tokens"] for r in replies[:2]] == ["20", "4"]
    assert replies[2].json()["error"]["type"] == "tokens"
    assert replies[2].headers["x-ratelimit-limit-tokens"] == "20"


def test_a_key_uses_only_its_models() -> None:
    app, fake = gateway((VirtualKey(KEY_A, "team-a", models=frozenset({"m1"})),))
    ok, other, listing = run(
        app, (KEY_A, chat("m1"), "/v1/chat/completions"), (KEY_A, chat("m2"), "/v1/chat/completions"),
        (KEY_A, None, "/v1/models"),
    )  # fmt: skip
    assert ok.status == 200
    assert other.status == 404 and other.json()["error"]["code"] == "model_not_found"
    assert [m["id"] for m in listing.json()["data"]] == ["m1"]
    assert len(fake.seen) == 1


def test_metrics_and_access_line_name_the_label_never_the_key(caplog: pytest.LogCaptureFixture) -> None:
    app, _ = gateway((VirtualKey(KEY_A, "team-a", rpm=1),))
    with caplog.at_level(logging.INFO, logger="oaishim.access"):
        replies = run(app, (KEY_A, chat(), "/v1/chat/completions"), (KEY_A, chat(), "/v1/chat/completions"))
    assert [r.status for r in replies] == [200, 429]
    text = app.metrics.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("oaishim_key_requests_total", (("key", "team-a"), ("status_class", "2xx")))] == 1
    assert samples[("oaishim_key_requests_total", (("key", "team-a"), ("status_class", "4xx")))] == 1
    assert samples[("oaishim_rate_limited_total", (("key", "team-a"), ("limit", "requests")))] == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "oaishim.access"]
    assert len(lines) == 2 and all("key=team-a" in line for line in lines)
    assert KEY_A not in text and all(KEY_A not in line for line in lines)


def test_keys_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        'upstream = "http://127.0.0.1:9"\nserved_model_name = "m1"\nlimits = "memory"\n'
        f'[[keys]]\nkey = "{KEY_A}"\nlabel = "team-a"\nmodels = ["m1"]\nrpm = 10\ntpm = 1000\n'
    )
    settings = build_settings(config=config)
    assert settings.virtual_keys == (VirtualKey(KEY_A, "team-a", frozenset({"m1"}), 10, 1000),)
    assert settings.limits is None and KEY_A in settings.client_keys
    for bad, says in [
        ('[[keys]]\nkey = "short"\n', "at least 8"),
        (f'[[keys]]\nkey = "{KEY_A}"\nrpm = 0\n', "rpm"),
        (f'[[keys]]\nkey = "{KEY_A}"\nmodels = ["nope"]\n', "not a configured model"),
        (f'[[keys]]\nkey = "{KEY_A}"\nrpn = 3\n', "unknown setting"),
        (f'[[keys]]\nkey = "{KEY_A}"\n[[keys]]\nkey = "{KEY_A}"\n', "unique"),
    ]:
        config.write_text('upstream = "http://127.0.0.1:9"\nserved_model_name = "m1"\n' + bad)
        with pytest.raises(ConfigError, match=says):
            build_settings(config=config)
    with pytest.raises(ConfigError, match="redis://"):
        build_settings(upstream="http://127.0.0.1:9", limits="mysql://x")


# -- shared in Redis -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    binary = find_server()
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run installs it)")
    server = RedisServer(binary).start()
    yield server
    server.close()


def test_two_gateways_share_one_redis(redis_server: RedisServer) -> None:
    keys = (VirtualKey(KEY_B, "team-b-shared", rpm=10),)
    first, fake_1 = gateway(keys, redis_server.url)
    second, fake_2 = gateway(keys, redis_server.url)

    async def go() -> list[Reply]:
        await first.startup()
        await second.startup()
        try:
            return [await post(app, KEY_B, chat()) for app in [first, second] * 8]
        finally:
            await first.shutdown()
            await second.shutdown()

    replies = asyncio.run(go())
    statuses = [r.status for r in replies]
    assert statuses.count(200) == 10 and statuses[:10] == [200] * 10 and set(statuses[10:]) == {429}
    assert len(fake_1.seen) + len(fake_2.seen) == 10 and len(fake_1.seen) == len(fake_2.seen) == 5
    # the count is the shared one, whichever replica answered
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies[:10]] == [str(9 - i) for i in range(10)]
    for refused in replies[10:]:
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert refused.headers["x-ratelimit-limit-requests"] == "10"
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.headers["x-ratelimit-reset-requests"]


def test_redis_going_away_degrades_to_local_limits(caplog: pytest.LogCaptureFixture) -> None:
    binary = find_server()
    if binary is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(binary).start()
    app, _ = gateway((VirtualKey(KEY_A, "team-a-gone", rpm=3),), server.url)

    async def go() -> list[Reply]:
        await app.startup()
        try:
            out = [await post(app, KEY_A, chat())]
            server.stop()  # Redis goes away
            out += [await post(app, KEY_A, chat()) for _ in range(4)]
            return out
        finally:
            await app.shutdown()

    try:
        with caplog.at_level(logging.WARNING, logger="oaishim.limits"):
            replies = asyncio.run(go())
    finally:
        server.close()
    # one taken in Redis, then this process counts on its own (its bucket starts full: 3 more)
    assert [r.status for r in replies] == [200, 200, 200, 200, 429]
    warnings = [r.getMessage() for r in caplog.records if r.name == "oaishim.limits"]
    assert len(warnings) == 1 and "Redis unreachable" in warnings[0]
