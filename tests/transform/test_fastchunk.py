"""The common chunk's short way (``transform.fastchunk``) gives the bytes the general rules give.

Each stream is fed through two pipes, one with the short way and one without, and every feed's
output must be byte-identical, for generated streams (text with and without ``<think>`` tags and
partial tags, several choices, finishes, usage, refusals and reasoning beside the text, malformed
chunks) at every split point of the body, and for the recorded backend streams.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan
from oaishim.transform.responses import ResponsesStreamEncoder, responses_to_chat

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"


def context(
    include_usage: bool,
    reasoning: bool,
    starts_in_reasoning: bool,
    stops: tuple[str, ...],
    secrets: tuple[str, ...] = (),
) -> ResponseContext:
    plan = RepairPlan(reasoning=reasoning, starts_in_reasoning=starts_in_reasoning, stops=stops)
    return ResponseContext(
        model="m", include_usage=include_usage, repair=plan, response_id="chatcmpl-x", created=7, secrets=secrets
    )


def pipes(**options: Any) -> tuple[StreamPipe, StreamPipe]:
    fast, general = StreamPipe(context(**options)), StreamPipe(context(**options))
    general._fast = None  # the general rules alone
    return fast, general


def responses_pipes(**options: Any) -> tuple[StreamPipe, StreamPipe]:
    """Two pipes into the Responses encoder, ids and clock fixed: with the short way, and without."""
    info = responses_to_chat({"model": "m", "input": "hi", "stream": True}, key=b"k" * 32)[1]

    def encoder() -> ResponsesStreamEncoder:
        counter = itertools.count()
        return ResponsesStreamEncoder(info, id_factory=lambda p: f"{p}_{next(counter)}", clock=lambda: 1700000000)

    fast = StreamPipe(context(**options), encoder=encoder())
    general = StreamPipe(context(**options), encoder=encoder())
    general._fast = None
    return fast, general


def both(pieces: list[bytes], **options: Any) -> tuple[list[bytes], list[bytes]]:
    fast, general = pipes(**options)
    a = [fast.feed(p) for p in pieces] + [fast.flush()]
    b = [general.feed(p) for p in pieces] + [general.flush()]
    return a, b


def event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def token(text: Any, index: int = 0, finish: Any = None, **delta: Any) -> dict[str, Any]:
    choice = {"index": index, "delta": {"content": text, **delta}, "logprobs": None, "finish_reason": finish}
    return {"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "up", "choices": [choice]}


OPTIONS = st.fixed_dictionaries(
    {
        "include_usage": st.booleans(),
        "reasoning": st.booleans(),
        "starts_in_reasoning": st.booleans(),
        "stops": st.sampled_from([(), ("stop",)]),
        "secrets": st.sampled_from([(), ("sk-stop-a-key",)]),  # the gateway's keys: masked as they stream
    }
)
TEXT = st.lists(
    st.sampled_from(["a", " ", "<", ">", "/", "think", "\n", '"', "é", "🙂", "stop", "sk-", "-a-key"]), max_size=6
).map("".join)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    out = [event(token("", role="assistant"))]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["text", "text", "text", "second", "reasoning", "refusal", "null", "broken"]))
        if kind == "text":
            out.append(event(token(draw(TEXT))))
        elif kind == "second":
            out.append(event(token(draw(TEXT), index=1)))
        elif kind == "reasoning":
            out.append(event(token(draw(TEXT), reasoning_content=draw(TEXT))))
        elif kind == "refusal":
            out.append(event(token(None, refusal=draw(TEXT))))
        elif kind == "null":
            out.append(event(token(draw(TEXT), tool_calls=None, reasoning_content=None)))
        else:
            out.append(b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n')
    if draw(st.booleans()):
        out.append(event(token(".", finish="stop")))
        out.append(event({**token(None), "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}))
    out.append(b"data: [DONE]\n\n")
    return out


def responses_both(pieces: list[bytes], **options: Any) -> tuple[list[bytes], list[bytes]]:
    """As ``both``, into the Responses encoder (its ``text_token``, against its ``feed``)."""
    fast, general = responses_pipes(**options)
    return [*(fast.feed(p) for p in pieces), fast.flush()], [*(general.feed(p) for p in pieces), general.flush()]


WAYS = pytest.mark.parametrize("run", [both, responses_both], ids=["chat", "responses"])


@WAYS
@examples(50)
@given(streams(), OPTIONS)
def test_one_read_per_event(run: Any, events: list[bytes], options: dict[str, Any]) -> None:
    fast, general = run(events, **options)
    assert fast == general


@WAYS
@examples(12)
@given(streams(), OPTIONS)
def test_every_split_point(run: Any, events: list[bytes], options: dict[str, Any]) -> None:
    body = b"".join(events)
    for at in range(len(body) + 1):
        fast, general = run([body[:at], body[at:]], **options)
        assert b"".join(fast) == b"".join(general), at


@pytest.mark.parametrize("path", sorted(RECORDED.glob("*/*stream*.body")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_streams(path: Path) -> None:
    events = [e + b"\n\n" for e in path.read_bytes().split(b"\n\n") if e.strip()]
    for options in ({"include_usage": True, "reasoning": True, "starts_in_reasoning": False, "stops": ()},):
        fast, general = both(events, **options)
        assert fast == general


def test_the_common_token_takes_the_short_way() -> None:
    """Not a vacuous equality: a plain token after the role chunk is written by the short way."""
    fast, _ = pipes(include_usage=False, reasoning=True, starts_in_reasoning=False, stops=())
    fast.feed(event(token("", role="assistant")) + event(token("Hi")))  # the role chunk goes out with the first text
    assert fast._fast is not None
    assert fast._fast.event(orjson.dumps(token(" the")).decode()) == (
        b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}\n\n'
    )
    assert fast._fast.event(orjson.dumps(token(" <think")).decode()) is None  # a tag may start: the general rules


def test_with_secrets_to_mask_the_common_token_still_takes_the_short_way() -> None:
    fast, _ = pipes(
        include_usage=False, reasoning=True, starts_in_reasoning=False, stops=(), secrets=("sk-stop-a-key",)
    )
    fast.feed(event(token("", role="assistant")) + event(token("Hi")))
    assert fast._fast is not None
    head = b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    tail = b'},"logprobs":null,"finish_reason":null}]}\n\n'
    assert fast._fast.event(orjson.dumps(token(" the")).decode()) == head + b'"delta":{"content":" the"' + tail
    assert fast._fast.event(orjson.dumps(token(" sk-st")).decode()) == head + b'"delta":{"content":" "' + tail
    assert fast._fast.event(orjson.dumps(token("op")).decode()) == b""  # "sk-stop" may still become the key
    masked = fast._fast.event(orjson.dumps(token("-a-key!")).decode())
    assert masked == head + b'"delta":{"content":"[REDACTED]!"' + tail


def test_a_key_cut_across_tokens_comes_out_the_same_both_ways() -> None:
    key = "sk-stop-a-key"
    text = f"the key {key} ok"
    options = {"include_usage": False, "reasoning": True, "starts_in_reasoning": False, "stops": (), "secrets": (key,)}
    for cut in range(len(text) + 1):
        events = [event(token("", role="assistant")), event(token(text[:cut])), event(token(text[cut:]))]
        fast, general = both([*events, event(token(".", finish="stop")), b"data: [DONE]\n\n"], **options)
        assert fast == general, cut
        assert key.encode() not in b"".join(fast) and b"[REDACTED]" in b"".join(fast)


@pytest.mark.parametrize(
    "raw",
    [
        '{"id":"x","object":"chat.completion.chunk","created":01,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"a"},"logprobs":null,"finish_reason":null}]}',  # not JSON: a leading zero
        '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"a\tb"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',  # a raw tab
        '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"caf\\u00e9 \\"q\\""},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
        '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"<thi"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
        '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"ok \u2028 é 🙂"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
    ],
)
def test_vllm_token_events_as_written(raw: str) -> None:
    """vLLM's token chunk is matched as written (no parse); escapes, bad JSON and tags go the long way."""
    events = [event(token("", role="assistant")), event(token("Hi")), f"data: {raw}\n\n".encode(), b"data: [DONE]\n\n"]
    for reasoning in (True, False):
        options = {"include_usage": False, "reasoning": reasoning, "starts_in_reasoning": False, "stops": ()}
        fast, general = both(events, **options)
        assert fast == general


