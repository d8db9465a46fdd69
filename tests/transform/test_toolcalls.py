"""Tests for oaishim.transform.toolcalls.

Expected calls come from real recordings where we have them (vLLM 0.32's hermes parser on the exact
raw text its regex forced; llama.cpp's arguments kept verbatim), and otherwise are written by hand
from the formats the model families document (module docstring). The streaming properties are
checked at every split point and with random multi-point splits: the content text, the calls'
names and their joined arguments never depend on how the text arrived.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.transform.pieces import CallArgs, CallStart, Piece, Text
from oaishim.transform.toolcalls import ALL_FORMATS, ToolCallParser, ToolFormat, parse_tool_calls

RECORDED = Path(__file__).parents[1] / "fixtures" / "recorded"
Result = tuple[str, list[tuple[str, str]]]


def run(chunks: list[str], formats: tuple[ToolFormat, ...] = ALL_FORMATS, names: tuple[str, ...] = ()) -> Result:
    """Feed the chunks, flush; the content text and the (name, joined arguments) of each call."""
    parser = ToolCallParser(formats, tool_names=names)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += parser.feed(chunk)
    pieces += parser.flush()
    check_order(pieces)
    calls = [(p.name, "") for p in pieces if isinstance(p, CallStart)]
    for p in pieces:
        if isinstance(p, CallArgs):
            calls[p.index] = (calls[p.index][0], calls[p.index][1] + p.text)
    assert parser.calls_made == len(calls)
    return "".join(p.text for p in pieces if isinstance(p, Text)), calls


def check_order(pieces: list[Piece]) -> None:
    """Calls are numbered 0, 1, 2…, each has a call_ id, and its arguments come after it, before the next."""
    started = -1
    for piece in pieces:
        if isinstance(piece, CallStart):
            assert piece.index == started + 1
            assert piece.id.startswith("call_") and len(piece.id) > 5
            assert piece.name
            started = piece.index
        elif isinstance(piece, CallArgs):
            assert piece.index == started and piece.text
        else:
            assert piece.kind == "content" and piece.text


def split_at(text: str, offsets: list[int]) -> list[str]:
    cuts = [0, *sorted(min(o, len(text)) for o in offsets), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


def assert_calls(got: list[tuple[str, str]], want: list[tuple[str, Any]]) -> None:
    """Names equal; arguments equal as JSON (a dict) or exactly (a str)."""
    assert [name for name, _ in got] == [name for name, _ in want]
    for (_, args), (_, expected) in zip(got, want, strict=True):
        if isinstance(expected, str):
            assert args == expected
        else:
            assert json.loads(args) == expected


# ---------------------------------------------------------------------------------------------------
# Real recordings


def _regex_literal(regex: str) -> str:
    """The one text a regex of escaped literals matches (the recording's structured_outputs.regex)."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), regex)


def _stream_calls(body: str) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for line in body.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            for call in choice["delta"].get("tool_calls") or []:
                entry = calls.setdefault(call["index"], ["", ""])
                entry[0] += call["function"].get("name") or ""
                entry[1] += call["function"].get("arguments") or ""
    return [(name, args) for name, args in calls.values()]


def test_vllm_hermes_recording() -> None:
    """vLLM 0.32 forced this exact text with a regex and its hermes parser read it; we read the same."""
    base = RECORDED / "vllm-0.32-cpu"
    request = json.loads((base / "s3x_nothink_tool_regex.req.json").read_text())
    raw = _regex_literal(request["structured_outputs"]["regex"])
    assert raw == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    message = json.loads((base / "s3x_nothink_tool_regex.body").read_text())["choices"][0]["message"]
    vllm = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    vllm_stream = _stream_calls((base / "s3x_nothink_tool_regex_stream.body").read_text())
    assert [(n, json.loads(a)) for n, a in vllm_stream] == vllm

    content, calls = parse_tool_calls(raw)
    assert content is None and message["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == vllm
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    streamed = run([raw[i : i + 3] for i in range(0, len(raw), 3)])
    assert streamed == (content or "", [(c["function"]["name"], c["function"]["arguments"]) for c in calls])


def test_llamacpp_arguments_kept_verbatim() -> None:
    """llama.cpp hands the arguments text on as the model wrote it, odd whitespace and all; so do we.

    That request stopped at ``</tool_call>`` (a stop string), so the text ends without it.
    """
    body = json.loads((RECORDED / "llamacpp-server" / "ls.chat_tools_forced.body").read_text())
    call = body["choices"][0]["message"]["tool_calls"][0]["function"]
    raw = '<tool_call>\n{"name": "get_weather", "arguments": ' + call["arguments"] + "}\n"
    assert run([raw]) == ("", [(call["name"], call["arguments"])])


# ---------------------------------------------------------------------------------------------------
# Hand-written cases: (label, text, formats, tool_names, content, calls)

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
H = f"<tool_call>\n{WEATHER}\n</tool_call>"
CASES: list[tuple[str, str, tuple[ToolFormat, ...], tuple[str, ...], str, list[tuple[str, Any]]]] = [
    # hermes
    ("hermes: one call", H, ALL_FORMATS, (), "", [("get_weather", {"city": "Paris"})]),
    (
        "hermes: several calls, whitespace between and after dropped",
        '\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\n',
        ALL_FORMATS,
        (),
        "",
        [("a", {"x": 1}), ("b", {})],
    ),
    (
        "hermes: text before stays",
        "Let me check.\n" + H,
        ALL_FORMATS,
        (),
        "Let me check.\n",
        [("get_weather", {"city": "Paris"})],
    ),
    ("hermes: text after stays", H + "\n\nDone.", ALL_FORMATS, (), "\n\nDone.", [("get_weather", {"city": "Paris"})]),
    ("hermes: text between", H + " and " + H, ALL_FORMATS, (), " and ", [("get_weather", {"city": "Paris"})] * 2),
    (
        "hermes: arguments as a JSON string",
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("f", '{"a": [1, 2]}')],
    ),
    (
        "hermes: parameters key, name after it",
        '<tool_call>{"parameters": {"q": "x"}, "name": "search"}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("search", '{"q": "x"}')],
    ),
    ("hermes: no arguments is {}", '<tool_call>{"name": "now"}</tool_call>', ALL_FORMATS, (), "", [("now", "{}")]),
    (
        "hermes: null arguments is {}",
        '<tool_call>{"name": "now", "arguments": null}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("now", "{}")],
    ),
    (
        "hermes: other keys skipped",
        '<tool_call>{"id": 7, "name": "f", "arguments": {}}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("f", "{}")],
    ),
    (
        "hermes: markup inside a string is data",
        '<tool_call>{"name": "f", "arguments": {"s": "</tool_call><tool_call>\\"}"}}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("f", {"s": '</tool_call><tool_call>"}'})],
    ),
    (
        "hermes: unicode",
        '<tool_call>{"name": "météo", "arguments": {"ville": "Zürich \\u00e9"}}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("météo", {"ville": "Zürich é"})],
    ),
    (
        "hermes: end tag cut off by a stop string",
        '<tool_call>{"name": "f", "arguments": {"a": 1}}\n</tool_',
        ALL_FORMATS,
        (),
        "",
        [("f", '{"a": 1}')],
    ),
    # minimax
    (
        "minimax: typed values",
        '<minimax:tool_call>\n<invoke name="f">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">3</parameter><parameter name="metric">true</parameter>'
        '<parameter name="opts">{"a": [1, 2.5]}</parameter><parameter name="none">null</parameter>'
        '<parameter name="note">\n  two words \n</parameter><parameter name="quoted">"x"</parameter>'
        '<parameter name="zip">75001</parameter><parameter name="nan">NaN</parameter>\n</invoke>\n</minimax:tool_call>',
        ALL_FORMATS,
        (),
        "",
        [
            (
                "f",
                {
                    "city": "Paris",
                    "days": 3,
                    "metric": True,
                    "opts": {"a": [1, 2.5]},
                    "none": None,
                    "note": "two words",
                    "quoted": '"x"',
                    "zip": 75001,
                    "nan": "NaN",
                },
            )
        ],
    ),
    (
        "minimax: several invokes in a block, text before, no parameters",
        "Checking.\n<minimax:tool_call>\n<invoke name=\"a\">\n<parameter name='k'>v</parameter>\n</invoke>\n"
        "<invoke name=b></invoke>\n</minimax:tool_call>",
        ALL_FORMATS,
        (),
        "Checking.\n",
        [("a", '{"k": "v"}'), ("b", "{}")],
    ),
    (
        "minimax: two blocks",
        '<minimax:tool_call><invoke name="a"></invoke></minimax:tool_call>\n'
        '<minimax:tool_call><invoke name="b"></invoke></minimax:tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("a", "{}"), ("b", "{}")],
    ),
    # llama3
    (
        "llama3: parameters",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        ALL_FORMATS,
        (),
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "llama3: python tag, arguments, two calls joined by ;",
        '<|python_tag|>{"name": "a", "arguments": {"x": 1}}; {"name": "b", "parameters": {}}',
        ALL_FORMATS,
        (),
        "",
        [("a", {"x": 1}), ("b", {})],
    ),
    (
        "llama3: a tool name given",
        '\n{"name": "get_weather", "parameters": {}}',
        ALL_FORMATS,
        ("get_weather",),
        "",
        [("get_weather", {})],
    ),
    (
        "llama3: text after the call",
        '{"name": "f", "parameters": {}} I called f.',
        ALL_FORMATS,
        (),
        " I called f.",
        [("f", {})],
    ),
    # mistral
    (
        "mistral: v3 array with ids",
        '[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}, "id": "abcDEF123"}, {"name": "b", "arguments": {}, "id": "xyzXYZ789"}]',
        ALL_FORMATS,
        (),
        "",
        [("a", {"x": 1}), ("b", {})],
    ),
    (
        "mistral: v13 name[ARGS], two calls",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Zürich", "unit": "c"}[TOOL_CALLS]search[ARGS]{"query": "café \\"best\\"", "filters": {"tags": ["a", "b"], "max": 3}}',
        ALL_FORMATS,
        (),
        "",
        [
            ("get_weather", {"city": "Zürich", "unit": "c"}),
            ("search", {"query": 'café "best"', "filters": {"tags": ["a", "b"], "max": 3}}),
        ],
    ),
    (
        "mistral: v11 with [CALL_ID], text before and after",
        'Sure. [TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "Bern"} Done.',
        ALL_FORMATS,
        (),
        "Sure.  Done.",
        [("get_weather", {"city": "Bern"})],
    ),
    # given back: not calls, or broken before the name went out
    (
        "not a call: a json_object answer",
        '{"answer": 42, "name": "x"}',
        ALL_FORMATS,
        (),
        '{"answer": 42, "name": "x"}',
        [],
    ),
    (
        "not a call: a name and other keys",
        '{"name": "Bob", "age": 3}',
        ALL_FORMATS,
        (),
        '{"name": "Bob", "age": 3}',
        [],
    ),
    (
        "not a call: a name not offered",
        '{"name": "Bob", "parameters": {}}',
        ALL_FORMATS,
        ("f",),
        '{"name": "Bob", "parameters": {}}',
        [],
    ),
    (
        "not a call: JSON after text",
        'Here: {"name": "f", "parameters": {}}',
        ALL_FORMATS,
        (),
        'Here: {"name": "f", "parameters": {}}',
        [],
    ),
    (
        "not a call: llama3 not enabled",
        '{"name": "f", "parameters": {}}',
        ("hermes",),
        (),
        '{"name": "f", "parameters": {}}',
        [],
    ),
    (
        "not a call: format not enabled",
        '[TOOL_CALLS]f[ARGS]{"a": 1}',
        ("hermes",),
        (),
        '[TOOL_CALLS]f[ARGS]{"a": 1}',
        [],
    ),
    ("not a call: a whitespace-only message", " \n ", ALL_FORMATS, (), " \n ", []),
    (
        "malformed: bad JSON",
        '<tool_call>{"nam: 1}</tool_call> after',
        ALL_FORMATS,
        (),
        '<tool_call>{"nam: 1}</tool_call> after',
        [],
    ),
    (
        "malformed: no name",
        '<tool_call>{"arguments": {}}</tool_call>',
        ALL_FORMATS,
        (),
        '<tool_call>{"arguments": {}}</tool_call>',
        [],
    ),
    (
        "malformed: name not a string",
        '<tool_call>{"name": 5}</tool_call>',
        ALL_FORMATS,
        (),
        '<tool_call>{"name": 5}</tool_call>',
        [],
    ),
    ("malformed: not an object", "<tool_call>hello</tool_call>", ALL_FORMATS, (), "<tool_call>hello</tool_call>", []),
    (
        "malformed: arguments a list",
        '<tool_call>{"arguments": [1], "name": "f"}',
        ALL_FORMATS,
        (),
        '<tool_call>{"arguments": [1], "name": "f"}',
        [],
    ),
    (
        "malformed: empty minimax block",
        "<minimax:tool_call>\n</minimax:tool_call>",
        ALL_FORMATS,
        (),
        "<minimax:tool_call>\n</minimax:tool_call>",
        [],
    ),
    (
        "malformed: unknown minimax markup",
        "<minimax:tool_call><call>x</call>",
        ALL_FORMATS,
        (),
        "<minimax:tool_call><call>x</call>",
        [],
    ),
    ("malformed: empty mistral list", "[TOOL_CALLS][]", ALL_FORMATS, (), "[TOOL_CALLS][]", []),
    (
        "malformed: mistral marker before prose",
        "[TOOL_CALLS] is a token",
        ALL_FORMATS,
        (),
        "[TOOL_CALLS] is a token",
        [],
    ),
    ("unfinished: before the name", 'Hi <tool_call>\n{"na', ALL_FORMATS, (), 'Hi <tool_call>\n{"na', []),
    ("unfinished: at the opening marker", "  <tool_call>", ALL_FORMATS, (), "  <tool_call>", []),
    ("unfinished: a partial marker", "Hi <tool_ca", ALL_FORMATS, (), "Hi <tool_ca", []),
    (
        "unfinished: minimax invoke header",
        '<minimax:tool_call><invoke name="f',
        ALL_FORMATS,
        (),
        '<minimax:tool_call><invoke name="f',
        [],
    ),
    (
        "a broken opener before a good call",
        '<tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>',
        ALL_FORMATS,
        (),
        "<tool_call>",
        [("f", "{}")],
    ),
    # after the name went out: the call stays
    (
        "unfinished: inside the arguments (max_tokens)",
        '<tool_call>{"name": "f", "arguments": {"a": "Par',
        ALL_FORMATS,
        (),
        "",
        [("f", '{"a": "Par')],
    ),
    (
        "malformed: junk after the arguments",
        '<tool_call>{"name": "f", "arguments": {"a": 1}, ?}</tool_call>',
        ALL_FORMATS,
        (),
        "?}</tool_call>",
        [("f", '{"a": 1}')],
    ),
    (
        "malformed: inside the arguments",
        '<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>',
        ALL_FORMATS,
        (),
        "}}</tool_call>",
        [("f", '{"a": tru')],
    ),
    (
        "malformed: text instead of the end tag",
        '<tool_call>{"name": "f"} oops',
        ALL_FORMATS,
        (),
        " oops",
        [("f", "{}")],
    ),
    (
        "malformed: second minimax invoke",
        '<minimax:tool_call><invoke name="a"></invoke>\n<invoke name="b"><oops/></invoke></minimax:tool_call>',
        ALL_FORMATS,
        (),
        "<oops/></invoke></minimax:tool_call>",
        [("a", "{}"), ("b", "")],
    ),
    (
        "unfinished: minimax parameter",
        '<minimax:tool_call><invoke name="a"><parameter name="k">v',
        ALL_FORMATS,
        (),
        '<parameter name="k">v',
        [("a", "")],
    ),
    (
        "a missing end tag before the next call",
        '<tool_call>{"name": "a"}\n<tool_call>{"name": "b"}</tool_call>',
        ALL_FORMATS,
        (),
        "",
        [("a", "{}"), ("b", "{}")],
    ),
]
SAMPLES = [(text, formats, names) for _, text, formats, names, _, _ in CASES]


@pytest.mark.parametrize(("label", "text", "formats", "names", "content", "calls"), CASES, ids=[c[0] for c in CASES])
def test_cases(
    label: str,
    text: str,
    formats: tuple[ToolFormat, ...],
    names: tuple[str, ...],
    content: str,
    calls: list[tuple[str, Any]],
) -> None:
    got_content, got_calls = run([text], formats, names)
    assert got_content == content
    assert_calls(got_calls, calls)


def test_parse_tool_calls_agrees_with_the_stream() -> None:
    for text, formats, names in SAMPLES:
        content, calls = parse_tool_calls(text, formats, names)
        streamed = run(list(text), formats, names)
        assert (content or "", [(c["function"]["name"], c["function"]["arguments"]) for c in calls]) == streamed
        assert content is not None or calls
        if not calls:
            assert content == text


def test_plain_tokens_go_out_at_once() -> None:
    parser = ToolCallParser()
    assert parser.feed("Hello") == [Text("content", "Hello")]
    assert parser.feed(", world") == [Text("content", ", world")]
    assert parser.feed(" <tool") == [Text("content", " ")]  # only the possible marker is held
    assert "held='<tool'" in repr(parser)
    assert parser.feed("s>") == [Text("content", "<tools>")]
    assert parser.flush() == []


def test_the_name_goes_out_before_the_arguments_end() -> None:
    parser = ToolCallParser()
    assert parser.feed('<tool_call>\n{"name": "get_wea') == []
    (start,) = parser.feed('ther", ')  # the name is complete: it goes out alone
    assert isinstance(start, CallStart) and (start.index, start.name) == (0, "get_weather")
    assert parser.feed('"arguments": {"city": "Pa') == [CallArgs(0, '{"city": "Pa')]
    assert "Hermes object" in repr(parser)
    assert parser.feed('ris"}}\n</tool_call>') == [CallArgs(0, 'ris"}')]
    assert parser.calls_made == 1
    assert parser.flush() == []


def test_minimax_streams_one_parameter_at_a_time() -> None:
    parser = ToolCallParser(["minimax"])
    start = parser.feed('<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">1</parameter>')
    assert isinstance(start[0], CallStart) and start[1:] == [CallArgs(0, '{"a": 1')]
    assert parser.feed('<parameter name="b">x</parameter>') == [CallArgs(0, ', "b": "x"')]
    assert parser.feed("</invoke></minimax:tool_call>") == [CallArgs(0, "}")]


def test_unknown_format_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool-call formats"):
        ToolCallParser(["hermes", "xml"])  # type: ignore[list-item]


# ---------------------------------------------------------------------------------------------------
# Every split point, random splits, random markup


@pytest.mark.parametrize(("text", "formats", "names"), SAMPLES, ids=[c[0] for c in CASES])
def test_every_split_point(text: str, formats: tuple[ToolFormat, ...], names: tuple[str, ...]) -> None:
    whole = run([text], formats, names)
    for i in range(len(text) + 1):
        assert run([text[:i], text[i:]], formats, names) == whole, i
    assert run(list(text), formats, names) == whole


@examples(300)
@given(st.sampled_from(SAMPLES), st.lists(st.integers(0, 400), max_size=12))
def test_multi_point_splits(sample: tuple[str, tuple[ToolFormat, ...], tuple[str, ...]], offsets: list[int]) -> None:
    text, formats, names = sample
    assert run(split_at(text, offsets), formats, names) == run([text], formats, names)


FRAGMENTS = [
    *("<tool_call>", "</tool_call>", "<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="g">', "</invoke>"),
    *('<parameter name="k">', "</parameter>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>", '"name"'),
    *('"arguments"', '"f"', "{", "}", "[", "]", ":", ",", ";", '"', "\\", " ", "\n", "a", "1", "null", "<", "tool"),
]


@examples(200)  # a sample: test_every_split_point is the exhaustive one
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.lists(st.integers(0, 300), max_size=8))
def test_random_markup_loses_nothing(fragments: list[str], offsets: list[int]) -> None:
    """Whatever the text: no error, the same result however split, and without calls it all stays content."""
    text = "".join(fragments)
    content, calls = whole = run([text])
    assert run(split_at(text, offsets)) == whole
    if not calls:
        assert content == text


# Well-formed calls with plain text around them: the expected result is known by construction.
NAMES = st.sampled_from(["get_weather", "f", "search_web"])
WORDS = st.text(alphabet="abc xyz", min_size=1, max_size=8).map(str.strip).filter(bool)
SCALARS = st.one_of(st.integers(-1000, 1000), st.booleans(), WORDS)
ARGS = st.dictionaries(
    st.sampled_from(["city", "q", "n", "deep"]), st.one_of(SCALARS, st.lists(SCALARS, max_size=3)), max_size=3
)
SPACE = st.sampled_from(["", "\n", " ", "\n\n"])
PLAIN = st.text(alphabet="ab <[{}\n\"'.", max_size=10)


@st.composite
def rendered_call(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    name, args = draw(NAMES), draw(ARGS)
    sp = draw(SPACE)
    obj = json.dumps({"name": name, "arguments": args}, indent=draw(st.sampled_from([None, 2])))
    style = draw(st.sampled_from(["hermes", "hermes-string", "minimax", "mistral-v13", "mistral-list"]))
    if style == "hermes":
        text = f"<tool_call>{sp}{obj}{sp}</tool_call>"
    elif style == "hermes-string":
        text = "<tool_call>" + json.dumps({"arguments": json.dumps(args), "name": name}) + "</tool_call>"
    elif style == "minimax":
        params = "".join(
            f'{sp}<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>'
            for k, v in args.items()
        )
        text = f'<minimax:tool_call>{sp}<invoke name="{name}">{params}{sp}</invoke>{sp}</minimax:tool_call>'
    elif style == "mistral-v13":
        text = f"[TOOL_CALLS]{name}[ARGS]{json.dumps(args)}"
    else:
        text = f"[TOOL_CALLS]{sp}[{obj}]"
    return text, name, args


@examples(300)
@given(st.lists(st.one_of(PLAIN, rendered_call()), max_size=6), st.lists(st.integers(0, 600), max_size=6))
def test_nothing_lost_around_calls(segments: list[Any], offsets: list[int]) -> None:
    """Content is exactly the text between calls (whitespace-only runs between them dropped); calls exact."""
    text = "".join(s if isinstance(s, str) else s[0] for s in segments)
    runs: list[str] = [""]
    calls: list[tuple[str, dict[str, Any]]] = []
    for segment in segments:
        if isinstance(segment, str):
            runs[-1] += segment
        else:
            calls.append((segment[1], segment[2]))
            runs.append("")
    expected = "".join(r for r in runs if r.strip() or not calls)
    formats: tuple[ToolFormat, ...] = ("hermes", "minimax", "mistral")  # Llama JSON would read a leading "{"
    content, got = run(split_at(text, offsets), formats)
    assert content == expected
    assert_calls(got, calls)
