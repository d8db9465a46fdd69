"""The official ``openai`` SDK, sync and async, reads every answer the gateway gives for real vLLM 0.32
and llama.cpp traffic: plain and streamed chat, the ``chat.completions.stream()`` helper, legacy
completions, embeddings, tool calls, reasoning, logprobs and ``n=2``. What the SDK returns is compared
with what a client accumulates from the raw recording itself (:func:`raw_choices`, written here from
the wire format and independent of the gateway's code). Failures must reach the caller as exceptions:
a stream cut in the middle raises ``APIError``, an upstream 400 raises ``BadRequestError`` with the
official ``type``/``param``/``code``.
"""

from __future__ import annotations

import array
import asyncio
import base64
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from _servers import Canned, Replayer

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMA = RECORDED / "llamacpp-server"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
HELLO = [{"role": "user", "content": "Hello, who are you?"}]
# Parameters the SDK's create() takes by name; anything else in a recorded request goes in extra_body.
SDK_PARAMS = {
    "model",
    "messages",
    "prompt",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "temperature",
    "seed",
    "n",
    "logprobs",
    "top_logprobs",
    "stop",
    "stream_options",
    "logit_bias",
}


# ---------------------------------------------------------------------------------------------------
# What a client gets from the raw recording (its own bytes, no gateway code involved)


@dataclass
class Result:
    """One choice as a client sees it in the end."""

    text: str = ""
    reasoning: str = ""
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [name, arguments]
    tokens: list[tuple[str, float]] = field(default_factory=list)  # (token, logprob) of the text
    finish: str | None = None

    def tool_calls(self) -> list[tuple[str, Any]]:
        return [(name, json.loads(args)) for _, (name, args) in sorted(self.calls.items())]


def _raw_events(raw: bytes) -> Iterator[dict[str, Any]]:
    """The JSON data of each SSE event (the recordings are ``data: {...}`` blocks split by blank lines)."""
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))
        if data and data.strip() != b"[DONE]":
            yield json.loads(data)


def _raw_tokens(logprobs: Any) -> list[tuple[str, float]]:
    if not isinstance(logprobs, dict):
        return []
    if isinstance(logprobs.get("content"), list):  # chat shape (llama.cpp uses it on /v1/completions too)
        return [(e["token"], e["logprob"]) for e in logprobs["content"]]
    return list(zip(logprobs.get("tokens") or [], logprobs.get("token_logprobs") or [], strict=True))


def _fold(result: Result, part: dict[str, Any], logprobs: Any) -> None:
    """Fold a message, a delta or a legacy choice into ``result``."""
    for key in ("content", "text"):
        if isinstance(part.get(key), str):
            result.text += part[key]
    for key in ("reasoning_content", "reasoning"):
        if isinstance(part.get(key), str):
            result.reasoning += part[key]
            break
    for position, call in enumerate(part.get("tool_calls") or []):
        entry = result.calls.setdefault(call.get("index", position), ["", ""])
        function = call.get("function") or {}
        entry[0] = entry[0] or function.get("name") or ""
        entry[1] += function.get("arguments") or ""
    result.tokens += _raw_tokens(logprobs)


def raw_choices(raw: bytes) -> dict[int, Result]:
    """Each choice of a raw recorded body (JSON or SSE), accumulated as a client would."""
    results: dict[int, Result] = {}
    stream = raw.lstrip().startswith(b"data:")
    bodies = list(_raw_events(raw)) if stream else [json.loads(raw)]
    for body in bodies:
        for choice in body.get("choices") or []:
            result = results.setdefault(choice["index"], Result())
            part = choice.get("delta") if stream else choice.get("message")
            _fold(result, part if isinstance(part, dict) else choice, choice.get("logprobs"))
            result.finish = choice.get("finish_reason") or result.finish
    return results


def recording(directory: Path, name: str) -> Canned:
    raw = (directory / f"{name}.body").read_bytes()
    kind = "text/event-stream" if raw.lstrip().startswith(b"data:") else "application/json"
    status = 200
    headers = directory / f"{name}.headers"
    if headers.exists():
        status = int(headers.read_text().split()[1])
    return Canned(raw, status=status, content_type=kind)


# ---------------------------------------------------------------------------------------------------
# What the SDK returned


def sdk_message(message: Any, logprobs: Any = None) -> Result:
    result = Result(text=message.content or "", reasoning=getattr(message, "reasoning_content", None) or "")
    for i, call in enumerate(message.tool_calls or []):
        result.calls[i] = [call.function.name, call.function.arguments]
    if logprobs is not None and logprobs.content is not None:
        result.tokens = [(e.token, e.logprob) for e in logprobs.content]
    return result


