"""``n > 1`` through the gateway: fanned out where the profile says the backend gives one choice
(llama.cpp, Ollama, generic), passed through where it honours ``n`` (vLLM), fanned out after the
backend's refusal (TensorRT-LLM's PyTorch backend, T-8) or after a "native" answer with too few
choices. In process (``_fake``): these are about what the gateway sends and merges, not sockets;
the Ollama and TensorRT-LLM answers are their documented fixtures (tests/fixtures/*/manifest.yaml).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _fake import BASE, FakeResponse, FakeUpstream, call
from _servers import Canned, Seen

from oaishim.check import check, exchange_from_bytes
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings

IN_PROCESS = True
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HI = [{"role": "user", "content": "Suggest a name for a cat."}]
NAMES = ["Miso", "Pixel", "Tofu", "Biscuit"]


def plain_answer(text: str, completion: int = 3) -> Canned:
    body = {"id": "up", "object": "chat.completion", "created": 1, "model": "up"}
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    body["usage"] = {"prompt_tokens": 16, "completion_tokens": completion, "total_tokens": 16 + completion}
    return Canned(json.dumps(body).encode())


def stream_answer(text: str, delay: float = 0.0, cut: bool = False) -> Canned:
    def event(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "up", "choices": [choice]}

    events: list[Any] = [event({"role": "assistant", "content": None})]
    events += [event({"content": text[i : i + 2]}) for i in range(0, len(text), 2)]
    events.append(event({}, "stop"))
    usage = {"prompt_tokens": 16, "completion_tokens": len(events) - 2, "total_tokens": 14 + len(events)}
    events.append({**event({}), "choices": [], "usage": usage})
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return Canned(raw, content_type="text/event-stream", piece=40, delay=delay, cut_after=60 if cut else None)


def by_copy(make: Any) -> Any:
    """A responder answering each copy by its seed (or, without a seed, by its order)."""
    order: dict[Any, int] = {}

    def respond(seen: Seen) -> Canned:
        body = seen.json()
        key = body.get("seed", len(order))
        k = order.setdefault(key, len(order))
        return make(k, body)

    return respond


@pytest.fixture(autouse=True)
def _no_responder(backend: FakeUpstream) -> None:
    backend.responder = None  # a test that queues answers must not meet the last test's responder


def post(url: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> tuple[int, dict[str, str], bytes]:
    return call(url + path, "POST", body)


def events_of(raw: bytes) -> list[Any]:
    blocks = [b.removeprefix("data: ") for b in raw.decode().split("\n\n") if b.startswith("data: ")]
    return [b if b == "[DONE]" else json.loads(b) for b in blocks]


def strict(raw: bytes, request: dict[str, Any], status: int = 200, stream: bool = True) -> list[str]:
    kind = "text/event-stream" if stream else "application/json"
    exchange = exchange_from_bytes(raw, request=request, status=status, headers={"content-type": kind})
    return [f"{f.rule}: {f.message}" for f in check(exchange) if f.severity == "error"]


@pytest.mark.parametrize("profile", ["ollama", "llamacpp@b9174", "llamacpp@0", "generic"])
def test_plain_n_is_fanned_out_and_merged(backend: FakeUpstream, gateways: Any, profile: str) -> None:
    backend.responder = by_copy(lambda k, body: plain_answer(NAMES[k], k + 1))
    request = {"model": "m", "messages": HI, "n": 3, "seed": 11, "temperature": 0.9}
    status, _, raw = post(gateways(profile), request)
    assert status == 200, raw
    assert strict(raw, request, stream=False) == []
    answer = json.loads(raw)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in answer["choices"]] == NAMES[:3]
    assert answer["usage"] == {"prompt_tokens": 16, "completion_tokens": 6, "total_tokens": 22}
    sent = [s.json() for s in backend.seen]
    assert len(sent) == 3 and all("n" not in b for b in sent)
    assert sent[0]["seed"] == 11 and len({b["seed"] for b in sent}) == 3


def test_without_a_seed_no_copy_gets_one(backend: FakeUpstream, gateways: Any) -> None:
    backend.responder = by_copy(lambda k, body: plain_answer(NAMES[k]))
    status, _, raw = post(gateways("ollama"), {"model": "m", "messages": HI, "n": 2, "temperature": 1})
    assert status == 200 and len(json.loads(raw)["choices"]) == 2
    assert [("seed" in s.json(), "n" in s.json()) for s in backend.seen] == [(False, False)] * 2


@pytest.mark.parametrize("usage", [False, True])
def test_streamed_n_interleaves_the_copies_as_they_arrive(backend: FakeUpstream, gateways: Any, usage: bool) -> None:
    backend.responder = by_copy(lambda k, body: stream_answer(NAMES[k] * 3, delay=0.002 * (k + 1)))
    request: dict[str, Any] = {"model": "m", "messages": HI, "n": 3, "seed": 5, "stream": True}
    if usage:
        request["stream_options"] = {"include_usage": True}
    status, headers, raw = post(gateways("ollama"), request)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert strict(raw, request) == []
    events = events_of(raw)
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    indices = [c["choices"][0]["index"] for c in chunks if c["choices"]]
    assert sorted(set(indices)) == [0, 1, 2]
    assert indices != sorted(indices)  # interleaved: choice 0 did not come whole before choice 1
    texts = dict.fromkeys(range(3), "")
    for c in chunks:
        if c["choices"]:
            texts[c["choices"][0]["index"]] += c["choices"][0]["delta"].get("content") or ""
    assert sorted(texts.values()) == sorted(n * 3 for n in NAMES[:3])
    if usage:
        counted = [c for c in chunks if not c["choices"]]
        assert counted == [chunks[-1]]
        completion = sum(len(range(0, len(n * 3), 2)) for n in NAMES[:3])
        assert chunks[-1]["usage"] == {
            "prompt_tokens": 16,
            "completion_tokens": completion,
            "total_tokens": 16 + completion,
        }
    else:
        assert all("usage" not in c for c in chunks)


def test_legacy_completions_n_is_fanned_out(backend: FakeUpstream, gateways: Any) -> None:
    def answer(k: int, body: dict[str, Any]) -> Canned:
        choice = {"index": 0, "text": f" {NAMES[k]}", "logprobs": None, "finish_reason": "length"}
        usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
        return Canned(
            json.dumps(
                {
                    "id": "c",
                    "object": "text_completion",
                    "created": 1,
                    "model": "up",
                    "choices": [choice],
                    "usage": usage,
                }
            ).encode()
        )

    backend.responder = by_copy(answer)
    request = {"model": "m", "prompt": "A cat named", "n": 2, "max_tokens": 2}
    status, _, raw = post(gateways("llamacpp@b9174"), request, "/v1/completions")
    assert status == 200
    answer_body = json.loads(raw)
    assert [(c["index"], c["text"]) for c in answer_body["choices"]] == [(0, " Miso"), (1, " Pixel")]
    assert answer_body["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}


def test_one_copy_failing_before_anything_was_sent_is_the_clients_error(backend: FakeUpstream, gateways: Any) -> None:
    failing = Canned(
        json.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}).encode(), 503
    )
    backend.responder = by_copy(lambda k, body: failing if k == 1 else stream_answer(NAMES[k], delay=0.01))
    status, _, raw = post(gateways("ollama"), {"model": "m", "messages": HI, "n": 3, "seed": 1, "stream": True})
    assert status == 503
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"} and "Loading model" in error["message"]
    assert backend.closed_early.is_set()  # the other copies were closed, not read to their end


def test_one_copy_breaking_mid_stream_ends_the_stream_with_one_error_event(
    backend: FakeUpstream, gateways: Any
) -> None:
    backend.responder = by_copy(lambda k, body: stream_answer(NAMES[k] * 4, delay=0.002, cut=k == 2))
    status, _, raw = post(gateways("ollama"), {"model": "m", "messages": HI, "n": 3, "seed": 1, "stream": True})
    assert status == 200
    events = events_of(raw)
    assert "[DONE]" not in events
    assert [e for e in events if "error" in e] == [events[-1]]


def test_vllm_takes_n_itself(backend: FakeUpstream, gateways: Any) -> None:
    body = json.loads(plain_answer("x").body)
    body["choices"] = [{**body["choices"][0], "index": i} for i in range(3)]
    backend.push(Canned(json.dumps(body).encode()))
    status, _, raw = post(gateways("vllm@0.32"), {"model": "m", "messages": HI, "n": 3, "seed": 2})
    assert status == 200 and len(json.loads(raw)["choices"]) == 3
    assert [(s.json()["n"], s.json()["seed"]) for s in backend.seen] == [(3, 2)]


def test_trtllm_refusing_n_is_fanned_out(backend: FakeUpstream, gateways: Any) -> None:
    """The documented 400 of the PyTorch backend (fixture error-n-gt-1-pytorch.json, T-8)."""
    refusal = Canned((FIXTURES / "trtllm" / "error-n-gt-1-pytorch.json").read_bytes(), 400)
    backend.push(refusal, *(plain_answer(n) for n in NAMES[:3]))
    request = {"model": "m", "messages": HI, "n": 3}
    status, _, raw = post(gateways("trtllm@0"), request)
    assert status == 200, raw
    assert [c["message"]["content"] for c in json.loads(raw)["choices"]] == NAMES[:3]
    assert [s.json().get("n") for s in backend.seen] == [3, None, None, None]


def test_trtllm_other_errors_are_relayed(backend: FakeUpstream, gateways: Any) -> None:
    backend.push(Canned((FIXTURES / "trtllm" / "error-extra-forbidden.json").read_bytes(), 400))
    status, _, raw = post(gateways("trtllm@0"), {"model": "m", "messages": HI, "n": 3})
    assert status == 400 and len(backend.seen) == 1 and "error" in json.loads(raw)


def test_the_documented_ollama_answer_becomes_n_choices(backend: FakeUpstream, gateways: Any) -> None:
    """Ollama ignores n (fixture chat-nonstream-n-ignored.json, O-1): each copy gets that answer."""
    ignored = (FIXTURES / "ollama" / "chat-nonstream-n-ignored.json").read_bytes()
    backend.responder = lambda seen: Canned(ignored)
    request = {"model": "m", "messages": HI, "n": 3, "reasoning_effort": "none"}
    status, _, raw = post(gateways("ollama"), request)
    assert status == 200 and strict(raw, request, stream=False) == []
    answer = json.loads(raw)
    assert len(answer["choices"]) == 3 and answer["usage"] == {
        "prompt_tokens": 16,
        "completion_tokens": 24,
        "total_tokens": 40,
    }


def test_a_native_backend_giving_fewer_choices_gets_the_rest_fanned_out(backend: FakeUpstream, gateways: Any) -> None:
    url = gateways("vllm@0.32", name="short")
    backend.push(plain_answer(NAMES[0]), plain_answer(NAMES[1]), plain_answer(NAMES[2]))
    status, _, raw = post(url, {"model": "short", "messages": HI, "n": 3, "seed": 9})
    assert status == 200
    assert [c["message"]["content"] for c in json.loads(raw)["choices"]] == NAMES[:3]
    sent = [s.json() for s in backend.seen]
    assert sent[0]["n"] == 3 and all("n" not in b for b in sent[1:]) and len(sent) == 3
    backend.seen.clear()
    backend.push(*(plain_answer(n) for n in NAMES[:2]))
    status, _, raw = post(url, {"model": "short", "messages": HI, "n": 2})
    assert status == 200 and len(backend.seen) == 2  # learnt: later requests are fanned out at once


def test_a_client_that_goes_away_closes_every_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    original = FakeResponse.close

    def close(self: FakeResponse) -> None:
        closed.append(self.finished)
        original(self)

    monkeypatch.setattr(FakeResponse, "close", close)
    fake = FakeUpstream()
    fake.responder = by_copy(lambda k, body: stream_answer(NAMES[k] * 50, delay=0.05))
    app = Gateway(Settings(models=(ModelRoute("m", (BASE,), "ollama"),)), fake)
    body = json.dumps({"model": "m", "messages": HI, "n": 3, "seed": 3, "stream": True}).encode()

    async def go() -> None:
        calls = 0

        async def receive() -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(0.2)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            return

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "query_string": b""}
        await app.startup()
        try:
            await asyncio.wait_for(app(scope, receive, send), 5)
        finally:
            await app.shutdown()

    asyncio.run(go())
    assert len(fake.seen) == 3 and len(closed) >= 3 and not any(closed[:3])  # all three closed before their end


def test_a_capture_holds_one_copys_answer_whole_not_the_copies_mixed() -> None:
    """``--capture`` keeps one upstream exchange per record: with n fanned out it is one copy's, byte for byte."""
    from oaishim.server.recording import Recorder, RecordingUpstream

    fake = FakeUpstream()
    fake.responder = by_copy(lambda k, body: stream_answer(NAMES[k] * 5))
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    recorder = Recorder(None, scope, "gateway")  # type: ignore[arg-type]  # no writer: nothing is stored
    upstream = RecordingUpstream(fake, recorder)
    route = ModelRoute("m", (BASE,), "ollama")

    async def go() -> list[bytes]:
        first = await upstream.open(route, "POST", "/v1/chat/completions", b'{"seed": 1}')
        second = await upstream.open(route, "POST", "/v1/chat/completions", b'{"seed": 2}')
        a, b = first.pieces(), second.pieces()
        bodies = [b"", b""]
        for _ in range(100):  # interleaved reads, as the fan-out's readers do
            for k, pieces in enumerate((a, b)):
                bodies[k] += await anext(pieces, b"")
        return bodies

    bodies = asyncio.run(go())
    recorded = recorder.raw.upstream_response
    assert recorded is not None and recorded.complete
    assert b"".join(piece for _, piece in recorded.reads) == bodies[1]


def test_a_native_stream_with_fewer_choices_is_reported_and_later_ones_fanned_out(
    backend: FakeUpstream, gateways: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = gateways("vllm@0.32", name="short-stream")
    backend.push(stream_answer(NAMES[0]))
    request = {"model": "short-stream", "messages": HI, "n": 2, "stream": True}
    with caplog.at_level("WARNING", "oaishim.gateway"):
        status, _, raw = post(url, request)
    assert status == 200 and events_of(raw)[-1] == "[DONE]"  # too late to add a choice: relayed as it came
    assert any("answered 1 of n=2 choices" in r.getMessage() and "[req_" in r.getMessage() for r in caplog.records)
    backend.seen.clear()
    backend.push(stream_answer(NAMES[0]), stream_answer(NAMES[1]))
    status, _, raw = post(url, request)
    assert status == 200 and len(backend.seen) == 2
    assert {c["choices"][0]["index"] for c in events_of(raw)[:-1] if c["choices"]} == {0, 1}
