"""The gateway's secrets masked in the text a model streams (``transform.secrets``), across tokens.

* :class:`SecretMask`: any split of a text gives what the whole text gives, which is the text with
  each secret replaced by the mask; a beginning that never completes comes back at the end;
* through the stream pipe: a key written over several deltas reaches the client masked, in the
  content, the reasoning, a refusal and a tool call's arguments, wherever the key is cut; the
  bytes the client gets never hold it; nothing else of the text is lost or reordered;
* held text goes out before another field's delta (a tool call, a refusal) and at the finish.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.repair import RepairPlan
from oaishim.transform.secrets import MASK, FieldMasks, SecretMask
from oaishim.wire.accumulate import accumulate_chat

KEY = "sk-gw-7f3a9c2e51"
UPSTREAM = "up-key-0b9d44e1a7"
SECRETS = (UPSTREAM, KEY)


def reference(text: str, secrets: tuple[str, ...] = SECRETS) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def fed(pieces: list[str], secrets: tuple[str, ...] = SECRETS) -> str:
    mask = SecretMask(secrets)
    return "".join(mask.feed(p) for p in pieces) + mask.flush()


TEXTS = [
    f"the key is {KEY}.",
    f"{KEY}{KEY} and {UPSTREAM}",
    "sk-gw-7f3a9c2e5",  # all but the last character: never a key, all of it comes back
    "sk-sk-gw-7f3a9c2e51 s",  # a false start right before the real one
    f"é🙂 {KEY[:4]} then {KEY}",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_split_gives_the_whole_texts_answer(text: str) -> None:
    whole = reference(text)
    assert fed([text]) == whole
    for a in range(len(text) + 1):
        assert fed([text[:a], text[a:]]) == whole, a
        for b in range(a, len(text) + 1):
            assert fed([text[:a], text[a:b], text[b:]]) == whole, (a, b)


@examples(200)
@given(
    st.lists(
        st.sampled_from(["sk-", "gw-", "7f3a", "9c2e51", "s", "k", " ", "up-key-", "0b9d44e1a7", "é"]), max_size=14
    )
)
def test_generated_texts_in_one_character_pieces(parts: list[str]) -> None:
    text = "".join(parts)
    assert fed(list(text)) == reference(text)
    assert fed(parts) == reference(text)


def test_a_mask_holds_only_what_could_still_become_a_secret() -> None:
    mask = SecretMask(SECRETS)
    assert mask.feed("hello sk-g") == "hello " and mask.held == "sk-g"
    assert mask.feed("o away") == "sk-go away" and mask.held == ""
    assert mask.passes("plain text") and not mask.passes("ends in sk") and not mask.passes(f"has {KEY}")
    mask.feed("up-")
    assert not mask.passes("anything")  # something is held: the next text cannot pass as it is


def test_field_masks_release_the_others_first() -> None:
    masks = FieldMasks(SECRETS)
    assert masks.feed("content", "see sk-") == ([], "see ")
    released, text = masks.feed(("call", 0), '{"a":1}')
    assert released == [("content", "sk-")] and text == '{"a":1}'
    assert masks.release() == []


# -- through the stream pipe -------------------------------------------------------------------------
def context(secrets: tuple[str, ...] = SECRETS) -> ResponseContext:
    plan = RepairPlan(reasoning=True)
    return ResponseContext(model="m", repair=plan, response_id="chatcmpl-x", created=7, secrets=secrets)


def event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(finish: Any = None, **delta: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return event({"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "up", "choices": [choice]})


def run(events: list[bytes], ctx: ResponseContext | None = None) -> tuple[bytes, dict[str, Any], ResponseContext]:
    ctx = ctx or context()
    pipe = StreamPipe(ctx)
    body = b"".join(pipe.feed(e) for e in events) + pipe.flush()
    chunks = [orjson.loads(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    (choice,) = accumulate_chat(chunks)["choices"]
    return body, choice, ctx


def streamed(field: str, text: str, cut: int) -> list[bytes]:
    """``text`` in ``field`` as two deltas cut at ``cut``, then a finish."""
    first, second = text[:cut], text[cut:]
    out = [chunk(role="assistant", content="")]
    for part in (first, second):
        if field == "arguments":
            call = {"index": 0, "function": {"arguments": part}}
            if part is first:
                call.update(id="call_1", type="function", function={"name": "f", "arguments": part})
            out.append(chunk(tool_calls=[call]))
        elif part:
            out.append(chunk(**{field: part}))
    return [*out, chunk("tool_calls" if field == "arguments" else "stop"), b"data: [DONE]\n\n"]


@pytest.mark.parametrize("field", ["content", "reasoning_content", "refusal", "arguments"])
def test_a_key_cut_anywhere_reaches_the_client_masked(field: str) -> None:
    text = f'{{"note": "the key {KEY} and {UPSTREAM[:3]}"}}' if field == "arguments" else f"the key {KEY} ok"
    for cut in range(len(text) + 1):
        body, choice, ctx = run(streamed(field, text, cut))
        assert KEY.encode() not in body, cut
        message = choice["message"]
        got = message["tool_calls"][0]["function"]["arguments"] if field == "arguments" else message[field]
        assert got == reference(text), cut
        assert "secret_masked" in ctx.repairs


def test_without_secrets_the_text_is_untouched() -> None:
    text = f"the key {KEY} ok"
    _, choice, ctx = run(streamed("content", text, 12), context(()))
    assert choice["message"]["content"] == text and "secret_masked" not in ctx.repairs


def test_a_beginning_held_back_comes_out_before_a_tool_call_and_at_the_end() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    events = [
        chunk(role="assistant", content=""),
        chunk(content="calling sk-"),  # could be the key: held
        chunk(tool_calls=[call]),
        chunk(reasoning_content="hmm up-key"),  # held too, then the finish gives it back
        chunk("tool_calls"),
        b"data: [DONE]\n\n",
    ]
    body, choice, ctx = run(events)
    chunks = [orjson.loads(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    held_content = next(i for i, d in enumerate(deltas) if d.get("content") == "sk-")
    call_opens = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert held_content < call_opens  # the held text went out before the call, as it came
    assert choice["message"]["content"] == "calling sk-"
    assert choice["message"]["reasoning_content"] == "hmm up-key"
    assert "secret_masked" not in ctx.repairs
