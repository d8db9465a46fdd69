"""The documented differences of vLLM's OpenAI layer (docs/backend-quirks.md §1), each on real vLLM 0.32 traffic replayed
behind the gateway: the client sees what the official API would send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer
from test_replay_fixtures import post

from oaishim.check import check, exchange_from_bytes

IN_PROCESS = True  # the gateway app in process, behind _fake.FakeUpstream (conftest)

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"


def recorded(name: str) -> tuple[dict[str, Any], Canned]:
    request = json.loads((VLLM / f"{name}.req.json").read_text())
    raw = (VLLM / f"{name}.body").read_bytes()
    kind = "text/event-stream" if raw.startswith(b"data:") else "application/json"
    return request, Canned(raw, content_type=kind)


def through(
    backend: Replayer, gateways: Any, name: str, path: str = "/v1/chat/completions", **changes: Any
) -> tuple[dict[str, Any], int, bytes]:
    request, canned = recorded(name)
    request.update(changes)
    backend.push(canned)
    status, _, out = post(gateways("vllm@0.32") + path, request)
    return request, status, out


def chunks(raw: bytes) -> list[dict[str, Any]]:
    events = exchange_from_bytes(raw).events or []
    return [json.loads(e.data) for e in events if e.data != "[DONE]"]


def test_chat_logprobs_in_the_chat_shape(backend: Replayer, gateways: Any) -> None:
    request, status, out = through(backend, gateways, "s1_chat_logprobs")
    body = json.loads(out)
    entries = body["choices"][0]["logprobs"]["content"]
    assert status == 200 and entries
    assert all(set(e) == {"token", "logprob", "bytes", "top_logprobs"} for e in entries)
    assert all(len(e["top_logprobs"]) == request["top_logprobs"] for e in entries)
    assert [f for f in check(exchange_from_bytes(out, request=request, status=status)) if f.severity == "error"] == []


def test_completions_logprobs_in_the_legacy_shape(backend: Replayer, gateways: Any) -> None:
    request, _status, out = through(backend, gateways, "s1_completions_default", "/v1/completions")
    logprobs = json.loads(out)["choices"][0]["logprobs"]
    assert set(logprobs) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert all(len(alternatives) <= request["logprobs"] + 1 for alternatives in logprobs["top_logprobs"])


def test_completions_default_max_tokens_is_the_official_16(backend: Replayer, gateways: Any) -> None:
    through(backend, gateways, "s1_completions_default", "/v1/completions")
    assert backend.seen[-1].json()["max_tokens"] == 16


@pytest.mark.parametrize("name", ["s1_stop_incl", "s1_stop_excl"])
def test_stop_reason_removed_and_stop_string_semantics_kept(backend: Replayer, gateways: Any, name: str) -> None:
    request, _status, out = through(backend, gateways, name)
    choice = json.loads(out)["choices"][0]
    assert "stop_reason" not in choice
    assert choice["finish_reason"] == "stop"
    assert backend.seen[-1].json().get("include_stop_str_in_output") == request.get("include_stop_str_in_output")
    upstream_text = json.loads(recorded(name)[1].body)["choices"][0]["message"]["content"]
    assert choice["message"]["content"] == upstream_text


def test_first_chunk_is_the_official_role_chunk(backend: Replayer, gateways: Any) -> None:
    _, _, out = through(backend, gateways, "s1_chat_stream")
    first = chunks(out)[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert first["finish_reason"] is None


@pytest.mark.parametrize("options", [{}, {"include_usage": False}, None])
def test_stream_options_without_include_usage_gives_no_usage(backend: Replayer, gateways: Any, options: Any) -> None:
    changes = {"stream_options": options} if options is not None else {}
    request, canned = recorded("s1_chat_stream_usage")  # a backend that sends usage anyway
    request.pop("stream_options", None)
    request.update(changes)
    backend.push(canned)
    _status, _, out = post(gateways("vllm@0.32") + "/v1/chat/completions", request)
    got = chunks(out)
    assert all("usage" not in c for c in got)
    assert all(c["choices"] for c in got)
    sent = backend.seen[-1].json().get("stream_options") or {}
    assert sent.get("include_usage") is not True


def test_include_usage_gives_one_last_usage_chunk(backend: Replayer, gateways: Any) -> None:
    _, _, out = through(backend, gateways, "s1_chat_stream_usage", stream_options={"include_usage": True})
    got = chunks(out)
    assert got[-1]["choices"] == [] and got[-1]["usage"]["total_tokens"] > 0
    assert all(c.get("usage") is None for c in got[:-1])


def test_finish_reason_in_its_own_chunk(backend: Replayer, gateways: Any) -> None:
    _, _, out = through(backend, gateways, "s1_chat_stream")
    got = [c for c in chunks(out) if c["choices"]]
    finishes = [c for c in got if c["choices"][0]["finish_reason"] is not None]
    assert len(finishes) == 1 and finishes[0] is got[-1]
    assert finishes[0]["choices"][0]["delta"] == {}


def test_one_id_and_created_and_the_clients_model_name(backend: Replayer, gateways: Any) -> None:
    _, _, out = through(backend, gateways, "s1_chat_stream", model="my-alias")
    got = chunks(out)
    assert len({c["id"] for c in got}) == 1 and got[0]["id"].startswith("chatcmpl-")
    assert len({c["created"] for c in got}) == 1
    assert {c["model"] for c in got} == {"my-alias"}


def test_unknown_vendor_fields_never_reach_the_client(backend: Replayer, gateways: Any) -> None:
    _, _, out = through(backend, gateways, "s1_unknown_field")
    body = json.loads(out)
    assert set(body) <= {"id", "object", "created", "model", "choices", "usage"}
    assert set(body["choices"][0]) == {"index", "message", "logprobs", "finish_reason"}
    assert set(body["choices"][0]["message"]) <= {"role", "content", "refusal", "tool_calls", "reasoning_content"}
