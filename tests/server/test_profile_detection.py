"""``--profile <family>`` over HTTP: the gateway asks the backend for its version, through that family's
own endpoint, and uses the family's conservative profile when it cannot tell; ``<family>@<version>``
pins a profile and asks nothing. One backend shape per family, served by the replaying backend with
recorded (vLLM 0.32) or hand-written bodies; what the backend received is what is asserted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer, RunningGateway, Seen, free_port
from test_http import call

from oaishim.server.config import ModelRoute, Settings

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
CHAT_BODY = (VLLM / "s1_chat.body").read_bytes()  # any official-enough answer: the request side is tested
DEVELOPER = "Answer in French."
ASK = {
    "model": "tiny",
    "messages": [{"role": "developer", "content": DEVELOPER}, {"role": "user", "content": "Hello"}],
}
HISTORY = {  # an assistant turn with reasoning, sent back as the agents do
    "model": "tiny",
    "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
        {"role": "user", "content": "How are you?"},
    ],
}


def card(owned_by: str, **extra: Any) -> bytes:
    return json.dumps(
        {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": owned_by, **extra}]}
    ).encode()


VLLM_MODELS = (VLLM / "s1_models.body").read_bytes()  # owned_by "vllm", with root/parent/permission
LLAMA_MODELS = card("llamacpp", meta={"n_ctx_train": 2048})
TRT_MODELS = card("tensorrt_llm")
SGLANG_MODELS = card("sglang", root="tiny", parent=None, max_model_len=2048)
OLLAMA_MODELS = card("library")
OPENAI_MODELS = card("system")


class Backend:
    """A backend shape: fixed answers for the GET paths it knows, 404 for the others, a chat answer."""

    def __init__(self, answers: dict[str, bytes]) -> None:
        self.answers = answers

    def __call__(self, seen: Seen) -> Canned:
        if seen.method == "POST" and seen.path == "/v1/chat/completions":
            return Canned(CHAT_BODY)
        if seen.method == "GET" and seen.path in self.answers:
            return Canned(self.answers[seen.path])
        return Canned(b'{"detail":"Not Found"}', 404)


@contextmanager
def served(profile: str, answers: dict[str, bytes]) -> Iterator[tuple[str, Replayer]]:
    """A fresh gateway (nothing detected yet) with ``--profile profile`` in front of a backend shape."""
    with Replayer() as backend:
        backend.responder = Backend(answers)
        route = ModelRoute("*", (backend.url,), profile=profile)
        with RunningGateway(Settings(models=(route,), port=free_port())) as gateway:
            yield gateway.url, backend


def sent(profile: str, answers: dict[str, bytes], body: dict[str, Any] = ASK) -> tuple[list[str], dict[str, Any]]:
    """The paths the backend was asked for, and the chat body it received, for one client request."""
    with served(profile, answers) as (url, backend):
        status, _, out = call(url + "/v1/chat/completions", "POST", body)
        assert status == 200, out
        chats = [s for s in backend.seen if s.path == "/v1/chat/completions"]
        assert len(chats) == 1
        return [f"{s.method} {s.path}" for s in backend.seen], chats[0].json()


def developer_merged(body: dict[str, Any]) -> bool:
    roles = [m["role"] for m in body["messages"]]
    if "developer" in roles:
        return False
    assert body["messages"][0] == {"role": "system", "content": DEVELOPER}
    return True


# --- vLLM -------------------------------------------------------------------------------------


def test_vllm_without_a_version_answer_merges_developer() -> None:
    """The failure this guards against: an older vLLM hands ``developer`` to a template that drops it.
    A vLLM-shaped server that does not answer /version gets the conservative profile."""
    paths, body = sent("vllm", {"/v1/models": VLLM_MODELS})
    assert paths == ["GET /version", "GET /v1/models", "POST /v1/chat/completions"]
    assert developer_merged(body)


def test_vllm_reporting_an_older_version_merges_developer() -> None:
    _, body = sent("vllm", {"/version": b'{"version":"0.10.2"}', "/v1/models": VLLM_MODELS})
    assert developer_merged(body)


def test_vllm_reporting_0_32_keeps_developer_for_vllm_to_map() -> None:
    _, body = sent("vllm", {"/version": (VLLM / "s1_version.body").read_bytes(), "/v1/models": VLLM_MODELS})
    assert not developer_merged(body)
    assert body["messages"][0] == ASK["messages"][0]


def test_vllm_pinned_asks_nothing_and_uses_the_pinned_profile() -> None:
    paths, body = sent("vllm@0.32", {})
    assert paths == ["POST /v1/chat/completions"]
    assert not developer_merged(body)
    paths, body = sent("vllm@0.6.5", {"/version": b'{"version":"0.32.0"}'})
    assert paths == ["POST /v1/chat/completions"]
    assert developer_merged(body)


def test_a_version_from_a_backend_of_another_family_is_not_read() -> None:
    """``--profile vllm`` in front of something whose cards say SGLang: its version means nothing for vLLM."""
    _, body = sent("vllm", {"/version": b'{"version":"0.32.0"}', "/v1/models": SGLANG_MODELS})
    assert developer_merged(body)


# --- TensorRT-LLM -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "reasoning"),
    [
        ({"/v1/models": TRT_MODELS}, None),  # no version: 1.3.0rc6's 400 for reasoning_content avoided
        ({"/version": b'{"version":"1.3.0rc6"}', "/v1/models": TRT_MODELS}, None),
        ({"/version": b'{"version":"1.4.0"}', "/v1/models": TRT_MODELS}, "reasoning"),
    ],
    ids=["no-version", "1.3.0rc6", "1.4.0"],
)
def test_trtllm_by_version(answers: dict[str, bytes], reasoning: str | None) -> None:
    paths, body = sent("trtllm", answers, HISTORY)
    assert paths[:2] == ["GET /version", "GET /v1/models"]
    assistant = body["messages"][1]
    assert "reasoning_content" not in assistant
    assert assistant.get("reasoning") == ("greet back" if reasoning else None)


# --- llama.cpp --------------------------------------------------------------------------------


def test_llamacpp_reads_its_build_from_props() -> None:
    props = b'{"build_info":"b11434-1a2b3c4","total_slots":1}'
    paths, body = sent("llamacpp", {"/props": props, "/v1/models": LLAMA_MODELS})
    assert paths == ["GET /props", "GET /v1/models", "POST /v1/chat/completions"]
    assert not developer_merged(body)  # b9174 and later map developer themselves


@pytest.mark.parametrize(
    "answers",
    [
        {"/v1/models": LLAMA_MODELS},  # no /props
        {"/props": b'{"build_info":"b0-unknown"}', "/v1/models": LLAMA_MODELS},  # a build without its number
        {"/props": b'{"build_info":"b8651-0d0d0d0"}', "/v1/models": LLAMA_MODELS},
    ],
    ids=["no-props", "b0-unknown", "b8651"],
)
def test_llamacpp_without_a_recent_build_merges_developer(answers: dict[str, bytes]) -> None:
    _, body = sent("llamacpp", answers)
    assert developer_merged(body)


# --- families with one profile: nothing to ask ------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "models", "merged"),
    [("sglang", SGLANG_MODELS, True), ("ollama", OLLAMA_MODELS, True), ("openai", OPENAI_MODELS, False)],
)
def test_single_profile_families_ask_nothing(profile: str, models: bytes, merged: bool) -> None:
    paths, body = sent(profile, {"/version": b'{"version":"9.9.9"}', "/v1/models": models})
    assert paths == ["POST /v1/chat/completions"]
    assert developer_merged(body) is merged


def test_generic_asks_nothing_and_merges_developer() -> None:
    paths, body = sent("generic", {"/version": b'{"version":"0.32.0"}', "/v1/models": VLLM_MODELS})
    assert paths == ["POST /v1/chat/completions"]
    assert developer_merged(body)
