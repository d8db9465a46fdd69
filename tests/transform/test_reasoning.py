"""Tests for oaishim.transform.reasoning: ``<think>`` blocks split out of content, token by token.

Recorded cases come from real servers (tests/fixtures/recorded/*/README.md): the raw text a backend
without a parser produced (vLLM ``s1_``: the ``structured_outputs.regex`` of the request is the exact
text; llama.cpp ``ls.chat_grammar_reasoning_none``) and the split the backend's own parser made of
the same text (vLLM ``s3_``/``s4b_``/``s5_``: qwen3 / deepseek_r1; llama.cpp ``ls.chat_grammar``).
Where we differ from a parser on purpose, the test says so and pins the difference.

Every input is also split at every offset (and every pair of offsets when short) and by hypothesis
at random points: the joined output must not depend on where the feeds were cut, must equal an
independent whole-text reference, and must lose nothing.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.transform.pieces import Piece, Text, join_text
from oaishim.transform.reasoning import ReasoningSplitter, split_reasoning

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMA = RECORDED / "llamacpp-server"
OPEN, CLOSE = "<think>", "</think>"
MAX_HELD = len(CLOSE) - 1


# ---------------------------------------------------------------------------------------------------
# Helpers


def run(
    chunks: Iterable[str], *, starts_in_reasoning: bool = False, open_tag: str = OPEN, close_tag: str = CLOSE
) -> list[Piece]:
    splitter = ReasoningSplitter(starts_in_reasoning=starts_in_reasoning, open_tag=open_tag, close_tag=close_tag)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += splitter.feed(chunk)
    return pieces + splitter.flush()


def joined(pieces: list[Piece]) -> tuple[str, str]:
    return join_text(pieces, "reasoning"), join_text(pieces, "content")


def cut(text: str, offsets: Iterable[int]) -> list[str]:
    bounds = [0, *sorted(offsets), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def assert_lossless(
    text: str, pieces: list[Piece], *, starts_in_reasoning: bool = False, open_tag: str = OPEN, close_tag: str = CLOSE
) -> None:
    """``text`` is exactly the pieces' text, in order, with only removed markup between them.

    Removed markup is: whole tags, each followed by the newlines dropped after it, and (when the
    template opened ``<think>``) the newlines at the very start. Nothing else may vanish, nothing
    may be added and nothing may move.
    """
    assert all(isinstance(p, Text) and p.text for p in pieces), pieces  # no empty pieces either
    markup = f"(?:(?:{re.escape(open_tag)}|{re.escape(close_tag)})[\r\n]*)*"
    pattern = ("[\r\n]*" if starts_in_reasoning else "") + markup
    pattern += "".join(re.escape(p.text) + markup for p in pieces if isinstance(p, Text))
    assert re.fullmatch(pattern, text, re.DOTALL), (text, pieces)


def reference(
    text: str, *, starts_in_reasoning: bool = False, open_tag: str = OPEN, close_tag: str = CLOSE
) -> tuple[str, str]:
    """The rules of the module docstring applied to the whole text at once, independently."""
    out = {"reasoning": "", "content": ""}
    kind, after_tag = ("reasoning" if starts_in_reasoning else "content"), starts_in_reasoning
    for part in re.split(f"({re.escape(open_tag)}|{re.escape(close_tag)})", text):
        if part in (open_tag, close_tag):
            kind, after_tag = ("reasoning" if part == open_tag else "content"), True
            continue
        kept = part.lstrip("\r\n") if after_tag else part
        after_tag = after_tag and not kept
        out[kind] += kept
    return out["reasoning"], out["content"]


def check_every_split(text: str, *, starts_in_reasoning: bool = False, pairs: bool = False) -> None:
    """Same answer for the whole text, for every cut, and (``pairs``) every two cuts."""
    expected = split_reasoning(text, starts_in_reasoning=starts_in_reasoning)
    assert expected == reference(text, starts_in_reasoning=starts_in_reasoning)
    whole = run([text], starts_in_reasoning=starts_in_reasoning)
    assert_lossless(text, whole, starts_in_reasoning=starts_in_reasoning)
    cuts: list[tuple[int, ...]] = [(i,) for i in range(len(text) + 1)]
    if pairs:
        cuts += [(i, j) for i in range(len(text) + 1) for j in range(i, len(text) + 1)]
    for offsets in cuts:
        pieces = run(cut(text, offsets), starts_in_reasoning=starts_in_reasoning)
        assert joined(pieces) == expected, offsets
        assert_lossless(text, pieces, starts_in_reasoning=starts_in_reasoning)


def message(path: Path) -> dict[str, Any]:
    msg: dict[str, Any] = orjson.loads(path.read_bytes())["choices"][0]["message"]
    return msg


def stream_deltas(path: Path) -> list[dict[str, Any]]:
    deltas = []
    for line in path.read_bytes().splitlines():
        if line.startswith(b"data: {"):
            deltas += [choice["delta"] for choice in orjson.loads(line[6:])["choices"]]
    return deltas


# ---------------------------------------------------------------------------------------------------
# Recorded: raw text from a server without a parser, and what the server's parser made of it

# s1_force_regex_think / s4b_think_regex_lb / s5_think_regex_lb all ask for this exact text.
THINK_RAW = "<think>\nI am thinking.\n</think>\n\nHello world"


@pytest.mark.parametrize("name", ["s1_force_regex_think", "s4b_think_regex_lb", "s5_think_regex_lb"])
def test_recorded_regex_is_the_raw_text(name: str) -> None:
    regex = orjson.loads((VLLM / f"{name}.req.json").read_bytes())["structured_outputs"]["regex"]
    assert re.fullmatch(regex, THINK_RAW)


@pytest.mark.parametrize("name", ["s4b_think_regex_lb", "s5_think_regex_lb", "s4b_think_regex_lb_stream"])
@pytest.mark.parametrize("starts_in_reasoning", [False, True])
def test_vllm_parsers_split_with_the_framing_newlines_dropped(name: str, starts_in_reasoning: bool) -> None:
    # vLLM 0.32 qwen3 (s4b) and deepseek_r1 (s5) give reasoning "\nI am thinking.\n" and content
    # "\n\nHello world". We drop the newline after <think> and the blank line after </think> (the
    # template's framing, as llama.cpp and Qwen3's own template do); the rest is identical.
    if name.endswith("_stream"):
        deltas = stream_deltas(VLLM / f"{name}.body")
        theirs = ("".join(d.get("reasoning") or "" for d in deltas), "".join(d.get("content") or "" for d in deltas))
    else:
        msg = message(VLLM / f"{name}.body")
        theirs = (msg["reasoning"], msg["content"])
    assert theirs == ("\nI am thinking.\n", "\n\nHello world")
    ours = split_reasoning(THINK_RAW, starts_in_reasoning=starts_in_reasoning)
    assert ours == (theirs[0].lstrip("\n"), theirs[1].lstrip("\n")) == ("I am thinking.\n", "Hello world")


@pytest.mark.parametrize("starts_in_reasoning", [False, True])
def test_llamacpp_split_is_reproduced_exactly(starts_in_reasoning: bool) -> None:
    raw = message(LLAMA / "ls.chat_grammar_reasoning_none.body")["content"]  # --reasoning-format none
    assert raw == "<think>abc</think>Hello"
    parsed = message(LLAMA / "ls.chat_grammar.body")
    assert split_reasoning(raw, starts_in_reasoning=starts_in_reasoning) == (
        parsed["reasoning_content"],
        parsed["content"],
    )
    deltas = stream_deltas(LLAMA / "ls.chat_grammar_stream.body")
    streamed = (
        "".join(d.get("reasoning_content") or "" for d in deltas),
        "".join(d.get("content") or "" for d in deltas),
    )
    assert streamed == split_reasoning(raw) == ("abc", "Hello")


@pytest.mark.parametrize("name", ["s3_force_regex_think", "s3x_think_regex_thinkstop"])
def test_unclosed_reasoning_stays_reasoning_like_qwen3(name: str) -> None:
    # qwen3 parser, thinking on, the model never wrote </think>: all reasoning, content null.
    msg = message(VLLM / f"{name}.body")
    assert msg["content"] is None
    raw = msg["reasoning"]  # no tags in it: the parser passed the text through unchanged
    assert split_reasoning(raw, starts_in_reasoning=True) == (raw, "")
    deltas = [d["reasoning"] for d in stream_deltas(VLLM / "s3_force_regex_think_stream.body") if d.get("reasoning")]
    assert joined(run(deltas, starts_in_reasoning=True)) == ("".join(deltas), "")


def test_truncated_inside_the_close_tag_gives_the_partial_tag_back_as_reasoning() -> None:
    # deepseek_r1, max_tokens hit inside "</think>" spelt in byte tokens: vLLM's reasoning ends in
    # "</thi". The raw text is the regex's prefix; we hold "</thi" and flush() returns it as reasoning.
    msg = message(VLLM / "s5x_think_regex_thinkstop.body")
    assert (msg["reasoning"], msg["content"]) == ("\nI am thinking.\n</thi", None)
    raw = "<think>" + msg["reasoning"]
    assert THINK_RAW.startswith(raw)
    for starts_in_reasoning in (False, True):
        assert split_reasoning(raw, starts_in_reasoning=starts_in_reasoning) == ("I am thinking.\n</thi", "")
    splitter = ReasoningSplitter(starts_in_reasoning=True)
    assert splitter.feed(raw) == [Text("reasoning", "I am thinking.\n")]
    assert repr(splitter) == "<ReasoningSplitter in-reasoning held='</thi'>"
    assert splitter.flush() == [Text("reasoning", "</thi")]


def test_repeated_close_tags_are_markup_not_content() -> None:
    # s5x_logit_bias_endthink: four "</think>" tokens (logit_bias on 4093, max_tokens 4). vLLM's
    # deepseek_r1 ends reasoning at the first and leaves three in content; a "</think>" in content is
    # the very leak this stage repairs, so we remove every tag.
    msg = message(VLLM / "s5x_logit_bias_endthink.body")
    assert (msg["reasoning"], msg["content"]) == ("", CLOSE * 3)
    assert split_reasoning(CLOSE * 4, starts_in_reasoning=True) == ("", "")


def test_no_parser_stream_fed_token_by_token() -> None:
    # s1 (no parser): vLLM streamed the raw text as content, one token a delta, but the constrained
    # decoder chose the tiny model's single "</think>" token, which its detokeniser dropped (the empty
    # delta). With the close tag gone, everything after <think> is reasoning: nothing is lost, but the
    # split needs the tag to reach us (real Qwen3 marks </think> non-special, so it does).
    deltas = [d["content"] for d in stream_deltas(VLLM / "s1_force_regex_think_stream.body") if "content" in d]
    text = "".join(deltas)
    assert text == message(VLLM / "s1_force_regex_think.body")["content"] == "<think>\nI am thinking.\n\n\nHello world"
    pieces = run(deltas)
    assert joined(pieces) == ("I am thinking.\n\n\nHello world", "")
    assert_lossless(text, pieces)
    # With the tag where the regex put it, the same tokens split as the parsers do.
    with_tag = [*deltas[:16], CLOSE, *deltas[16:]]
    assert joined(run(with_tag)) == ("I am thinking.\n", "Hello world")


def test_text_without_tags_is_content_untouched() -> None:
    # s3x_nothink_chat: 32 newlines as content. No tag, so no newline is framing: all kept.
    text = message(VLLM / "s3x_nothink_chat.body")["content"]
    assert text == "\n" * 32
    splitter = ReasoningSplitter()
    assert splitter.feed(text) == [Text("content", text)]
    assert splitter.flush() == []


# ---------------------------------------------------------------------------------------------------
# Every split point

CASES = [
    THINK_RAW,
    "<think>abc</think>Hello",
    "<think>\nI am thinking.\n</thi",
    CLOSE * 4,
    "<think>a</think>\n\nB<think>\nc</think>D",
    "plain text, no tags at all",
    "a < b and c <= d, <div>x</div> <th <thinking> </thin",
    "x<think></think>y<think>\r\n\r\nz",
    "\n\n<think>\n\n</think>\n\n",
    "<<think>>think</think</think>>",
    "中文<think>推理🙂\n</think>\n答案🙂",
    "<think>a <think> b</think>c</think>d",
]


@pytest.mark.parametrize("starts_in_reasoning", [False, True])
@pytest.mark.parametrize("text", CASES)
def test_every_split_point_gives_the_same_answer(text: str, starts_in_reasoning: bool) -> None:
    check_every_split(text, starts_in_reasoning=starts_in_reasoning, pairs=len(text) <= 40)


@pytest.mark.parametrize("starts_in_reasoning", [False, True])
@pytest.mark.parametrize("text", CASES)
def test_only_a_partial_tag_is_ever_held(text: str, starts_in_reasoning: bool) -> None:
    # Stop after any prefix: what flush() still had to give back is a proper prefix of a tag.
    for end in range(len(text) + 1):
        splitter = ReasoningSplitter(starts_in_reasoning=starts_in_reasoning)
        for char in text[:end]:
            splitter.feed(char)
        held = "".join(p.text for p in splitter.flush() if isinstance(p, Text))
        assert len(held) <= MAX_HELD
        assert held == "" or OPEN.startswith(held) or CLOSE.startswith(held)


# ---------------------------------------------------------------------------------------------------
# Hypothesis: random texts of tags, partial tags, newlines, unicode; random cuts

FRAGMENTS = st.sampled_from(
    [
        OPEN,
        CLOSE,
        "<thi",
        "</think",
        "</",
        "<",
        "/",
        ">",
        "think",
        "\n",
        "\n\n",
        "\r\n",
        " ",
        "a",
        "é",
        "中",
        "🙂",
        "<div>",
        " < ",
    ]
)
TEXTS = st.one_of(
    st.lists(FRAGMENTS, max_size=30).map("".join), st.text(max_size=60), st.text(alphabet="<>/think\n ", max_size=60)
)


@examples(200)  # a sample: test_every_split_point_gives_the_same_answer is the exhaustive one
@given(text=TEXTS, starts_in_reasoning=st.booleans(), data=st.data())
def test_random_cuts(text: str, starts_in_reasoning: bool, data: st.DataObject) -> None:
    offsets = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    pieces = run(cut(text, offsets), starts_in_reasoning=starts_in_reasoning)
    assert joined(pieces) == reference(text, starts_in_reasoning=starts_in_reasoning)
    assert joined(pieces) == split_reasoning(text, starts_in_reasoning=starts_in_reasoning)
    assert_lossless(text, pieces, starts_in_reasoning=starts_in_reasoning)


@examples(200)
@given(chunks=st.lists(TEXTS, max_size=8))
def test_random_feeds_custom_tags(chunks: list[str]) -> None:
    # Magistral-style tags: nothing in the machine is specific to <think>.
    chunks = [c.replace("<think>", "[THINK]").replace("</think>", "[/THINK]") for c in chunks]
    text = "".join(chunks)
    pieces = run(chunks, open_tag="[THINK]", close_tag="[/THINK]")
    assert joined(pieces) == reference(text, open_tag="[THINK]", close_tag="[/THINK]")
    assert_lossless(text, pieces, open_tag="[THINK]", close_tag="[/THINK]")


@pytest.mark.parametrize("starts_in_reasoning", [False, True])
@pytest.mark.parametrize("text", ["<think>a|end|\n\nb", "x<think>\n<|end|<thi|en", "|e|end<think>|end|"])
def test_tags_with_different_first_characters(text: str, starts_in_reasoning: bool) -> None:
    # No shared "<": the partial-tag search must look for either tag's first character.
    tags = {"open_tag": OPEN, "close_tag": "|end|"}
    expected = reference(text, starts_in_reasoning=starts_in_reasoning, **tags)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            pieces = run(cut(text, (i, j)), starts_in_reasoning=starts_in_reasoning, **tags)
            assert joined(pieces) == expected, (i, j)
            assert_lossless(text, pieces, starts_in_reasoning=starts_in_reasoning, **tags)


# ---------------------------------------------------------------------------------------------------
# Behaviour, step by step


def test_starts_in_reasoning_without_close_tag() -> None:
    splitter = ReasoningSplitter(starts_in_reasoning=True)
    assert repr(splitter) == "<ReasoningSplitter in-reasoning dropping-newlines held=''>"
    assert splitter.feed("\n") == []  # the template's "<think>\n" framing
    assert splitter.feed("Let me see") == [Text("reasoning", "Let me see")]
    assert splitter.feed(".\n") == [Text("reasoning", ".\n")]
    assert splitter.flush() == []
    assert split_reasoning("Let me see.", starts_in_reasoning=True) == ("Let me see.", "")


def test_starts_in_reasoning_with_close_tag_and_a_repeated_open_tag() -> None:
    # Old Qwen3 / DeepSeek-R1 templates: the model writes <think> itself even though we start inside.
    assert split_reasoning("<think>\nhmm\n</think>\n\nHi", starts_in_reasoning=True) == ("hmm\n", "Hi")
    assert split_reasoning("hmm</think>Hi", starts_in_reasoning=True) == ("hmm", "Hi")
    assert split_reasoning("</think>\n\nHi", starts_in_reasoning=True) == ("", "Hi")


def test_multiple_blocks_keep_their_order() -> None:
    pieces = run(["<think>a</think>\n\nB<think>\nc</think>D"])
    assert pieces == [Text("reasoning", "a"), Text("content", "B"), Text("reasoning", "c"), Text("content", "D")]


def test_close_tag_split_across_four_feeds() -> None:
    splitter = ReasoningSplitter(starts_in_reasoning=True)
    assert splitter.feed("why") == [Text("reasoning", "why")]
    steps = [("<", "'<'"), ("/", "'</'"), ("think", "'</think'")]
    for chunk, held in steps:
        assert splitter.feed(chunk) == []
        assert repr(splitter) == f"<ReasoningSplitter in-reasoning held={held}>"
    assert splitter.feed(">") == []
    assert repr(splitter) == "<ReasoningSplitter in-content dropping-newlines held=''>"
    assert splitter.feed("\n\n") == []
    assert splitter.feed("because") == [Text("content", "because")]
    assert repr(splitter) == "<ReasoningSplitter in-content held=''>"


def test_a_less_than_sign_that_is_no_tag_passes_through() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("a <") == [Text("content", "a ")]
    assert repr(splitter) == "<ReasoningSplitter in-content held='<'>"
    assert splitter.feed(" b") == [Text("content", "< b")]
    assert splitter.feed("<div>x</div>") == [Text("content", "<div>x</div>")]
    assert splitter.feed("<th") == []
    assert splitter.feed("ought>") == [Text("content", "<thought>")]
    assert splitter.feed("x<") == [Text("content", "x")]
    assert splitter.flush() == [Text("content", "<")]
    assert splitter.flush() == []


def test_text_without_tags_goes_out_at_once() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("Hello") == [Text("content", "Hello")]
    assert splitter.feed("") == []
    assert splitter.feed(" world>") == [Text("content", " world>")]
    assert splitter.flush() == []


def test_spaces_after_a_tag_are_kept_only_newlines_are_framing() -> None:
    assert split_reasoning("<think> x </think> y") == (" x ", " y")
    assert split_reasoning("<think>\r\n x</think>\n\n\ty") == (" x", "\ty")


@pytest.mark.parametrize(
    ("open_tag", "close_tag"), [("", "</t>"), ("<t>", ""), ("<t>", "<t>x"), ("a<t>", "<t>"), ("\n<t>", "</t>")]
)
def test_tags_must_be_distinct_and_non_empty(open_tag: str, close_tag: str) -> None:
    with pytest.raises(ValueError, match="tags"):
        ReasoningSplitter(open_tag=open_tag, close_tag=close_tag)
