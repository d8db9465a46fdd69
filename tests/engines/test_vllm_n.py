"""``n`` on real vLLM 0.32 (CPU, the tiny model): vLLM takes ``n`` itself (V-30), so the gateway passes
it through as one request (no fan-out) and relays vLLM's n choices and usage. One server, no parsers."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import RunningGateway, free_port
from _vllm_server import NO_PARSERS, VllmServer, vllm_python

from oaishim.server.config import ModelRoute, Settings

pytestmark = pytest.mark.live  # starts vllm serve
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "temperature": 1, "max_tokens": 4, "n": 3}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed: run scripts/install-vllm (or set OAISHIM_VLLM_PYTHON)")
    pytest.importorskip("tokenizers")
    from oaishim.engine.tinymodel import ensure_tiny_models

    log = tmp_path_factory.mktemp("vllm-n") / "vllm.log"
    with VllmServer(python, ensure_tiny_models().hf_dir, NO_PARSERS, log, port=free_port()) as server:
        route = ModelRoute(name="tiny", upstreams=(server.url,), profile="vllm")
        with RunningGateway(Settings(models=(route,), port=free_port(), state="memory")) as gateway:
            yield server.url, gateway.url, log


def post(base: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        base + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def served(log: Path) -> int:
    """The chat requests vLLM's HTTP server answered (its uvicorn access lines). Not its
    request_success_total metric: vLLM counts each of n choices there as a request."""
    time.sleep(0.5)  # the access line is written after the body
    return len(re.findall(rb'"POST /v1/chat/completions HTTP/1.1" 200', log.read_bytes()))


def test_n_passes_through_to_vllm_as_one_request(servers: tuple[str, str, Path]) -> None:
    raw_url, gateway, log = servers
    before = served(log)
    answer = post(gateway, BODY)
    after = served(log)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert answer["usage"]["completion_tokens"] == 12  # vLLM counts every choice itself
    raw = post(raw_url, BODY)
    assert len(raw["choices"]) == 3 and raw["usage"]["completion_tokens"] == 12
    print(f"vLLM chat requests for one gateway request with n=3: {after - before}")
    assert after - before == 1  # one upstream request with n: 3, not three