def sdk_chunks(chunks: Iterable[Any]) -> dict[int, Result]:
    """Plain ``stream=True`` chunks, accumulated the way an SDK user's loop does it."""
    results: dict[int, Result] = {}
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            result = results.setdefault(choice.index, Result())
            delta = choice.delta
            result.text += delta.content or ""
            result.reasoning += getattr(delta, "reasoning_content", None) or ""
            for call in delta.tool_calls or []:
                entry = result.calls.setdefault(call.index, ["", ""])
                if call.function is not None:
                    entry[0] = entry[0] or call.function.name or ""
                    entry[1] += call.function.arguments or ""
            if choice.logprobs is not None and choice.logprobs.content:
                result.tokens += [(e.token, e.logprob) for e in choice.logprobs.content]
            result.finish = choice.finish_reason or result.finish
    return results


def split(request: dict[str, Any]) -> dict[str, Any]:
    """A recorded request as SDK keyword arguments (backend extensions in ``extra_body``)."""
    kwargs = {k: v for k, v in request.items() if k in SDK_PARAMS}
    extra = {k: v for k, v in request.items() if k not in SDK_PARAMS and k != "stream"}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def same_tokens(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    return [t for t, _ in got] == [t for t, _ in want] and all(
        abs(a - b) < 1e-6 for (_, a), (_, b) in zip(got, want, strict=True)
    )


@pytest.fixture(scope="module")
def clients(gateways: Any) -> Any:
    """(sync, async) clients for the gateway of a profile."""

    def make(profile: str) -> tuple[openai.OpenAI, openai.AsyncOpenAI]:
        base = gateways(profile) + "/v1"
        return (
            openai.OpenAI(base_url=base, api_key="x", max_retries=0, timeout=20),
            openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0, timeout=20),
        )

    return make


def request_of(directory: Path, name: str, **defaults: Any) -> dict[str, Any]:
    for suffix in (".req.json", ".request.json"):
        path = directory / f"{name}{suffix}"
        if path.exists():
            return {**json.loads(path.read_text()), "model": "tiny"}
    return {"model": "tiny", **defaults}


# ---------------------------------------------------------------------------------------------------
# Chat, plain and streamed, with the recorded answers of both engines

TOOLS_LLAMA = {"tools": [WEATHER_TOOL], "tool_choice": "required", "max_tokens": 256}
# (profile, folder, non-stream recording, stream recording, request fields for recordings without one)
CHAT_CASES = [
    ("vllm@0.32", VLLM, "s1_chat", "s1_chat_stream", {}),
    ("vllm@0.32", VLLM, "s3x_nothink_tool_regex", "s3x_nothink_tool_regex_stream", {}),
    ("vllm@0.32", VLLM, "s3_force_regex_think", "s3_force_regex_think_stream", {}),
    ("vllm@0.32", VLLM, "s1_chat_logprobs", "s1_chat_logprobs_stream", {}),
    ("vllm@0.32", VLLM, "s1_n2", "s1_n2_stream", {}),
    ("llamacpp@b9174", LLAMA, "ls.chat_nonstream", "ls.chat_stream", {"messages": HELLO, "max_tokens": 16}),
    (
        "llamacpp@b9174",
        LLAMA,
        "ls.chat_tools_forced",
        "ls.chat_tools_forced_stream",
        {"messages": HELLO, **TOOLS_LLAMA},
    ),
    ("llamacpp@b9174", LLAMA, "ls.chat_grammar", "ls.chat_grammar_stream", {"messages": HELLO}),
    ("llamacpp@b9174", LLAMA, "ls.chat_logprobs", "ls.chat_stream_logprobs", {"messages": HELLO, "logprobs": True}),
    # llama.cpp's own answer to n: 2, relayed as from a backend that takes n itself (the llamacpp
    # profile fans n out instead: tests/server/test_n_fanout.py)
    ("openai", LLAMA, "ls.chat_n2", None, {"messages": HELLO, "n": 2, "max_tokens": 4}),
]
CHAT_IDS = [case[2] for case in CHAT_CASES]