def test_such_a_string_is_written_back_as_it_was() -> None:
    """What the as-written match relies on: orjson writes every character but quote, backslash and
    the control characters as itself."""
    for code in range(0x20, 0x110000, 7):
        if 0xD800 <= code <= 0xDFFF or chr(code) in '"\\':
            continue
        assert orjson.dumps(chr(code)) == b'"' + chr(code).encode() + b'"', hex(code)


VLLM_START = (
    '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"'
)
VLLM_END = '"},"logprobs":null,"finish_reason":null'


@pytest.mark.parametrize(
    "rest",
    [
        'b"},"logprobs":null,"finish_reason":null}]}',
        'b"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
        'a\tb"},"logprobs":null,"finish_reason":null}]}',  # a raw tab: not JSON
        'del\x7f ok"},"logprobs":null,"finish_reason":null}]}',  # printable to JSON, not to isprintable
        'sep \u2028 é 🙂"},"logprobs":null,"finish_reason":null}]}',
        'caf\\u00e9 \\"q\\""},"logprobs":null,"finish_reason":null}]}',  # escapes: parsed
        'a","x":"b"},"logprobs":null,"finish_reason":null}]}',  # another key after the text
        'a"},"logprobs":null,"finish_reason":"stop"}]}',  # a finish
        'a"},"logprobs":null,"finish_reason":null}]} ',  # something after the object
        '"},"logprobs":null,"finish_reason":null}]}',  # no text
        '<thi"},"logprobs":null,"finish_reason":null}]}',
    ],
)
def test_a_token_after_a_matched_one_begins_as_it_did(rest: str) -> None:
    """After one token has matched, the next that begins with the same characters is read from
    there: whatever follows, both ways give the same bytes."""
    first = f"data: {VLLM_START}Hi{VLLM_END}}}]}}\n\n".encode()
    events = [event(token("", role="assistant")), first, f"data: {VLLM_START}{rest}\n\n".encode()]
    for reasoning in (True, False):
        options = {"include_usage": False, "reasoning": reasoning, "starts_in_reasoning": False, "stops": ()}
        fast, general = both([*events, b"data: [DONE]\n\n"], **options)
        assert fast == general


