"""Tests for oaishim.transform.special, .markup and .cleanup, and reading the files (oaishim.engine.tokens).

The tokenizer files below are cut down from Qwen3's and MiniMax-M2's published ones (same keys and
shapes, fewer tokens; MiniMax ids illustrative). The cleanup's expected outputs are written by hand
or computed by a deliberately naive oracle that walks the whole text one position at a time;
a proxy in front of vLLM gives the regression: its regex ate ``<|im_end|>`` and the UI waited forever.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.engine.tokens import load_special_tokens
from oaishim.transform.cleanup import DisplayCleanup
from oaishim.transform.markup import Scanner
from oaishim.transform.special import SpecialTokens, special_tokens_from_gguf


def added(content: str, special: bool) -> dict[str, Any]:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": special,
    }


QWEN3_TOKENIZER_CONFIG: dict[str, Any] = {
    "add_prefix_space": False,
    "added_tokens_decoder": {
        "151643": added("<|endoftext|>", True),
        "151644": added("<|im_start|>", True),
        "151645": added("<|im_end|>", True),
        "151646": added("<|object_ref_start|>", True),
        "151647": added("<|object_ref_end|>", True),
        "151657": added("<tool_call>", False),
        "151658": added("</tool_call>", False),
        "151665": added("<tool_response>", False),
        "151666": added("</tool_response>", False),
        "151667": added("<think>", False),
        "151668": added("</think>", False),
    },
    "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>"],
    "bos_token": None,
    "chat_template": "{%- for message in messages %}…{%- endfor %}",
    "clean_up_tokenization_spaces": False,
    "eos_token": "<|im_end|>",
    "errors": "replace",
    "model_max_length": 131072,
    "pad_token": "<|endoftext|>",
    "split_special_tokens": False,
    "tokenizer_class": "Qwen2Tokenizer",
    "unk_token": None,
}
QWEN3_GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}
QWEN3_SPECIAL = frozenset({"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>"})
QWEN3 = SpecialTokens(QWEN3_SPECIAL, frozenset({"<|im_end|>", "<|endoftext|>"}))


def added_token(token_id: int, content: str, special: bool) -> dict[str, Any]:
    return {"id": token_id, **added(content, special)}


MINIMAX_TOKENIZER_JSON: dict[str, Any] = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        added_token(200000, "]!p~[", True),
        added_token(200019, "]~!b[", True),
        added_token(200020, "[e~[", True),
        added_token(200021, "]!d~[", True),
        added_token(200050, "<think>", False),
        added_token(200051, "</think>", False),
        added_token(200052, "<minimax:tool_call>", False),
        added_token(200053, "</minimax:tool_call>", False),
    ],
    "normalizer": None,
    "model": {"type": "BPE", "vocab": {}, "merges": []},
}
MINIMAX_TOKENIZER_CONFIG: dict[str, Any] = {
    "add_bos_token": False,
    "bos_token": {"__type": "AddedToken", "content": "]~!b[", "special": True},
    "eos_token": {"__type": "AddedToken", "content": "[e~[", "special": True},
    "unk_token": {"__type": "AddedToken", "content": "]!d~[", "special": True},
    "additional_special_tokens": [{"content": "]!p~[", "special": True}, "]~b]"],
    "tokenizer_class": "GPT2Tokenizer",
}
MINIMAX_CONFIG = {"architectures": ["MiniMaxM2ForCausalLM"], "eos_token_id": None}
MINIMAX_GENERATION_CONFIG = {"eos_token_id": 200020, "do_sample": True, "temperature": 1.0}


def write(folder: Path, files: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(orjson.dumps(data))
    return folder


# ---------------------------------------------------------------------------------------------------
# Loading


def test_qwen3_folder(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "Qwen3-8B",
        {"tokenizer_config.json": QWEN3_TOKENIZER_CONFIG, "generation_config.json": QWEN3_GENERATION_CONFIG},
    )
    tokens = load_special_tokens(folder)
    assert tokens == QWEN3
    assert "<think>" not in tokens.special  # special: false in Qwen3: ordinary text, left to the reasoning parser
    assert "<tool_call>" not in tokens.special


def test_qwen3_tokenizer_config_alone(tmp_path: Path) -> None:
    write(tmp_path, {"tokenizer_config.json": QWEN3_TOKENIZER_CONFIG})
    tokens = load_special_tokens(tmp_path / "tokenizer_config.json")
    assert tokens.special == QWEN3_SPECIAL
    assert tokens.end_of_turn == {"<|im_end|>"}  # <|endoftext|> as an end comes only from generation_config


def test_minimax_folder_eos_only_in_generation_config(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "MiniMax-M2",
        {
            "tokenizer.json": MINIMAX_TOKENIZER_JSON,
            "config.json": MINIMAX_CONFIG,
            "generation_config.json": MINIMAX_GENERATION_CONFIG,
        },
    )
    tokens = load_special_tokens(folder)
    assert tokens.special == {"]!p~[", "]~!b[", "[e~[", "]!d~["}
    assert tokens.end_of_turn == {"[e~["}  # id 200020 mapped through tokenizer.json's added tokens


def test_minimax_folder_with_tokenizer_config(tmp_path: Path) -> None:
    folder = write(
        tmp_path,
        {"tokenizer_config.json": MINIMAX_TOKENIZER_CONFIG, "tokenizer.json": MINIMAX_TOKENIZER_JSON},
    )
    tokens = load_special_tokens(folder)
    assert tokens.special == {"]!p~[", "]~!b[", "[e~[", "]!d~[", "]~b]"}  # AddedToken dicts and plain strings
    assert tokens.end_of_turn == {"[e~["}


def test_extra_special_tokens_and_unmapped_ids(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "special_tokens_map.json": {"eos_token": "</s>", "extra_special_tokens": {"image_token": "<image>"}},
            "generation_config.json": {"eos_token_id": [2, 99]},  # no added tokens to map them through
        },
    )
    tokens = load_special_tokens(tmp_path)
    assert tokens == SpecialTokens(frozenset({"</s>", "<image>"}), frozenset({"</s>"}))


def test_folder_without_tokenizer_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_special_tokens(tmp_path)


GGUF_QWEN3: dict[str, Any] = {
    "general.architecture": "qwen3",
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.tokens": ["!", "Hello", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
    "tokenizer.ggml.token_type": [1, 1, 3, 3, 3, 4, 4],
    "tokenizer.ggml.eos_token_id": 4,
    "tokenizer.ggml.padding_token_id": 2,
    "tokenizer.ggml.bos_token_id": 2,
}


def test_gguf_metadata() -> None:
    tokens = special_tokens_from_gguf(GGUF_QWEN3)
    assert tokens.special == {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
    assert tokens.end_of_turn == {"<|im_end|>"}


def test_gguf_eot_and_string_ids() -> None:
    """llama-cpp-python's ``Llama.metadata`` gives ids as strings; a named id makes a token special."""
    metadata = {
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "hi", "<|eot_id|>", "<|eom_id|>"],
        "tokenizer.ggml.token_type": ["2", "3", "3", "1", "1", "3"],
        "tokenizer.ggml.unknown_token_id": "0",
        "tokenizer.ggml.eos_token_id": "2",
        "tokenizer.ggml.eot_token_id": "4",
        "tokenizer.ggml.eom_token_id": 5,
        "tokenizer.ggml.padding_token_id": 999,  # out of range: ignored
    }
    tokens = special_tokens_from_gguf(metadata)
    assert tokens.special == {"<unk>", "<s>", "</s>", "<|eot_id|>", "<|eom_id|>"}
    assert tokens.end_of_turn == {"</s>", "<|eot_id|>", "<|eom_id|>"}


