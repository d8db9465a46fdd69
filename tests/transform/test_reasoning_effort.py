"""reasoning_effort (and the Responses API's reasoning.effort): the request each profile sends, and
no reasoning in the answer when thinking is off, in plain bodies and in streams split anywhere."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from oaishim.profiles._registry import PROFILES
from oaishim.transform.params.reasoning_effort import THINKING_ON, without_switch
from oaishim.transform.pipe import StreamPipe, plain_answer
from oaishim.transform.plan import response_context
from oaishim.transform.request import prepare, rewrite
from oaishim.transform.responses.request import responses_to_chat
from oaishim.transform.special import SpecialTokens
from oaishim.transform.validate import validate
from oaishim.wire.errors import OpenAIError

HI = [{"role": "user", "content": "hi"}]


class _Settings:
    text_repair = True
    thinking_open = False
    special_tokens: SpecialTokens | None = None
    display_cleanup = False
    reasoning_field = "reasoning_content"
    keep_extensions = False


def _chat(effort: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": HI, "reasoning_effort": effort, **extra}


# What each backend's notes say it reads (profile docstrings): (profile, effort) -> upstream keys.
SENT = [
    ("openai", "minimal", {"reasoning_effort": "minimal"}),
    ("vllm@0.32", "minimal", {"reasoning_effort": "minimal", "chat_template_kwargs": {"enable_thinking": False}}),
    ("vllm@0.32", "high", {"reasoning_effort": "high"}),
    ("vllm@0.6.5", "none", {"chat_template_kwargs": {"enable_thinking": False}}),
    ("vllm@0.6.5", "xhigh", {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True}}),
    ("vllm@0", "low", {}),
    ("sglang", "none", {"chat_template_kwargs": {"enable_thinking": False, "thinking": False}}),
    (
        "sglang",
        "max",
        {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True, "thinking": True}},
    ),
    ("trtllm@1.4", "minimal", {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": False}}),
    ("trtllm@1.4", "xhigh", {"reasoning_effort": "high"}),
    ("trtllm@0", "none", {}),
    ("llamacpp@b9174", "minimal", {"reasoning_effort": "minimal", "chat_template_kwargs": {"enable_thinking": False}}),
    ("llamacpp@0", "medium", {"reasoning_effort": "medium"}),
    ("ollama", "minimal", {"reasoning_effort": "none"}),
    ("ollama", "xhigh", {"reasoning_effort": "xhigh"}),
    ("generic", "none", {"reasoning_effort": "none"}),
]


@pytest.mark.parametrize(("profile", "effort", "want"), SENT, ids=[f"{p}-{e}" for p, e, _ in SENT])
def test_each_profile_sends_the_effort_the_way_its_backend_reads_it(
    profile: str, effort: str, want: dict[str, Any]
) -> None:
    body = prepare("chat", _chat(effort), PROFILES[profile]).body
    got = {k: body[k] for k in ("reasoning_effort", "chat_template_kwargs") if k in body}
    assert got == want


def test_the_responses_spelling_is_translated_the_same_way() -> None:
    chat, _info = responses_to_chat({"model": "m", "input": "hi", "reasoning": {"effort": "minimal"}}, key=b"k" * 32)
    prepared = rewrite("chat", validate("chat", chat), PROFILES["vllm@0.32"])
    assert prepared.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert prepared.thinking.off and prepared.thinking.closed


def test_the_clients_own_template_kwargs_are_kept_and_win() -> None:
    client = _chat("none", chat_template_kwargs={"enable_thinking": True, "foo": 1})
    body = prepare("chat", client, PROFILES["sglang"]).body
    assert body["chat_template_kwargs"] == {"enable_thinking": True, "thinking": False, "foo": 1}
    assert client["chat_template_kwargs"] == {"enable_thinking": True, "foo": 1}  # the caller's body is untouched


def test_a_backend_with_neither_field_nor_switch_reports_the_field_as_dropped() -> None:
    prepared = prepare("chat", _chat("none"), PROFILES["trtllm@0"])
    assert "reasoning_effort" not in prepared.body and prepared.dropped == ["reasoning_effort"]
    assert prepared.thinking.off and not prepared.thinking.closed
    assert prepare("chat", _chat("none"), PROFILES["vllm@0.6.5"]).dropped == []  # the switch carries it


def test_null_means_the_default_and_is_not_sent() -> None:
    prepared = prepare("chat", _chat(None), PROFILES["trtllm@1.4"])
    assert "reasoning_effort" not in prepared.body and not prepared.thinking.off


@pytest.mark.parametrize("bad", ["ultra", "HIGH", 3, True])
def test_values_the_official_api_refuses_get_its_400(bad: Any) -> None:
    with pytest.raises(OpenAIError) as chat:
        prepare("chat", _chat(bad), PROFILES["vllm@0.32"])
    assert (chat.value.status, chat.value.param) == (400, "reasoning_effort")
    with pytest.raises(OpenAIError) as responses:
        responses_to_chat({"model": "m", "input": "hi", "reasoning": {"effort": bad}})
    assert (responses.value.status, responses.value.param) == (400, "reasoning.effort")


# -- the response side -------------------------------------------------------------------------

THINK = "<think>\nThe user greets me.\n</think>\n\nHello!"


def _ctx(effort: str | None, profile: str = "llamacpp@b9174", thinking_open: bool = False) -> Any:
    settings = _Settings()
    settings.thinking_open = thinking_open
    prepared = prepare("chat", _chat(effort, stream=True), PROFILES[profile])
    return response_context("chat", prepared, settings)


def _sse(deltas: list[dict[str, Any]]) -> bytes:
    chunks = [
        {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [c]} for c in deltas
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _client_stream(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in raw.split(b"\n\n") if line.startswith(b"data: {")]


def _seen(chunks: list[dict[str, Any]]) -> tuple[str, str]:
    content = reasoning = ""
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
    return content, reasoning


UPSTREAMS = {
    "think-in-content": _sse(
        [
            {"index": 0, "delta": {"role": "assistant", "content": THINK}},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
    ),
    "reasoning-field": _sse(
        [
            {"index": 0, "delta": {"role": "assistant", "reasoning_content": "The user greets me."}},
            {"index": 0, "delta": {"content": "Hello!"}},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
    ),
}


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
def test_thinking_off_streams_carry_no_reasoning_at_every_split_point(upstream: str) -> None:
    raw = UPSTREAMS[upstream]
    for cut in range(len(raw) + 1):
        ctx = _ctx("none")
        pipe = StreamPipe(ctx)
        out = pipe.feed(raw[:cut]) + pipe.feed(raw[cut:]) + pipe.flush()
        chunks = _client_stream(out)
        assert _seen(chunks) == ("Hello!", ""), cut
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "reasoning_dropped" in ctx.repairs, cut


def test_with_thinking_on_the_same_stream_keeps_its_reasoning() -> None:
    for effort in ("high", None):
        pipe = StreamPipe(_ctx(effort))
        out = pipe.feed(UPSTREAMS["think-in-content"]) + pipe.flush()
        assert _seen(_client_stream(out)) == ("Hello!", "The user greets me.\n")


def test_thinking_off_plain_bodies_carry_no_reasoning() -> None:
    for message in (
        {"role": "assistant", "content": THINK},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets me."},
        {"role": "assistant", "content": "Hello!", "reasoning": "The user greets me."},
    ):
        body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}
        body["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        ctx = _ctx("minimal")
        out = plain_answer("chat", 200, orjson.dumps(body), ctx)
        assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hello!", "refusal": None}
        assert "reasoning_dropped" in ctx.repairs


def test_kept_extensions_do_not_bring_the_dropped_reasoning_back() -> None:
    ctx = _ctx("none")
    ctx.keep_extensions = True
    body = {
        "choices": [{"index": 0, "message": {"content": "Hello!", "reasoning_content": "r"}, "finish_reason": "stop"}]
    }
    message = plain_answer("chat", 200, orjson.dumps(body), ctx)["choices"][0]["message"]
    assert "reasoning_content" not in message and "reasoning" not in message


def test_a_template_that_opens_think_is_closed_by_the_switch_so_the_answer_is_content() -> None:
    # thinking_open: the template writes <think> itself; enable_thinking false closes it (Qwen3),
    # so the answer starts as content and must not be swallowed as reasoning.
    pipe = StreamPipe(_ctx("none", thinking_open=True))
    raw = _sse(
        [
            {"index": 0, "delta": {"role": "assistant", "content": "Hello!"}},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
    )
    assert _seen(_client_stream(pipe.feed(raw) + pipe.flush())) == ("Hello!", "")
    # where the switch may not reach the template (TensorRT-LLM), the answer may still open in reasoning
    pipe = StreamPipe(_ctx("none", "trtllm@1.4", thinking_open=True))
    raw = _sse(
        [
            {"index": 0, "delta": {"role": "assistant", "content": "r\n</think>\n\nHello!"}},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
    )
    assert _seen(_client_stream(pipe.feed(raw) + pipe.flush())) == ("Hello!", "")


def test_without_switch_takes_out_only_what_the_gateway_added() -> None:
    """A TensorRT-LLM guard refusing the switch: the request goes again without it, the client's own
    template kwargs kept; nothing to take out when the client set the switch itself."""
    prepared = prepare("chat", _chat("none", chat_template_kwargs={"foo": 1}), PROFILES["trtllm@1.4"])
    assert prepared.body["chat_template_kwargs"] == {"enable_thinking": False, "foo": 1}
    again = without_switch(prepared.body, prepared.thinking)
    assert again is not None and again["chat_template_kwargs"] == {"foo": 1}
    assert {k: v for k, v in again.items() if k != "chat_template_kwargs"} == {
        k: v for k, v in prepared.body.items() if k != "chat_template_kwargs"
    }
    alone = prepare("chat", _chat("none"), PROFILES["trtllm@1.4"])
    unswitched = without_switch(alone.body, alone.thinking)
    assert unswitched is not None and "chat_template_kwargs" not in unswitched
    own = prepare("chat", _chat("none", chat_template_kwargs={"enable_thinking": False}), PROFILES["trtllm@1.4"])
    assert without_switch(own.body, own.thinking) is None  # the client's own: the guard's 400 is the client's
    assert without_switch(prepare("chat", _chat("high"), PROFILES["trtllm@1.4"]).body, THINKING_ON) is None