@pytest.mark.patches_internals
def test_the_pattern_matches_a_streams_first_token_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a vacuous equality: once a token has matched, the next one is not matched again."""
    from oaishim.transform import fastchunk

    seen: list[str] = []
    pattern = fastchunk._VLLM_TOKEN

    class Counting:
        def fullmatch(self, data: str) -> Any:
            seen.append(data)
            return pattern.fullmatch(data)

    monkeypatch.setattr(fastchunk, "_VLLM_TOKEN", Counting())
    fast, _ = pipes(include_usage=False, reasoning=False, starts_in_reasoning=False, stops=())
    texts = ["Hi", " there", " é", "!"]
    out = fast.feed(b"".join(f"data: {VLLM_START}{t}{VLLM_END}}}]}}\n\n".encode() for t in texts))
    assert len(seen) == 1 and b'"content":"!"' in out


def test_responses_common_token_takes_the_short_way() -> None:
    """Not a vacuous equality: the Responses pipe has the short way, and a token after the first
    gives the one delta event the general path gives."""
    fast, general = responses_pipes(include_usage=False, reasoning=False, starts_in_reasoning=False, stops=())
    assert fast._fast is not None
    first = event(token("", role="assistant")) + event(token("Hi"))
    assert fast.feed(first) == general.feed(first)
    out = fast.feed(event(token(" the")))
    assert out == general.feed(event(token(" the")))
    assert out.startswith(b"event: response.output_text.delta\n") and out.count(b"\n\n") == 1