def test_gguf_without_tokens() -> None:
    assert special_tokens_from_gguf({"general.architecture": "llama"}) == SpecialTokens()


def test_from_config_and_union() -> None:
    configured = SpecialTokens.from_config(special=["<|user|>", ""], end_of_turn=["<|end|>"])
    assert configured.special == {"<|user|>", "<|end|>"}  # an end-of-turn token is always protected
    assert configured.end_of_turn == {"<|end|>"}
    both = QWEN3.union(configured)
    assert both.end_of_turn == {"<|im_end|>", "<|endoftext|>", "<|end|>"}
    assert both.special == QWEN3_SPECIAL | {"<|user|>", "<|end|>"}


# ---------------------------------------------------------------------------------------------------
# Shared helpers


def split_at(text: str, offsets: list[int]) -> list[str]:
    cuts = [0, *sorted(offsets), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


def occurrences(text: str, tokens: frozenset[str]) -> list[tuple[int, int]]:
    return [(m.start(), m.start() + len(t)) for t in tokens for m in re.finditer(re.escape(t), text)]


def assert_whole(pieces: list[str], tokens: frozenset[str]) -> None:
    """No token occurrence in the joined output crosses a boundary between output pieces."""
    text = "".join(pieces)
    cuts = set(itertools.accumulate(len(p) for p in pieces))
    for start, end in occurrences(text, tokens):
        assert not any(start < c < end for c in cuts), (text[start:end], pieces)


# ---------------------------------------------------------------------------------------------------
# Scanner: protected tokens only, joined as text


class Holder:
    """The scanner with only protected tokens, its parts joined: text out, no token cut in two."""

    def __init__(self, tokens: SpecialTokens | list[str]) -> None:
        self.scanner = Scanner(tokens.special if isinstance(tokens, SpecialTokens) else tokens)

    @property
    def held(self) -> str:
        return self.scanner.buf

    def feed(self, text: str) -> str:
        return "".join(part for _, part in self.scanner.feed(text))

    def flush(self) -> str:
        return "".join(part for _, part in self.scanner.flush())


def hold(pieces: list[str], tokens: SpecialTokens | list[str] = QWEN3) -> list[str]:
    holder = Holder(tokens)
    return [holder.feed(p) for p in pieces] + [holder.flush()]


def test_holder_keeps_a_token_whole() -> None:
    assert hold(["ab<|im", "_end|>c"]) == ["ab", "<|im_end|>c", ""]
    assert hold(["x<|", "im_", "start|>user"]) == ["x", "", "<|im_start|>user", ""]
    assert hold(["a <| b"]) == ["a <| b", ""]  # "<| b" cannot become a token: not held


def test_holder_releases_a_false_start() -> None:
    holder = Holder(QWEN3)
    assert holder.feed("see <|im") == "see "
    assert holder.held == "<|im"
    assert holder.feed("age|>") == "<|image|>"  # not a token of this model
    assert holder.feed("tail <|endof") == "tail "
    assert holder.flush() == "<|endof"  # the stream ended: it was text after all


def test_holder_waits_when_a_token_could_still_grow() -> None:
    assert hold(["<a>", "c"], ["<a>", "<a>b"]) == ["", "<a>c", ""]
    assert hold(["<a>", "b!"], ["<a>", "<a>b"]) == ["", "<a>b!", ""]


HOLDER_TEXTS = [
    "Hi<|im_end|>",
    "<|im_start|>assistant\n你好<|im_end|><|endoftext|>",
    "a<|im_<|im_end|>b<|endoftext",
    "<|object_ref_start|>x<|object_ref_end|>",
]


@pytest.mark.parametrize("text", HOLDER_TEXTS)
def test_holder_every_split_point(text: str) -> None:
    for a, b in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        pieces = hold(split_at(text, [a, b]))
        assert "".join(pieces) == text, (a, b)
        assert_whole(pieces, QWEN3.special)


FRAGMENTS = ["<|", "|>", "<", "im_", "end", "start", "<|im_end|>", "<|endoftext|>", "a", "你", "\n", "|"]


@examples(300)
@given(
    parts=st.lists(st.sampled_from(FRAGMENTS), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_holder_random_splits(parts: list[str], cuts: list[int]) -> None:
    text = "".join(parts)
    holder = Holder(QWEN3)
    longest = max(len(t) for t in QWEN3.special)
    pieces = []
    for piece in split_at(text, [min(c, len(text)) for c in cuts]):
        pieces.append(holder.feed(piece))
        assert len(holder.held) <= longest - 1
    pieces.append(holder.flush())
    assert "".join(pieces) == text
    assert_whole(pieces, QWEN3.special)


# ---------------------------------------------------------------------------------------------------
# DisplayCleanup


def oracle(
    text: str,
    protected: frozenset[str],
    end_of_turn: frozenset[str],
    strip: frozenset[str] = frozenset(),
    keep_end_of_turn: bool = True,
) -> tuple[str, bool]:
    """Walk the whole text: the longest token here protected? keep it; to strip? drop it; else a character."""
    out, saw, i = [], False, 0
    while i < len(text):
        token = max((t for t in protected | strip if text.startswith(t, i)), key=len, default=None)
        if token is None:
            out.append(text[i])
            i += 1
            continue
        if token in protected:
            saw = saw or token in end_of_turn
            if keep_end_of_turn or token not in end_of_turn:
                out.append(token)
        i += len(token)
    return "".join(out), saw


def clean(pieces: list[str], tokens: SpecialTokens = QWEN3, **options: Any) -> tuple[list[str], DisplayCleanup]:
    cleanup = DisplayCleanup(tokens, **options)
    return [cleanup.feed(p) for p in pieces] + [cleanup.flush()], cleanup


LLAMA2 = SpecialTokens.from_config(special=["<s>"], end_of_turn=["</s>"])
CLEANUP_CASES: list[tuple[str, SpecialTokens, str, dict[str, Any], str, bool]] = [
    # (label, tokens, text, options, expected display text, saw_end_of_turn)
    ("text shaped like a tag is text", QWEN3, "Hi <|foo|>there <||> <|", {}, "Hi <|foo|>there <||> <|", False),
    ("named markup stripped", QWEN3, "<s>Hi</s>", {"markup": ["<s>", "</s>"]}, "Hi", False),
    (
        "all specials kept by default",
        QWEN3,
        "<|im_start|>assistant\nHi<|im_end|>",
        {},
        "<|im_start|>assistant\nHi<|im_end|>",
        True,
    ),
    (
        "protect end_of_turn only: the other specials are stripped",
        QWEN3,
        "<|im_start|>assistant\nHi<|im_end|> <|object_ref_start|>",
        {"protect": "end_of_turn"},
        "assistant\nHi<|im_end|> ",
        True,
    ),
    ("end of turn removed from display", QWEN3, "Hi<|im_end|>", {"keep_end_of_turn": False}, "Hi", True),
    (
        "<think> is not markup here",
        QWEN3,
        "<think>hmm</think>ok",
        {"protect": "end_of_turn"},
        "<think>hmm</think>ok",
        False,
    ),
    (
        "prose with < passes",
        QWEN3,
        "if a < b and c<d then |x|",
        {"protect": "end_of_turn"},
        "if a < b and c<d then |x|",
        False,
    ),
    ("only a whole named tag is stripped", QWEN3, "<|a </s> b|>c", {"markup": ["</s>"]}, "<|a  b|>c", False),
    ("one pass: what stripping joins is not scanned again", QWEN3, "<|x|<|x|>>", {"markup": ["<|x|>"]}, "<|x|>", False),
    (
        "named markup never takes a protected token",
        SpecialTokens.from_config(end_of_turn=["[e~["]),
        "x[e~[y",
        {"markup": ["[e~["]},
        "x[e~[y",
        True,
    ),
    (
        "MiniMax end marker kept",
        SpecialTokens.from_config(special=["]~b]"], end_of_turn=["[e~["]),
        "]~b]ai\nDone.[e~[",
        {},
        "]~b]ai\nDone.[e~[",
        True,
    ),
    ("no markup: only the signal", QWEN3, "<|foo|>Hi<|im_end|>", {}, "<|foo|>Hi<|im_end|>", True),
    ("Llama-2 </s> is protected", LLAMA2, "<s>Hi<|x|></s>", {"protect": "end_of_turn"}, "Hi<|x|></s>", True),
]


def strip_set(tokens: SpecialTokens, options: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    protected = tokens.end_of_turn if options.get("protect") == "end_of_turn" else tokens.special
    return protected, (tokens.special - protected) | frozenset(options.get("markup", ()))


@pytest.mark.parametrize(
    ("tokens", "text", "options", "expected", "saw"), [c[1:] for c in CLEANUP_CASES], ids=[c[0] for c in CLEANUP_CASES]
)
def test_cleanup_cases(tokens: SpecialTokens, text: str, options: dict[str, Any], expected: str, saw: bool) -> None:
    protected, strip = strip_set(tokens, options)
    assert oracle(text, protected, tokens.end_of_turn, strip, options.get("keep_end_of_turn", True)) == (expected, saw)
    for a in range(len(text) + 1):
        pieces, cleanup = clean(split_at(text, [a]), tokens, **options)
        assert ("".join(pieces), cleanup.saw_end_of_turn) == (expected, saw), a


def test_cleanup_records_what_it_stripped() -> None:
    _, cleanup = clean(["<s>a<|x", "|>b<|im_start|>"], markup=["<s>", "<|x|>"], protect="end_of_turn")
    assert cleanup.stripped == ["<s>", "<|x|>", "<|im_start|>"]


def test_cleanup_holds_only_possible_tokens() -> None:
    cleanup = DisplayCleanup(QWEN3, protect="end_of_turn")
    assert cleanup.feed("2 < 3 and x <") == "2 < 3 and x "
    assert cleanup.held == "<"
    assert cleanup.feed(" y") == "< y"
    assert cleanup.feed("ok <|im_st") == "ok "
    assert cleanup.feed("art|") == ""
    assert cleanup.feed(">!") == "!"
    assert cleanup.feed("<|fo") == "<|fo"  # no token starts so: out at once
    assert cleanup.feed("</") == "</"
    assert cleanup.stripped == ["<|im_start|>"]
    assert repr(cleanup) == "<DisplayCleanup streaming, holding ''>"


def test_cleanup_of_named_markup_at_every_two_splits() -> None:
    text = "[INST] hi [/INST] Hello[/INST]"
    markup = frozenset({"[INST]", "[/INST]"})
    assert oracle(text, QWEN3.special, QWEN3.end_of_turn, markup) == (" hi  Hello", False)
    for a, b in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        pieces, _ = clean(split_at(text, [a, b]), markup=markup)
        assert "".join(pieces) == " hi  Hello", (a, b)


CLEANUP_FRAGMENTS = [*FRAGMENTS, "<s>", "</s>", "s>", "</", "<|x|>", "<||>", "<|", "|>", "[e~[", "[e~", "~["]
MIXED = QWEN3.union(SpecialTokens.from_config(end_of_turn=["[e~["]))


@examples(250)  # a sample: test_cleanup_of_named_markup_at_every_two_splits is the exhaustive one
@given(
    parts=st.lists(st.sampled_from(CLEANUP_FRAGMENTS), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10),
    protect=st.sampled_from(["special", "end_of_turn"]),
    markup=st.sampled_from([(), ("<s>", "</s>", "<|x|>")]),
    keep_end=st.booleans(),
)
def test_cleanup_random_splits(
    parts: list[str], cuts: list[int], protect: str, markup: tuple[str, ...], keep_end: bool
) -> None:
    text = "".join(parts)
    cleanup = DisplayCleanup(MIXED, markup=markup, protect=protect, keep_end_of_turn=keep_end)  # type: ignore[arg-type]
    protected, strip = strip_set(MIXED, {"protect": protect, "markup": markup})
    bound = max(map(len, protected | strip)) - 1
    pieces = []
    for piece in split_at(text, [min(c, len(text)) for c in cuts]):
        pieces.append(cleanup.feed(piece))
        assert len(cleanup.held) <= bound
    pieces.append(cleanup.flush())
    expected = oracle(text, protected, MIXED.end_of_turn, strip, keep_end)
    assert ("".join(pieces), cleanup.saw_end_of_turn) == expected
    assert len("".join(pieces)) + sum(map(len, cleanup.stripped)) <= len(text)
    if keep_end:  # nothing is lost: only the tokens it reports were removed
        assert len("".join(pieces)) + sum(map(len, cleanup.stripped)) == len(text)


# ---------------------------------------------------------------------------------------------------
# The proxy whose cleanup ate the end of turn, and the UI waited forever

PROXY_CLEANUP_REGEX = r"<\|[^|]*\|>|</?s>"  # the proxy's clean_model_output, verbatim


def proxy_clean_model_output(text: str) -> str:
    text = re.sub(PROXY_CLEANUP_REGEX, "", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


PROXY_STREAM = ["你好", "！我是助手，", "有什么可以帮你？", "<|im_", "end|>"]


def test_proxy_cleanup_the_buggy_regex_eats_the_end_of_turn() -> None:
    text = "".join(PROXY_STREAM)
    assert proxy_clean_model_output(text) == "你好！我是助手，有什么可以帮你？"  # no <|im_end|>: the UI waits
    # The same pattern also eats text the model wrote; the cleanup strips only whole tokens.
    assert proxy_clean_model_output('{"city": "<||>"}') == '{"city": ""}'
    pieces, _ = clean(['{"city": "<||>"}'], protect="end_of_turn")
    assert "".join(pieces) == '{"city": "<||>"}'


def test_proxy_cleanup_cleanup_keeps_the_token_whole_and_signals_the_end() -> None:
    pieces, cleanup = clean(PROXY_STREAM)
    assert pieces == ["你好", "！我是助手，", "有什么可以帮你？", "", "<|im_end|>", ""]
    assert cleanup.saw_end_of_turn
    assert cleanup.end_token == "<|im_end|>"
    assert repr(cleanup) == "<DisplayCleanup ended by '<|im_end|>', holding ''>"


def test_proxy_cleanup_clean_display_with_the_signal_apart() -> None:
    """The other fix: a clean display text, the end carried as a flag next to it."""
    pieces, cleanup = clean(PROXY_STREAM, keep_end_of_turn=False)
    assert "".join(pieces) == "你好！我是助手，有什么可以帮你？"
    assert cleanup.saw_end_of_turn


@pytest.mark.parametrize("keep_end", [True, False])
def test_proxy_cleanup_every_split_point(keep_end: bool) -> None:
    text = "".join(PROXY_STREAM)
    expected = text if keep_end else text.removesuffix("<|im_end|>")
    for a, b in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        pieces, cleanup = clean(split_at(text, [a, b]), keep_end_of_turn=keep_end)
        assert "".join(pieces) == expected, (a, b)
        assert cleanup.saw_end_of_turn, (a, b)
        if keep_end:
            assert sum("<|im_end|>" in p for p in pieces) == 1, (a, b)  # whole, in one piece