def _logprobs_request(folder: Path, name: str, request: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's logprobs recordings have no saved request: ask for what the answer holds."""
    if request.get("logprobs") is True and "top_logprobs" not in request:
        first = next(_first_content_logprobs(folder / f"{name}.body"))
        request["top_logprobs"] = len(first.get("top_logprobs") or [])
    return request


def _first_content_logprobs(path: Path) -> Iterator[dict[str, Any]]:
    raw = path.read_bytes()
    bodies = list(_raw_events(raw)) if raw.startswith(b"data:") else [json.loads(raw)]
    for body in bodies:
        for choice in body.get("choices") or []:
            yield from ((choice.get("logprobs") or {}).get("content") or [])


def check_choices(got: dict[int, Result], want: dict[int, Result]) -> None:
    assert sorted(got) == sorted(want)
    for index, expected in want.items():
        result = got[index]
        assert result.text == expected.text, index
        assert result.reasoning == expected.reasoning, index
        assert result.tool_calls() == expected.tool_calls(), index
        assert same_tokens(result.tokens, expected.tokens), index


@pytest.mark.parametrize(("profile", "folder", "plain", "streamed", "fields"), CHAT_CASES, ids=CHAT_IDS)
def test_chat_plain_sync(
    backend: Replayer, clients: Any, profile: str, folder: Path, plain: str, streamed: str | None, fields: Any
) -> None:
    sync, _ = clients(profile)
    request = _logprobs_request(folder, plain, request_of(folder, plain, **fields))
    backend.push(recording(folder, plain))
    completion = sync.chat.completions.create(**split(request))
    assert completion.object == "chat.completion"
    got = {c.index: sdk_message(c.message, c.logprobs) for c in completion.choices}
    check_choices(got, raw_choices((folder / f"{plain}.body").read_bytes()))
    assert all(c.finish_reason in ("stop", "length", "tool_calls") for c in completion.choices)


STREAM_CASES = [c for c in CHAT_CASES if c[3] is not None]
STREAM_IDS = [case[3] for case in STREAM_CASES]


@pytest.mark.parametrize(("profile", "folder", "plain", "streamed", "fields"), STREAM_CASES, ids=STREAM_IDS)
def test_chat_stream_sync_and_async(
    backend: Replayer, clients: Any, profile: str, folder: Path, plain: str, streamed: str, fields: Any
) -> None:
    sync, asynchronous = clients(profile)
    request = _logprobs_request(folder, streamed, request_of(folder, streamed, **fields))
    want = raw_choices((folder / f"{streamed}.body").read_bytes())

    backend.push(recording(folder, streamed))
    got = sdk_chunks(sync.chat.completions.create(**split(request), stream=True))
    check_choices(got, want)

    async def read() -> dict[int, Result]:
        stream = await asynchronous.chat.completions.create(**split(request), stream=True)
        return sdk_chunks([chunk async for chunk in stream])

    backend.push(recording(folder, streamed))
    check_choices(asyncio.run(read()), want)


@pytest.mark.parametrize(("profile", "folder", "plain", "streamed", "fields"), STREAM_CASES, ids=STREAM_IDS)
def test_stream_helper_final_completion(
    backend: Replayer, clients: Any, profile: str, folder: Path, plain: str, streamed: str, fields: Any
) -> None:
    """``client.chat.completions.stream()`` (the SDK's accumulating helper, the strictest consumer)."""
    sync, _ = clients(profile)
    request = _logprobs_request(folder, streamed, request_of(folder, streamed, **fields))
    backend.push(recording(folder, streamed))
    want = raw_choices((folder / f"{streamed}.body").read_bytes())
    with sync.chat.completions.stream(**split(request)) as stream:
        events = [event.type for event in stream]
        try:
            final = stream.get_final_completion()
        except openai.LengthFinishReasonError as error:
            # The helper refuses a cut-off answer (it does so with the official API too) and hands
            # over what it accumulated.
            assert any(w.finish == "length" for w in want.values())
            final = error.completion
    assert "chunk" in events
    assert ("tool_calls.function.arguments.done" in events) == any(w.calls for w in want.values())
    got = {c.index: sdk_message(c.message, c.logprobs) for c in final.choices}
    check_choices(got, want)
    assert [c.finish_reason for c in final.choices] == [
        "tool_calls" if want[i].calls else want[i].finish for i in sorted(want)
    ]


@pytest.mark.parametrize(
    ("profile", "folder", "plain", "streamed", "fields"),
    [c for c in CHAT_CASES if "tool" in c[2]],
    ids=[c[2] for c in CHAT_CASES if "tool" in c[2]],
)
def test_stream_helper_accumulates_the_tool_calls_of_the_plain_answer(
    backend: Replayer, clients: Any, profile: str, folder: Path, plain: str, streamed: str, fields: Any
) -> None:
    """Issue acceptance: the stream helper accumulates the same tool calls from the stream as the
    non-stream response carries (the two recordings were forced to the same call)."""
    sync, _ = clients(profile)
    request = request_of(folder, plain, **fields)
    backend.push(recording(folder, plain))
    plain_message = sync.chat.completions.create(**split(request)).choices[0]
    backend.push(recording(folder, streamed))
    with sync.chat.completions.stream(**split(request)) as stream:
        final = stream.get_final_completion().choices[0]

    def calls(choice: Any) -> list[tuple[str, str, Any]]:
        return [(c.type, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]

    assert calls(final) == calls(plain_message) == [("function", "get_weather", {"city": "Paris"})]
    assert final.finish_reason == plain_message.finish_reason == "tool_calls"
    assert final.message.content == plain_message.message.content
    for choice in (final, plain_message):
        assert all(c.id.startswith("call_") for c in choice.message.tool_calls or [])


# ---------------------------------------------------------------------------------------------------
# Legacy completions and embeddings

COMPLETION_CASES = [
    ("vllm@0.32", VLLM, "s1_completions_default", {}),
    ("vllm@0.32", VLLM, "s1_completions_stream", {}),
    ("llamacpp@b9174", LLAMA, "ls.completions_stream", {"prompt": "def hello", "max_tokens": 16}),
    ("llamacpp@b9174", LLAMA, "ls.completions_logprobs", {"prompt": "def hello", "max_tokens": 4, "logprobs": 1}),
]


@pytest.mark.parametrize(
    ("profile", "folder", "name", "fields"), COMPLETION_CASES, ids=[c[2] for c in COMPLETION_CASES]
)
def test_legacy_completions(
    backend: Replayer, clients: Any, profile: str, folder: Path, name: str, fields: dict[str, Any]
) -> None:
    sync, asynchronous = clients(profile)
    request = request_of(folder, name, **fields)
    raw = (folder / f"{name}.body").read_bytes()
    want = raw_choices(raw)[0]
    kwargs = split(request)
    if raw.startswith(b"data:"):
        backend.push(recording(folder, name))
        stream = sync.completions.create(**kwargs, stream=True)
        pieces = [(c.object, c.choices[0].text if c.choices else "") for c in stream]
        assert {kind for kind, _ in pieces} == {"text_completion"}
        assert "".join(text for _, text in pieces) == want.text

        async def read() -> str:
            stream = await asynchronous.completions.create(**kwargs, stream=True)
            return "".join([c.choices[0].text async for c in stream if c.choices])

        backend.push(recording(folder, name))
        assert asyncio.run(read()) == want.text
    else:
        backend.push(recording(folder, name))
        completion = sync.completions.create(**kwargs)
        choice = completion.choices[0]
        assert completion.object == "text_completion"
        assert choice.text == want.text
        if want.tokens:  # the legacy shape, whatever shape the engine used
            assert choice.logprobs is not None
            assert choice.logprobs.tokens == [t for t, _ in want.tokens]
            assert choice.logprobs.token_logprobs == pytest.approx([lp for _, lp in want.tokens])


def test_embeddings_floats_and_base64(backend: Replayer, clients: Any) -> None:
    """The SDK asks for base64 unless told otherwise and decodes it; a float answer also reads."""
    sync, asynchronous = clients("vllm@0.32")
    raw = (FIXTURES / "vllm" / "embeddings.json").read_bytes()
    floats = json.loads(raw)["data"][0]["embedding"]
    backend.push(Canned(raw))
    result = sync.embeddings.create(model="tiny", input="The food was delicious.")
    assert backend.seen[-1].json()["encoding_format"] == "base64"
    assert result.data[0].embedding == floats
    assert result.usage.prompt_tokens == json.loads(raw)["usage"]["prompt_tokens"]

    packed = base64.b64encode(array.array("f", floats).tobytes()).decode()
    as_base64 = json.loads(raw)
    as_base64["data"][0]["embedding"] = packed
    backend.push(Canned(json.dumps(as_base64).encode()))
    decoded = asyncio.run(asynchronous.embeddings.create(model="tiny", input="The food was delicious."))
    assert decoded.data[0].embedding == pytest.approx(floats, rel=1e-6)


# ---------------------------------------------------------------------------------------------------
# Failures raise


@pytest.mark.parametrize(
    ("folder", "name", "profile", "cut"),
    [
        (VLLM, "s1_chat_stream", "vllm@0.32", "mid-event"),
        (VLLM, "s3x_nothink_tool_regex_stream", "vllm@0.32", "between-events"),
        (LLAMA, "ls.chat_stream", "llamacpp@b9174", "mid-event"),
    ],
)
def test_stream_cut_mid_way_raises(
    backend: Replayer, clients: Any, folder: Path, name: str, profile: str, cut: str
) -> None:
    """An upstream that dies mid-stream must not look like a short answer to the SDK."""
    sync, asynchronous = clients(profile)
    raw = (folder / f"{name}.body").read_bytes()
    half = len(raw) // 2
    at = half if cut == "mid-event" else raw.index(b"\n\n", half) + 2
    request = request_of(folder, name, messages=HELLO)
    if "tool" in name:
        request.setdefault("tools", [WEATHER_TOOL])

    seen: list[Any] = []
    backend.push(Canned(raw, content_type="text/event-stream", cut_after=at))
    with pytest.raises(openai.APIError):
        seen.extend(sync.chat.completions.create(**split(request), stream=True))
    assert seen, "the error came after the chunks the upstream did send"

    backend.push(Canned(raw, content_type="text/event-stream", cut_after=at))
    with pytest.raises(openai.APIError), sync.chat.completions.stream(**split(request)) as helper:
        helper.get_final_completion()

    async def read() -> None:
        stream = await asynchronous.chat.completions.create(**split(request), stream=True)
        async for _ in stream:
            pass

    backend.push(Canned(raw, content_type="text/event-stream", cut_after=at))
    with pytest.raises(openai.APIError):
        asyncio.run(read())


def test_plain_answer_cut_mid_way_raises(backend: Replayer, clients: Any) -> None:
    sync, _ = clients("vllm@0.32")
    raw = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(raw, cut_after=len(raw) // 2))
    with pytest.raises(openai.InternalServerError):
        sync.chat.completions.create(model="tiny", messages=HELLO)


@pytest.mark.parametrize(
    ("profile", "folder", "name", "expected"),
    [
        # vLLM's own code is the integer 400; the official body has a string or null there.
        ("vllm@0.32", VLLM, "s1_invalid_maxtokens", ("invalid_request_error", "max_tokens", None)),
        # OpenAI says a context overflow with this type, param and code (openai-wire-format.md §5).
        (
            "llamacpp@b9174",
            LLAMA,
            "ls.err_ctx_overflow",
            ("invalid_request_error", "messages", "context_length_exceeded"),
        ),
    ],
)
def test_upstream_400_raises_bad_request_as_openai_would(
    backend: Replayer, clients: Any, profile: str, folder: Path, name: str, expected: tuple[str, str, str | None]
) -> None:
    sync, asynchronous = clients(profile)
    raw_error = json.loads((folder / f"{name}.body").read_bytes())["error"]
    for stream in (False, True):
        backend.push(recording(folder, name))
        with pytest.raises(openai.BadRequestError) as caught:
            sync.chat.completions.create(model="tiny", messages=HELLO, max_tokens=99999, stream=stream)
        error = caught.value
        assert error.status_code == 400
        assert (error.type, error.param, error.code) == expected
        assert isinstance(error.body, dict) and set(error.body) == {"message", "type", "param", "code"}
        if name == "s1_invalid_maxtokens":
            assert error.body["message"] == raw_error["message"]
        else:  # llama.cpp's numbers, said in OpenAI's words
            assert f"{raw_error['n_ctx']} tokens" in error.body["message"]
            assert f"{raw_error['n_prompt_tokens']} tokens" in error.body["message"]

    backend.push(recording(folder, name))
    with pytest.raises(openai.BadRequestError) as caught_async:
        asyncio.run(asynchronous.chat.completions.create(model="tiny", messages=HELLO, max_tokens=99999))
    assert (caught_async.value.type, caught_async.value.param, caught_async.value.code) == expected


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_429_with_retry_after_is_retried_by_the_sdk_after_that_wait(
    backend: Replayer, gateways: Any, stream: bool
) -> None:
    """The backend's 429 and its Retry-After reach the SDK, which waits that long and asks again
    (its own default without the header is well under a second)."""
    client = openai.OpenAI(base_url=gateways("vllm@0.32") + "/v1", api_key="x", max_retries=2, timeout=20)
    limited = Canned(
        b'{"error":{"message":"Too many requests","type":"rate_limit_error","code":429}}',
        status=429,
        headers={"Retry-After": "1", "x-ratelimit-remaining-requests": "0"},
    )
    answer = recording(VLLM, "s1_chat_stream" if stream else "s1_chat")
    backend.push(limited, answer)
    started = time.monotonic()
    if stream:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(model="tiny", messages=HELLO, stream=True)
            if c.choices
        )
    else:
        text = client.chat.completions.create(model="tiny", messages=HELLO).choices[0].message.content or ""
    waited = time.monotonic() - started
    assert len(backend.seen) == 2  # asked once more, after the 429
    assert waited >= 0.95  # the SDK waited as the header said
    assert text
