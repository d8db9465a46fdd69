"""Tests for oaishim.transform.stops.

Expected outputs are written by hand from OpenAI's ``stop`` semantics (openai-wire-format.md §2: up
to 4 strings, the text ends before the stop) and vLLM's ``include_stop_str_in_output`` (V-29),
or computed by a deliberately naive oracle that grows the text one character at a time, the way a
generator would, and stops at the first moment any stop string is a suffix.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.transform.stops import StopMatcher


def oracle(text: str, stops: list[str], include_stop: bool = False) -> tuple[str, str | None]:
    """Grow the text character by character; the first time stops end it, the longest one wins."""
    stops = [s for s in stops if s]
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            stop = max(ending, key=len)
            return (text[:end] if include_stop else text[: end - len(stop)]), stop
    return text, None


def run(pieces: list[str], stops: list[str], include_stop: bool = False) -> tuple[list[str], StopMatcher]:
    matcher = StopMatcher(stops, include_stop=include_stop)
    out = [matcher.feed(p) for p in pieces]
    out.append(matcher.flush())
    return out, matcher


def split_at(text: str, offsets: list[int]) -> list[str]:
    cuts = [0, *sorted(offsets), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


# ---------------------------------------------------------------------------------------------------
# Hand-written OpenAI semantics

CASES: list[tuple[str, list[str], list[str], bool, str, str | None]] = [
    # (label, stops, pieces, include_stop, expected output, expected hit)
    ("stop in the middle", ["\n\n"], ["Para one.\n\nPara two."], False, "Para one.", "\n\n"),
    ("stop across a chunk boundary", ["END"], ["alpha E", "N", "D omega"], False, "alpha ", "END"),
    ("stop at the very start", ["Hi"], ["Hi there"], False, "", "Hi"),
    ("stop is the whole text", ["done"], ["do", "ne"], False, "", "done"),
    ("first of two stops wins", ["xyz", "cat"], ["the cat and xyz"], False, "the ", "cat"),
    ("second listed but earlier", ["cat", "the"], ["a the cat"], False, "a ", "the"),
    ("same start: shorter completes first", ["ab", "abc"], ["xabcd"], False, "x", "ab"),
    ("same start, include_stop keeps the shorter", ["abc", "ab"], ["xa", "bcd"], True, "xab", "ab"),
    ("same end: the longer wins", ["b", "ab"], ["xab"], False, "x", "ab"),
    ("overlapping prefix: aab in aaab", ["aab"], ["aaab"], False, "a", "aab"),
    ("aab in aaab, one char at a time", ["aab"], ["a", "a", "a", "b"], False, "a", "aab"),
    ("partial stop never completes: flushed", ["STOP"], ["go ST", "O"], False, "go STO", None),
    ("partial then mismatch", ["STOP"], ["ST", "x", "STOP"], False, "STx", "STOP"),
    ("include_stop keeps the string", ["</answer>"], ["42</ans", "wer> tail"], True, "42</answer>", "</answer>"),
    ("text after the stop is dropped", ["."], ["One. Two. ", "Three."], False, "One", "."),
    ("empty stop strings are ignored", ["", "z"], ["abc"], False, "abc", None),
    ("no stops: pass-through", [], ["abc", "def"], False, "abcdef", None),
    ("multi-byte text and stop", ["。"], ["你好", "。再见"], False, "你好", "。"),
    ("stop spanning three pieces", ["<|stop|>"], ["a<|", "sto", "p|>b"], False, "a", "<|stop|>"),
]


@pytest.mark.parametrize(
    ("stops", "pieces", "include", "expected", "hit"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_openai_semantics(stops: list[str], pieces: list[str], include: bool, expected: str, hit: str | None) -> None:
    out, matcher = run(pieces, stops, include)
    assert "".join(out) == expected
    assert matcher.hit == hit
    assert oracle("".join(pieces), stops, include) == (expected, hit)


def test_after_a_hit_nothing_more_comes_out() -> None:
    matcher = StopMatcher(["|"])
    assert matcher.feed("a|b") == "a"
    assert matcher.hit == "|"
    assert matcher.feed("more text") == ""
    assert matcher.feed("|") == ""
    assert matcher.flush() == ""
    assert "stopped by '|'" in repr(matcher)


def test_safe_text_is_emitted_at_once() -> None:
    matcher = StopMatcher(["STOP", "\n\n"])
    assert matcher.feed("hello wor") == "hello wor"  # no character can start a stop
    assert matcher.feed("ld S") == "ld "
    assert matcher.held == "S"
    assert matcher.feed("T") == ""
    assert matcher.held == "ST"
    assert matcher.feed("ay\n") == "STay"
    assert matcher.held == "\n"
    assert "holding '\\n'" in repr(matcher)


def test_holds_only_a_real_prefix_even_when_a_longer_suffix_repeats() -> None:
    matcher = StopMatcher(["abcabd"])
    assert matcher.feed("xabcabc") == "xabc"  # "abc" could still be "abcabd"; "abcabc" cannot
    assert matcher.held == "abc"


def test_duplicates_are_one_stop() -> None:
    assert StopMatcher(["x", "x", ""]).stops == ("x",)


# ---------------------------------------------------------------------------------------------------
# Splitting is invisible

SPLIT_TEXTS: list[tuple[str, list[str]]] = [
    ("Para one.\n\nPara two.", ["\n\n"]),
    ("the cat sat on the mat", ["mat", "cat sat"]),
    ("aaab", ["aab"]),
    ("xabcd", ["ab", "abc"]),
    ("xabcd", ["abc", "b"]),
    ("go STO", ["STOP"]),
    ("ab<|im_end|>cd", ["<|im_end|>", "<|endoftext|>"]),
    ("你好。再见", ["。再", "见"]),
    ("abababac", ["ababac", "bac"]),
]


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize(("text", "stops"), SPLIT_TEXTS)
def test_every_split_point(text: str, stops: list[str], include: bool) -> None:
    whole, matcher = run([text], stops, include)
    expected = ("".join(whole), matcher.hit)
    assert expected == oracle(text, stops, include)
    for a in range(len(text) + 1):
        out, m = run(split_at(text, [a]), stops, include)
        assert ("".join(out), m.hit) == expected, a
    for a, b in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        out, m = run(split_at(text, [a, b]), stops, include)
        assert ("".join(out), m.hit) == expected, (a, b)


def test_one_character_at_a_time() -> None:
    text = "a b c STO STOP d"
    out, matcher = run(list(text), ["STOP"])
    assert "".join(out) == "a b c STO "
    assert matcher.hit == "STOP"


@examples(200)  # a sample: test_every_split_point is the exhaustive one
@given(
    text=st.text(alphabet="abc.", max_size=40),
    stops=st.lists(st.text(alphabet="abc.", max_size=5), max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    include=st.booleans(),
)
def test_random_splits_match_the_oracle(text: str, stops: list[str], cuts: list[int], include: bool) -> None:
    out, matcher = run(split_at(text, [min(c, len(text)) for c in cuts]), stops, include)
    assert ("".join(out), matcher.hit) == oracle(text, stops, include)


# ---------------------------------------------------------------------------------------------------
# The holdback bound


def longest_partial_suffix(text: str, stops: list[str]) -> str:
    for k in range(len(text), 0, -1):
        if any(len(s) > k and s.startswith(text[-k:]) for s in stops):
            return text[-k:]
    return ""


@examples(300)
@given(
    pieces=st.lists(st.text(alphabet="ab.", max_size=6), max_size=10),
    stops=st.lists(st.text(alphabet="ab.", min_size=1, max_size=6), min_size=1, max_size=4),
)
def test_holds_only_the_longest_partial_stop(pieces: list[str], stops: list[str]) -> None:
    matcher = StopMatcher(stops)
    assert matcher.max_hold == max(len(s) for s in stops) - 1
    seen = emitted = ""
    for piece in pieces:
        seen += piece
        emitted += matcher.feed(piece)
        if matcher.hit is not None:
            break
        assert len(matcher.held) <= matcher.max_hold
        assert emitted + matcher.held == seen
        assert matcher.held == longest_partial_suffix(seen, stops)


def test_long_text_is_fast() -> None:
    """str.find, not a character loop: a megabyte with many near-misses passes in one go."""
    matcher = StopMatcher(["<|stop|>", "\n\nUser:", "###"])
    text = "<|sto ##\n\nUse " * 80_000
    assert matcher.feed(text) + matcher.flush() == text
