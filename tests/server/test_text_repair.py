"""Text repair through the running gateway (issue 4): backends started without a reasoning or tool
parser, special tokens, stop strings the backend ignores.

The replaying backend sends the exact bytes of a fixture, or a stream built here in the byte style of
the backend's own recordings (each builder is checked against a recording first). Every answer must
check clean with ``oaishim.check`` and give the client the same result however the upstream body was
cut: into TCP pieces of 1, 3, 7 or 64 bytes, or with its text re-split across chunk JSONs (one
character per chunk, tags cut in half, the whole text in one chunk).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from _servers import Canned, Replayer

from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.transform.special import SpecialTokens
from oaishim.wire.accumulate import accumulate_chat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM = FIXTURES / "recorded" / "vllm-0.32-cpu"
LLAMA = FIXTURES / "recorded" / "llamacpp-server"
ALLOW_REASONING = CheckOptions(extensions_as_notes=True)
CHATML = SpecialTokens.from_config(special=["<|im_start|>", "<|im_end|>"], end_of_turn=["<|im_end|>"])
EOT_RULES = CheckOptions(extensions_as_notes=True, special_tokens=CHATML.special, eot_tokens=CHATML.end_of_turn)
PIECES = (1, 3, 7, 64)


def manifest_case(backend: str, name: str) -> dict[str, Any]:
    cases = yaml.safe_load((FIXTURES / backend / "manifest.yaml").read_text())
    case: dict[str, Any] = next(c for c in cases if c["name"] == name)
    return case


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()


def sse_data(raw: bytes) -> list[str]:
    """The data of each SSE event (the gateway's output and our builders: ``data: …`` blocks)."""
    blocks = raw.replace(b"\r\n", b"\n").split(b"\n\n")
    return [b[len(b"data:") :].strip().decode() for b in blocks if b.startswith(b"data:")]


def errors(raw: bytes, request: dict[str, Any], headers: dict[str, str], options: CheckOptions) -> list[Any]:
    exchange = exchange_from_bytes(raw, request=request, status=200, headers=headers)
    return [(f.rule, f.path, f.chunk, f.message) for f in check(exchange, options) if f.severity == "error"]


def result_of(message: dict[str, Any], finish: Any) -> tuple[Any, ...]:
    """What a client keeps of choice 0: content, reasoning, calls as (name, parsed arguments), finish."""
    calls = message.get("tool_calls") or []
    assert all(c["id"].startswith("call_") for c in calls)
    parsed = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    return message.get("content"), message.get("reasoning_content"), parsed, finish


def through_gateway(
    url: str, backend: Replayer, canned: Canned, request: dict[str, Any], options: CheckOptions = ALLOW_REASONING
) -> tuple[tuple[Any, ...], bytes]:
    """One exchange: checked clean; the client's result and the raw bytes the gateway sent."""
    backend.push(canned)
    status, headers, raw = post(url, request)
    assert status == 200
    assert errors(raw, request, headers, options) == []
    if not request.get("stream"):
        (choice,) = json.loads(raw)["choices"]
        return result_of(choice["message"], choice["finish_reason"]), raw
    data = sse_data(raw)
    assert data[-1] == "[DONE]"
    finish = json.loads(data[-2])["choices"][0]
    assert finish["delta"] == {} and finish["finish_reason"] is not None  # the finish in its own chunk
    (choice,) = accumulate_chat([json.loads(d) for d in data[:-1]])["choices"]
    return result_of(choice["message"], choice["finish_reason"]), raw


# ---------------------------------------------------------------------------------------------------
# Streams in each backend's byte style (content pieces in, SSE bytes out)


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def trtllm_stream(pieces: list[str], model: str = "Qwen3-32B-NVFP4") -> bytes:
    """TRT-LLM 1.3.0rc6 (T-10, T-11): role-only first chunk with a trailing space, a fresh id on every
    chunk, ``"reasoning_content":""`` beside each content piece, the finish on the last piece."""
    out = []

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta}
        if finish is not None:
            choice["finish_reason"] = finish
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": 1772100000}
        return head | {"model": model, "choices": [choice]}

    out.append(f"data: {_json(chunk({'role': 'assistant'}))} \n\n")
    for n, piece in enumerate(pieces):
        delta = {"content": piece, "reasoning_content": ""}
        out.append(f"data: {_json(chunk(delta, 'stop' if n == len(pieces) - 1 else None))}\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def llamacpp_stream(pieces: list[str], model: str = "Qwen3-8B-Q4_K_M.gguf") -> bytes:
    """llama.cpp (``chat-stream-reasoning.sse``'s style) with ``reasoning_format: none``: everything
    is content; the finish comes alone with ``delta: {}`` and the server's timings."""
    head = {"created": 1767500090, "id": "chatcmpl-2CReqhcrwPgQzzhs1Wa8P4a47XqThwrV", "model": model}
    tail = {"system_fingerprint": "b7112-3f2b9c1", "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choices = [{"finish_reason": finish, "index": 0, "delta": delta}]
        return f"data: {_json({'choices': choices} | head | tail | extra)}\n\n"

    out = [chunk({"role": "assistant", "content": None})]
    out += [chunk({"content": piece}) for piece in pieces]
    timings = {"cache_n": 17, "prompt_n": 1, "prompt_ms": 10.2, "predicted_n": len(pieces), "predicted_ms": 540.3}
    out.append(chunk({}, "stop", timings=timings))
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def vllm_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    if "role" not in delta:
        choice["token_ids"] = None
    head = {"id": "chatcmpl-8064303935364555", "object": "chat.completion.chunk", "created": 1795986290}
    return f"data: {_json(head | {'model': 'tiny', 'choices': [choice]} | extra)}\n\n"


def vllm_stream(pieces: list[str], finish: str | None = "stop", done: bool = True) -> bytes:
    """vLLM 0.32 (``s1_force_regex_think_stream``'s style): role chunk with ``content: ""``, one chunk per
    token with ``token_ids: null``, the finish on an empty last piece with the fingerprint."""
    out = [vllm_chunk({"role": "assistant", "content": ""}, prompt_token_ids=None, prompt_text=None)]
    out += [vllm_chunk({"content": piece}) for piece in pieces]
    if finish is not None:
        out.append(vllm_chunk({"content": ""}, finish, system_fingerprint="vllm-0.32.0-ded366e7"))
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def vllm_body(text: str, finish: str = "stop") -> bytes:
    """A vLLM 0.32 plain body (``s1_force_regex_think.body``) with this content."""
    body = json.loads((VLLM / "s1_force_regex_think.body").read_bytes())
    body["choices"][0]["message"]["content"] = text
    body["choices"][0]["finish_reason"] = finish
    return json.dumps(body).encode()


def contents(raw: bytes) -> list[str]:
    """The content pieces of an upstream stream, in order (the builders add the role chunk and the
    empty content vLLM sends with its finish)."""
    pieces = []
    for data in sse_data(raw):
        if data != "[DONE]":
            for choice in json.loads(data)["choices"]:
                piece, delta = choice["delta"].get("content"), choice["delta"]
                if isinstance(piece, str) and "role" not in delta and (piece or not choice.get("finish_reason")):
                    pieces.append(piece)
    return pieces


def _same_style(built: bytes, recorded: bytes) -> None:
    """Byte for byte, once ids, times and server stats (which differ per run) are set aside."""

    def plain(raw: bytes) -> str:
        text = re.sub(r'"(id|created)":("[^"]*"|\d+)', r'"\1":_', raw.decode())
        return re.sub(r'"timings":\{[^}]*\}', '"timings":_', text)

    assert plain(built) == plain(recorded)


def test_builders_write_each_backends_bytes() -> None:
    think = (FIXTURES / "trtllm" / "chat-stream-qwen3-think-in-content.sse").read_bytes()
    _same_style(trtllm_stream(contents(think)), think)
    think = (VLLM / "s1_force_regex_think_stream.body").read_bytes()
    _same_style(vllm_stream(contents(think)), think)
    # llama.cpp: the reasoning-format recording, its reasoning deltas written as content instead.
    reasoning = (FIXTURES / "llamacpp" / "chat-stream-reasoning.sse").read_bytes()
    as_content = reasoning.replace(b'"reasoning_content":', b'"content":')
    _same_style(llamacpp_stream(contents(as_content), model="Qwen3-8B-Q4_K_M.gguf"), as_content)


# ---------------------------------------------------------------------------------------------------
# Three profiles, each with raw <think> / tool-call text in content


def token_split(text: str) -> list[str]:
    """Roughly what a tokenizer gives: tags whole, words with their leading space, runs of newlines."""
    return re.findall(r"</?think>|</?tool_call>|\n+|[^\S\n]*[^\s<]+|[^\S\n]+|<", text)


def resplits(text: str) -> dict[str, list[str]]:
    """The same text cut into chunk JSONs in other ways."""
    cuts = sorted({m.start() + k for m in re.finditer(r"</?(?:think|tool_call)>", text) for k in (1, 4)})
    tags_cut = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return {
        "one-char-chunks": list(text),
        "five-char-chunks": [text[i : i + 5] for i in range(0, len(text), 5)],
        "tags-cut-in-half": tags_cut,
        "one-chunk": [text],
    }


def _regex_literal(regex: str) -> str:
    """The one text a regex of escaped literals matches (a recording's ``structured_outputs.regex``)."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), regex)


THINK_IN_CONTENT = manifest_case("trtllm", "chat-stream-qwen3-think-in-content")
LLAMA_NONE = manifest_case("llamacpp", "chat-nonstream-reasoning-format-none")
TOOLCALL_REQUEST = json.loads((VLLM / "s1_force_regex_toolcall_stream.req.json").read_text())
HERMES_TEXT = _regex_literal(TOOLCALL_REQUEST["structured_outputs"]["regex"])


@dataclass(frozen=True)
class Profile:
    """A backend without parsers: its profile, the raw content text, how it streams, what the client gets."""

    name: str
    request: dict[str, Any]
    text: str
    build: Callable[[list[str]], bytes]
    want: tuple[Any, ...]


PROFILES = {
    # T-18: TRT-LLM without --reasoning_parser, <think> in content, reasoning_content "".
    "trtllm@0": Profile(
        "trtllm@0",
        THINK_IN_CONTENT["request"],
        "".join(contents((FIXTURES / "trtllm" / THINK_IN_CONTENT["file"]).read_bytes())),
        trtllm_stream,
        (THINK_IN_CONTENT["text"], THINK_IN_CONTENT["reasoning"] + "\n", [], "stop"),
    ),
    # llama.cpp with reasoning_format none: raw <think>…</think> in content.
    "llamacpp@b9174": Profile(
        "llamacpp@b9174",
        {**LLAMA_NONE["request"], "stream": True},
        json.loads((FIXTURES / "llamacpp" / LLAMA_NONE["file"]).read_bytes())["choices"][0]["message"]["content"],
        llamacpp_stream,
        (LLAMA_NONE["text"], LLAMA_NONE["reasoning"] + "\n", [], "stop"),
    ),
    # vLLM without --tool-call-parser: the hermes text its regex forced (s1_force_regex_toolcall), as content.
    "vllm@0.32": Profile(
        "vllm@0.32",
        TOOLCALL_REQUEST,
        HERMES_TEXT,
        vllm_stream,
        (None, None, [("get_weather", {"city": "Paris"})], "tool_calls"),
    ),
}
VARIANTS = [(p, f"pieces-{n}") for p in PROFILES for n in PIECES] + [
    (p, split) for p in PROFILES for split in resplits("x")
]


@pytest.mark.parametrize(("profile", "variant"), VARIANTS, ids=[f"{p}/{v}" for p, v in VARIANTS])
def test_stream_repaired_clean_and_split_invariant(
    backend: Replayer, gateways: Any, profile: str, variant: str
) -> None:
    case = PROFILES[profile]
    if variant.startswith("pieces-"):
        # The backend's own tokens (TRT-LLM 1.3.0rc6: the fixture's bytes), sent in TCP pieces of n bytes.
        body = (FIXTURES / "trtllm" / THINK_IN_CONTENT["file"]).read_bytes() if profile == "trtllm@0" else None
        body = body or case.build(token_split(case.text))
        canned = Canned(body, content_type="text/event-stream", piece=int(variant.removeprefix("pieces-")))
    else:
        canned = Canned(case.build(resplits(case.text)[variant]), content_type="text/event-stream")
    assert "".join(contents(canned.body)) == case.text
    got, _ = through_gateway(gateways(case.name), backend, canned, case.request)
    assert got == case.want


def test_plain_bodies_repaired_the_same(backend: Replayer, gateways: Any) -> None:
    """The non-stream answers of the same backends give the client what their streams give."""
    bodies = {
        "trtllm@0": (FIXTURES / "trtllm" / "chat-nonstream-qwen3-think-in-content.json").read_bytes(),
        "llamacpp@b9174": (FIXTURES / "llamacpp" / LLAMA_NONE["file"]).read_bytes(),
        "vllm@0.32": vllm_body(HERMES_TEXT),
    }
    for name, case in PROFILES.items():
        request = {k: v for k, v in case.request.items() if k != "stream"}
        got, _ = through_gateway(gateways(name), backend, Canned(bodies[name]), request)
        assert got == case.want, name
    # The real llama.cpp recording (grammar-forced, reasoning parsing off): "<think>abc</think>Hello".
    request = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}]}
    raw = (LLAMA / "ls.chat_grammar_reasoning_none.body").read_bytes()
    assert json.loads(raw)["choices"][0]["message"]["content"] == "<think>abc</think>Hello"
    got, _ = through_gateway(gateways("llamacpp@b9174"), backend, Canned(raw), request)
    assert got == ("Hello", "abc", [], "stop")


def test_llamacpp_recording_as_a_stream(backend: Replayer, gateways: Any) -> None:
    """The same recorded text streamed by llama.cpp one token per chunk, and in 1-byte pieces."""
    request = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}], "stream": True}
    body = llamacpp_stream(["<", "think", ">", "abc", "</", "think", ">", "Hello"], model="tiny-chatml")
    for piece in (0, 1):
        canned = Canned(body, content_type="text/event-stream", piece=piece)
        got, _ = through_gateway(gateways("llamacpp@b9174"), backend, canned, request)
        assert got == ("Hello", "abc", [], "stop")


# ---------------------------------------------------------------------------------------------------
# The SDK's stream helper accumulates the calls the plain answer carries

MIXED = (
    "<think>\nParis weather, and a search too.\n</think>\n\nLet me check both.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "web_search", "arguments": {"query": "Paris <b>events</b>", "n": 3}}\n</tool_call>'
)
SEARCH_TOOL = {"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("text", [HERMES_TEXT, MIXED], ids=["regex-forced-call", "reasoning-text-two-calls"])
def test_sdk_stream_helper_gets_the_plain_answers_calls(backend: Replayer, gateways: Any, text: str) -> None:
    client = openai.OpenAI(base_url=gateways("vllm@0.32") + "/v1", api_key="x", max_retries=0, timeout=20)
    kwargs = {
        "model": "tiny",
        "messages": TOOLCALL_REQUEST["messages"],
        "tools": [*TOOLCALL_REQUEST["tools"], SEARCH_TOOL],
        "tool_choice": "auto",
    }
    backend.push(Canned(vllm_body(text)))
    plain = client.chat.completions.create(**kwargs).choices[0]
    backend.push(Canned(vllm_stream(token_split(text)), content_type="text/event-stream", piece=7))
    with client.chat.completions.stream(**kwargs) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_completion().choices[0]
    assert "tool_calls.function.arguments.done" in events

    def calls(choice: Any) -> list[tuple[str, Any]]:
        return [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]

    want: list[tuple[str, Any]] = [("get_weather", {"city": "Paris"})]
    if text == MIXED:
        want.append(("web_search", {"query": "Paris <b>events</b>", "n": 3}))
    assert calls(final) == calls(plain) == want
    assert final.finish_reason == plain.finish_reason == "tool_calls"
    assert final.message.content == plain.message.content == ("Let me check both.\n" if text == MIXED else None)
    reasoning = [getattr(c.message, "reasoning_content", None) for c in (final, plain)]
    assert reasoning == (["Paris weather, and a search too.\n"] * 2 if text == MIXED else [None, None])
    for choice in (final, plain):
        assert all(c.id.startswith("call_") for c in choice.message.tool_calls or [])


# ---------------------------------------------------------------------------------------------------
# The end of turn is never lost (a proxy's cleanup regex once ate it)

HELLO = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}], "stream": True}


@pytest.mark.parametrize("cleanup", [False, True], ids=["cleanup-off", "cleanup-on"])
@pytest.mark.parametrize("piece", [0, 1], ids=["whole-body", "1-byte-pieces"])
def test_end_of_turn_split_across_chunks(backend: Replayer, gateways: Any, cleanup: bool, piece: int) -> None:
    """The last content piece is ``<|im_`` + ``end|>`` in two chunks: the client gets the tag whole in
    one delta, every character, the finish and ``[DONE]``; a special token that does not end the turn
    goes only when the cleanup is on, and text shaped like a tag (``<|x|>``) never."""
    url = gateways("vllm@0.32", special_tokens=CHATML, display_cleanup=cleanup)
    body = vllm_stream(["Hello", "!", " I", "<|im_start|>", " am", "<|x|>", " Qwen", ".", "<|im_", "end|>"])
    canned = Canned(body, content_type="text/event-stream", piece=piece)
    got, raw = through_gateway(url, backend, canned, HELLO, EOT_RULES)
    text = "Hello! I am<|x|> Qwen.<|im_end|>" if cleanup else "Hello! I<|im_start|> am<|x|> Qwen.<|im_end|>"
    assert got == (text, None, [], "stop")
    deltas = [json.loads(d)["choices"][0]["delta"].get("content") for d in sse_data(raw)[:-1]]
    assert deltas[-2].endswith("<|im_end|>")  # whole, in the last content delta
    assert not any(d and d.endswith(("<|im_", "<|im_e", "<|")) for d in deltas)


@pytest.mark.parametrize("cleanup", [False, True], ids=["cleanup-off", "cleanup-on"])
def test_backend_generating_past_the_end_of_turn(backend: Replayer, gateways: Any, cleanup: bool) -> None:
    """A backend that misses its own end of turn keeps sending (no finish, no [DONE]): the gateway
    ends the choice at the tag, answers ``stop`` and ``[DONE]``, and closes the upstream."""
    url = gateways("vllm@0.32", special_tokens=CHATML, display_cleanup=cleanup)
    run_on = ["<|im_start|>", "user", "\n", "Tell", " me", " more", "<|im_end|>", "\n"] * 40
    # The tag's second half and the run-on text share a chunk: nothing after the tag may pass.
    body = vllm_stream(["Hi", " there", ".<|im_", "end|><|im_start|>", "user", *run_on], finish=None, done=False)
    canned = Canned(body, content_type="text/event-stream", piece=128, delay=0.02)
    assert len(body) / 128 * 0.02 > 6  # the backend would take this long to send it all
    started = time.monotonic()
    got, _ = through_gateway(url, backend, canned, HELLO, EOT_RULES)
    took = time.monotonic() - started
    assert got == ("Hi there.<|im_end|>", None, [], "stop")
    assert took < 3
    assert backend.closed_early.wait(timeout=2), "the gateway kept reading after the end of turn"
    assert backend.closed_at is not None and 0 < backend.closed_at - started < 3


# ---------------------------------------------------------------------------------------------------
# Stop strings the backend ignores

STOP_TAIL = [" and", " then", " the", " backend", " went", " on", "."] * 60


@pytest.mark.parametrize("include", [False, True], ids=["stop-cut", "include-stop-str"])
def test_stop_string_enforced_at_the_gateway(backend: Replayer, gateways: Any, include: bool) -> None:
    """The backend sends the stop string (cut across chunks) and keeps going slowly: the client's
    text ends at the stop's start (or after it, with ``include_stop_str_in_output``), with ``stop``
    and ``[DONE]``, and the gateway closes the upstream long before the backend would have finished."""
    request: dict[str, Any] = {**HELLO, "stop": ["END", "\n\n\n"]}
    if include:
        request["include_stop_str_in_output"] = True
    body = vllm_stream(["The", " answer", " is", " 42. E", "ND", "<think>", *STOP_TAIL], finish=None, done=False)
    canned = Canned(body, content_type="text/event-stream", piece=128, delay=0.02)
    assert len(body) / 128 * 0.02 > 6
    started = time.monotonic()
    got, _ = through_gateway(gateways("vllm@0.32"), backend, canned, request)
    took = time.monotonic() - started
    assert got == ("The answer is 42. END" if include else "The answer is 42. ", None, [], "stop")
    assert backend.seen[-1].json()["stop"] == ["END", "\n\n\n"]  # the backend was asked; it did not listen
    assert took < 3
    assert backend.closed_early.wait(timeout=2), "the gateway kept reading after the stop string"
    assert backend.closed_at is not None and 0 < backend.closed_at - started < 3


@pytest.mark.parametrize("piece", PIECES)
def test_stop_string_split_invariant(backend: Replayer, gateways: Any, piece: int) -> None:
    """A finished stream with the stop string inside reasoning-free text, in TCP pieces of any size,
    and its plain twin: the same cut."""
    request: dict[str, Any] = {**HELLO, "stop": "END"}
    text = "Count: 1, 2, 3 END 4, 5"
    canned = Canned(vllm_stream(token_split(text)), content_type="text/event-stream", piece=piece)
    got, _ = through_gateway(gateways("vllm@0.32"), backend, canned, request)
    assert got == ("Count: 1, 2, 3 ", None, [], "stop")
    plain = {k: v for k, v in request.items() if k != "stream"}
    got, _ = through_gateway(gateways("vllm@0.32"), backend, Canned(vllm_body(text, finish="length")), plain)
    assert got == ("Count: 1, 2, 3 ", None, [], "stop")
