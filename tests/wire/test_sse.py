"""Tests for oaishim.wire.sse.

Expected events are written by hand from the WHATWG "Parsing an event stream" rules (several cases are
the spec's own examples), or computed by a deliberately naive oracle (one event per ``data:`` line)
for the recorded OpenAI streams, never copied from the decoder's output.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oaishim.wire.sse import DONE, EventTooLarge, SSEDecoder, SSEEvent, encode_data, encode_event, is_done

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai-live"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.sse"))
# Every-offset splits of a whole stream cost O(size²); above this size the windowed test covers them.
FULL_SPLIT_MAX_BYTES = 5_000
SMALL_FIXTURES = [n for n in FIXTURE_NAMES if (FIXTURES / n).stat().st_size <= FULL_SPLIT_MAX_BYTES]


def decode(*parts: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for part in parts:
        events += decoder.feed(part)
    return events + decoder.flush()


def split_at(raw: bytes, offsets: list[int]) -> list[bytes]:
    cuts = [0, *sorted(offsets), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(cuts)]


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


LINE_ENDS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def with_line_ends(raw_lf: bytes, style: str) -> bytes:
    return raw_lf.replace(b"\n", LINE_ENDS[style])


# --- single rules -----------------------------------------------------------------------------------

RULE_CASES: dict[str, tuple[bytes, list[SSEEvent]]] = {
    "one data line": (b"data: hello\n\n", [SSEEvent("hello")]),
    "data lines joined by LF": (b"data: a\ndata: b\ndata: c\n\n", [SSEEvent("a\nb\nc")]),
    "spec example: three messages": (
        b"data: This is the first message.\n\n"
        b"data: This is the second message, it\n"
        b"data: has two lines.\n\n"
        b"data: This is the third message.\n\n",
        [
            SSEEvent("This is the first message."),
            SSEEvent("This is the second message, it\nhas two lines."),
            SSEEvent("This is the third message."),
        ],
    ),
    "spec example: event types": (
        b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n",
        [SSEEvent("73857293", "add"), SSEEvent("2153", "remove"), SSEEvent("113411", "add")],
    ),
    "spec example: only one leading space removed": (
        b"data:test\n\ndata: test\n\ndata:  test\n\n",
        [SSEEvent("test"), SSEEvent("test"), SSEEvent(" test")],
    ),
    "spec example: field names without colon": (
        # The spec says the first block dispatches "" and the second "\n"; the third has no blank line.
        b"data\n\ndata\ndata\n\n",
        [SSEEvent(""), SSEEvent("\n")],
    ),
    "empty data value still dispatches": (b"data:\n\n", [SSEEvent("")]),
    "value keeps later colons": (b"data: a:b\n\ndata::x\n\n", [SSEEvent("a:b"), SSEEvent(":x")]),
    "trailing spaces are content": (b"data: x  \n\n", [SSEEvent("x  ")]),
    "comments ignored": (
        b": keep-alive\n\n:\ndata: x\n: between lines\n\n:no space\n\n",
        [SSEEvent("x")],
    ),
    "unknown fields ignored": (b"foo: bar\nData: no\ndata : no\ndata: x\n\n", [SSEEvent("x")]),
    "event type reset after dispatch": (
        b"event: a\ndata: 1\n\ndata: 2\n\n",
        [SSEEvent("1", "a"), SSEEvent("2")],
    ),
    "event type reset by a block without data": (b"event: a\n\ndata: 2\n\n", [SSEEvent("2")]),
    "last event type wins": (b"event: a\nevent: b\ndata: 1\n\n", [SSEEvent("1", "b")]),
    "event without colon is empty type": (b"event: a\nevent\ndata: 1\n\n", [SSEEvent("1", "")]),
    "blank lines without data dispatch nothing": (b"\n\n\n\r\n\r\r", []),
    "id persists across events": (
        b"id: 7\ndata: a\n\ndata: b\n\nid: 8\ndata: c\n\n",
        [SSEEvent("a", id="7"), SSEEvent("b", id="7"), SSEEvent("c", id="8")],
    ),
    "id set by a block without data still counts": (b"id: 5\n\ndata: a\n\n", [SSEEvent("a", id="5")]),
    "empty id resets to empty string": (
        b"id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n",
        [SSEEvent("a", id="1"), SSEEvent("b", id=""), SSEEvent("c", id="")],
    ),
    "id with NUL ignored": (
        b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
        [SSEEvent("a", id="1"), SSEEvent("b", id="1")],
    ),
    "id with NUL ignored when no id before": (b"id: \x00\ndata: a\n\n", [SSEEvent("a")]),
    "retry with digits": (b"retry: 3000\ndata: x\n\n", [SSEEvent("x", retry=3000)]),
    "retry belongs to its own block only": (
        b"retry: 10\ndata: x\n\ndata: y\n\n",
        [SSEEvent("x", retry=10), SSEEvent("y")],
    ),
    "retry in a block without data is not carried over": (b"retry: 10\n\ndata: y\n\n", [SSEEvent("y")]),
    "invalid retry values ignored": (
        "retry: 30s\nretry: -1\nretry: 1.5\nretry: \nretry\nretry:  10\nretry: ３\nretry: ²\nretry: ١٢\n"
        "data: x\n\n".encode(),
        [SSEEvent("x")],
    ),
    "invalid retry keeps an earlier valid one": (
        b"retry: 5\nretry: x\ndata: y\n\n",
        [SSEEvent("y", retry=5)],
    ),
    "all fields together": (
        b"event: e\nid: i\nretry: 0\ndata: d\n\n",
        [SSEEvent("d", "e", "i", 0)],
    ),
    "CR line ends": (b"data: a\rdata: b\r\revent: e\rdata: c\r\r", [SSEEvent("a\nb"), SSEEvent("c", "e")]),
    "CRLF line ends": (
        b"data: a\r\ndata: b\r\n\r\nevent: e\r\ndata: c\r\n\r\n",
        [SSEEvent("a\nb"), SSEEvent("c", "e")],
    ),
    "mixed line ends": (
        b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\n\r",
        [SSEEvent("a\nb\nc"), SSEEvent("d")],
    ),
    "LF CR is two line ends": (b"data: a\n\rdata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    "only CR, LF, CRLF end lines": (
        "data: a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i\n\n".encode(),
        [SSEEvent("a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i")],
    ),
    "BOM at start dropped": (b"\xef\xbb\xbfdata: x\n\n", [SSEEvent("x")]),
    "only one BOM dropped": (b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: y\n\n", [SSEEvent("y")]),
    "BOM elsewhere is content": (b"data: \xef\xbb\xbfx\n\n", [SSEEvent("\ufeffx")]),
    "invalid UTF-8 replaced": (b"data: a\xffb\xc3\n\n", [SSEEvent("a\ufffdb\ufffd")]),
    "NUL in data kept": (b"data: a\x00b\n\n", [SSEEvent("a\x00b")]),
    "DONE sentinel": (DONE, [SSEEvent("[DONE]")]),
}


@pytest.mark.parametrize("raw, expected", list(RULE_CASES.values()), ids=list(RULE_CASES))
def test_sse_rule(raw: bytes, expected: list[SSEEvent]) -> None:
    assert decode(raw) == expected


@pytest.mark.parametrize("raw, expected", list(RULE_CASES.values()), ids=list(RULE_CASES))
def test_sse_rule_fed_byte_by_byte(raw: bytes, expected: list[SSEEvent]) -> None:
    assert decode(*(raw[i : i + 1] for i in range(len(raw)))) == expected


def test_sse_events_returned_by_the_feed_that_completes_them() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\ndata: b\n") == [SSEEvent("a")]
    # A CR ends the line at once: the blank line dispatches without waiting to see if an LF follows.
    assert decoder.feed(b"\r") == [SSEEvent("b")]
    assert decoder.feed(b"\n") == []
    assert decoder.flush() == []


def test_sse_crlf_split_across_feeds_is_one_line_end() -> None:
    # Were the LF a second line end, the empty line would dispatch "a" alone and then "b".
    assert decode(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent("a\nb")]


def test_sse_crlf_split_survives_feeds_without_text() -> None:
    # Empty feeds and feeds holding only part of a character decode to no text; they must not make the
    # decoder forget that the previous text ended with CR.
    assert decode(b"data: a\r", b"", b"\ndata: b\r\n\r\n") == [SSEEvent("a\nb")]
    assert decode(b"data: a\r", b"\ndata: \xe4", b"\xb8\xad\r", b"", b"\n\r\n") == [SSEEvent("a\n中")]


def test_sse_lf_after_crlf_pair_is_a_new_line_end() -> None:
    # CR, then LF (pairs with CR), then LF again: the last one is an empty line and dispatches.
    assert decode(b"data: a\r", b"\n", b"\n") == [SSEEvent("a")]


def test_sse_bom_split_across_feeds() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent("x")]
    assert decode(b"\xef\xbb", b"\xbf", b"data: x\n\n") == [SSEEvent("x")]


def test_sse_bom_only_at_stream_start_even_after_empty_feeds() -> None:
    assert decode(b"", b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("x")]
    # Once a character has been seen, a BOM is no longer at the start of the stream.
    assert decode(b"\n", b"\xef\xbb\xbfdata: x\n\n") == []


def test_sse_bytes_fed_counts_all_bytes() -> None:
    decoder = SSEDecoder()
    assert decoder.bytes_fed == 0
    decoder.feed(b"\xef\xbb\xbfdata: ")
    decoder.feed(b"")
    decoder.feed(b"\xe4\xb8")
    assert decoder.bytes_fed == 11
    decoder.feed(b"\xad\n\n")
    assert decoder.bytes_fed == 14


def test_sse_is_done() -> None:
    assert is_done(SSEEvent("[DONE]"))
    assert is_done(SSEEvent("[DONE]", event="x", id="1"))
    assert not is_done(SSEEvent("[DONE] "))
    assert not is_done(SSEEvent('{"done": true}'))
    assert not is_done(SSEEvent(""))


# --- flush ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"data: a\ndata: b", [SSEEvent("a\nb")]),
        (b"data: a\n", [SSEEvent("a")]),
        (b"data: a\r", [SSEEvent("a")]),
        (b"data", [SSEEvent("")]),
        (b"id: 9\nevent: e\nretry: 4\ndata: x", [SSEEvent("x", "e", "9", 4)]),
        (b"data: a\xe4", [SSEEvent("a\ufffd")]),  # truncated character at end of stream
        (b"data: 1\n\ndata: 2", [SSEEvent("1"), SSEEvent("2")]),
        # The spec's example stream, whose last block it discards; we return it flagged.
        (
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n",
            [
                SSEEvent("first event", id="1"),
                SSEEvent("second event", id=""),
                SSEEvent(" third event", id=""),
            ],
        ),
    ],
)
def test_sse_flush_returns_incomplete_tail(raw: bytes, expected: list[SSEEvent]) -> None:
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    assert not decoder.incomplete_tail
    assert events == expected[:-1]
    assert decoder.flush() == expected[-1:]
    assert decoder.incomplete_tail


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"data: a\n\n",
        b"data: a\r\n\r\n",
        b"data: a\r\r",
        b"event: x\n",
        b"id: 1\nretry: 2",
        b": comment",
    ],
)
def test_sse_flush_without_pending_event(raw: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(raw)
    assert decoder.flush() == []
    assert not decoder.incomplete_tail


def test_sse_flush_twice_and_feed_after_flush() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a")
    assert decoder.flush() == [SSEEvent("a")]
    assert decoder.flush() == []
    with pytest.raises(ValueError):
        decoder.feed(b"\n\n")


# --- recorded OpenAI streams ------------------------------------------------------------------------


def test_sse_fixtures_present() -> None:
    # Guards the parametrised tests below against silently running on zero files.
    assert len(FIXTURE_NAMES) == 12
    assert (FIXTURES / "README.md").is_file()


def naive_events(raw_lf: bytes) -> list[SSEEvent]:
    """Oracle for these streams only: every event is exactly one ``data: `` line, nothing else."""
    return [SSEEvent(line[6:].decode()) for line in raw_lf.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_sse_fixture_matches_naive_oracle(name: str) -> None:
    raw = fixture_bytes(name)
    data_lines = sum(1 for line in raw.split(b"\n") if line.startswith(b"data:"))
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    assert len(events) == data_lines
    assert events == naive_events(raw)
    assert decoder.flush() == []
    assert not decoder.incomplete_tail
    assert [is_done(e) for e in events] == [False] * (len(events) - 1) + [True]


@pytest.mark.parametrize("style", ["crlf", "cr"])
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_sse_fixture_line_end_styles_agree(name: str, style: str) -> None:
    raw = fixture_bytes(name)
    assert decode(with_line_ends(raw, style)) == naive_events(raw)


@pytest.mark.parametrize("name", SMALL_FIXTURES)
def test_sse_fixture_split_at_every_offset(name: str) -> None:
    raw = fixture_bytes(name)
    expected = decode(raw)
    for k in range(len(raw) + 1):
        assert decode(raw[:k], raw[k:]) == expected, k


@pytest.mark.parametrize(
    "name, style",
    [(n, s) for n in FIXTURE_NAMES for s in LINE_ENDS if not (s == "lf" and n in SMALL_FIXTURES)],
)
def test_sse_fixture_split_at_every_offset_windowed(name: str, style: str) -> None:
    # Splitting the whole stream at every offset is quadratic; instead every offset is split within a
    # window of its own event plus the next one. Events start with a clean state here (the streams
    # carry no id), so the window decodes exactly like the same bytes inside the full stream. LF
    # versions of the small fixtures are skipped: the whole-stream test above already splits them.
    raw_lf = fixture_bytes(name)
    expected_all = naive_events(raw_lf)
    raw = with_line_ends(raw_lf, style)
    blank = LINE_ENDS[style] * 2
    events_raw = [e + blank for e in raw.split(blank)[:-1]]
    assert b"".join(events_raw) == raw
    assert len(events_raw) == len(expected_all)
    for i, event_raw in enumerate(events_raw):
        window = event_raw + (events_raw[i + 1] if i + 1 < len(events_raw) else b"")
        expected = expected_all[i : i + 2]
        for k in range(len(event_raw)):
            assert decode(window[:k], window[k:]) == expected, (i, k)


@pytest.mark.parametrize("style", ["lf", "crlf", "cr"])
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_sse_fixture_fed_byte_by_byte(name: str, style: str) -> None:
    # Every offset is a split point at once, across the whole stream.
    raw_lf = fixture_bytes(name)
    raw = with_line_ends(raw_lf, style)
    assert decode(*(raw[i : i + 1] for i in range(len(raw)))) == naive_events(raw_lf)


@settings(deadline=None)
@given(st.data())
def test_sse_fixture_random_multi_splits(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(FIXTURE_NAMES), label="fixture")
    style = data.draw(st.sampled_from(list(LINE_ENDS)), label="style")
    raw_lf = fixture_bytes(name)
    raw = with_line_ends(raw_lf, style)
    offsets = data.draw(st.lists(st.integers(0, len(raw)), max_size=40), label="offsets")
    assert decode(*split_at(raw, offsets)) == naive_events(raw_lf)


# --- multi-byte text --------------------------------------------------------------------------------

MULTIBYTE_STREAM = (
    "\ufeff"
    ": 注释 comment\r\n"
    "event: 消息\r\n"
    "id: 火-1\r\n"
    "retry: 1500\r\n"
    "data: 你好，世界\r\n"
    "data: emoji 😀👍🏽 mixed\r\n"
    "\r\n"
    "data: second ünïcödé\r"
    "data: 𝄞 clef\r"
    "\r"
    "data: third 中文\n"
    "\n"
    "data:[DONE]\r\n\r\n"
).encode()
MULTIBYTE_EVENTS = [
    SSEEvent("你好，世界\nemoji 😀👍🏽 mixed", "消息", "火-1", 1500),
    SSEEvent("second ünïcödé\n𝄞 clef", "", "火-1", None),
    SSEEvent("third 中文", "", "火-1", None),
    SSEEvent("[DONE]", "", "火-1", None),
]


def test_sse_multibyte_stream() -> None:
    assert decode(MULTIBYTE_STREAM) == MULTIBYTE_EVENTS


def test_sse_multibyte_stream_split_at_every_pair_of_offsets() -> None:
    # Three pieces, every pair of cuts: covers a character, the BOM or a CRLF cut twice or cut next to
    # another boundary.
    raw = MULTIBYTE_STREAM
    for a in range(len(raw) + 1):
        assert decode(raw[:a], raw[a:]) == MULTIBYTE_EVENTS, a
        for b in range(a, len(raw) + 1):
            assert decode(raw[:a], raw[a:b], raw[b:]) == MULTIBYTE_EVENTS, (a, b)


@given(st.lists(st.integers(0, len(MULTIBYTE_STREAM)), max_size=60))
def test_sse_multibyte_stream_random_multi_splits(offsets: list[int]) -> None:
    assert decode(*split_at(MULTIBYTE_STREAM, offsets)) == MULTIBYTE_EVENTS


# --- encoder ----------------------------------------------------------------------------------------


def test_sse_encode_event_bytes() -> None:
    assert encode_event("x") == b"data: x\n\n"
    assert encode_event("") == b"data: \n\n"
    assert encode_event("a\nb", event="e", id="1", retry=5) == b"event: e\nid: 1\nretry: 5\ndata: a\ndata: b\n\n"
    assert encode_event("a\r\nb\rc\n") == b"data: a\ndata: b\ndata: c\ndata: \n\n"
    assert encode_event("中", event="", id="") == "event: \nid: \ndata: 中\n\n".encode()


@pytest.mark.parametrize(
    "kwargs",
    [{"event": "a\nb"}, {"event": "a\rb"}, {"id": "1\n"}, {"id": "\r1"}, {"id": "1\x002"}, {"retry": -1}],
)
def test_sse_encode_event_rejects_unencodable_fields(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        encode_event("x", **kwargs)


def test_sse_encode_event_round_trip_multiline() -> None:
    assert decode(encode_event(" lead\n\nx: y\n", event="e", id="7", retry=0)) == [
        SSEEvent(" lead\n\nx: y\n", "e", "7", 0)
    ]
    # CR and CRLF inside data are line ends too, so they come back as LF.
    assert decode(encode_event("a\r\nb\rc")) == [SSEEvent("a\nb\nc")]


def test_sse_encoded_events_concatenate_with_persisting_id() -> None:
    stream = encode_event("a", id="1") + encode_event("b", event="e") + DONE
    assert decode(stream) == [SSEEvent("a", id="1"), SSEEvent("b", "e", "1"), SSEEvent("[DONE]", id="1")]


def test_sse_encode_data() -> None:
    assert encode_data(b'{"a":"\\n"}') == b'data: {"a":"\\n"}\n\n'
    assert encode_data(b"") == b"data: \n\n"
    assert encode_data(b"[DONE]") == DONE
    assert DONE == b"data: [DONE]\n\n"
    for bad in (b"a\nb", b"a\rb", b"\n", b"x\r\n"):
        with pytest.raises(ValueError):
            encode_data(bad)


def normalise_line_ends(text: str) -> str:
    return re.sub(r"\r\n?", "\n", text)


single_line = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"))
id_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"))


@given(
    data=st.text(st.characters(codec="utf-8")),
    event=st.none() | single_line,
    id=st.none() | id_text,
    retry=st.none() | st.integers(0, 2**63),
)
def test_sse_encode_event_round_trip(data: str, event: str | None, id: str | None, retry: int | None) -> None:
    # Data comes back with every CR, LF or CRLF in it turned into LF: they are line ends in SSE.
    expected = SSEEvent(normalise_line_ends(data), event or "", id, retry)
    assert decode(encode_event(data, event=event, id=id, retry=retry)) == [expected]


@given(single_line)
def test_sse_encode_data_round_trip(text: str) -> None:
    assert decode(encode_data(text.encode())) == [SSEEvent(text)]


event_args = st.tuples(
    st.text(st.characters(codec="utf-8")),
    st.none() | single_line,
    st.none() | id_text,
    st.none() | st.integers(0, 99),
)


@given(st.lists(event_args, max_size=8), st.data())
def test_sse_encoded_stream_random_splits(
    events: list[tuple[str, str | None, str | None, int | None]], data: st.DataObject
) -> None:
    raw = b"".join(encode_event(d, event=e, id=i, retry=r) for d, e, i, r in events)
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for d, e, i, r in events:
        last_id = i if i is not None else last_id
        expected.append(SSEEvent(normalise_line_ends(d), e or "", last_id, r))
    offsets = data.draw(st.lists(st.integers(0, len(raw)), max_size=20), label="offsets")
    assert decode(*split_at(raw, offsets)) == expected


def test_unknown_fields_are_ignored_but_kept_aside() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b'error: {"message": "boom"}\n\ndata: x\nfoo\n\n')
    assert [e.data for e in events] == ["x"]
    assert decoder.unknown_fields == [("error", '{"message": "boom"}'), ("foo", "")]


# ---------------------------------------------------------------------------------------------------
# A bound on one event: max_event


def test_an_endless_line_raises_after_the_bound_and_never_holds_more() -> None:
    """64 MB without a line end, 1 MB bound: the error comes within one read of the bound, what the
    decoder holds never passes the bound, and the memory it used stays near the bound."""
    import tracemalloc

    bound, read = 1 << 20, b"x" * 65536
    decoder = SSEDecoder(max_event=bound)
    tracemalloc.start()
    try:
        with pytest.raises(EventTooLarge) as raised:
            decoder.feed(b"data: ")
            for _ in range((64 << 20) // len(read)):
                decoder.feed(read)
                assert decoder.held <= bound
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.limit == bound
    assert bound < decoder.bytes_fed <= bound + len(read)
    assert decoder.held == 0  # what it held is dropped
    assert peak < 3 * bound
    with pytest.raises(ValueError, match="after flush"):
        decoder.feed(b"\n\n")  # the stream cannot go on


def test_many_data_lines_of_one_event_count_together() -> None:
    decoder = SSEDecoder(max_event=10_000)
    with pytest.raises(EventTooLarge):
        for _ in range(100):
            decoder.feed(b"data: " + b"y" * 500 + b"\n")  # complete lines, but no blank line ever
            assert decoder.held <= 10_000


@pytest.mark.parametrize("size", [1, 4096])
def test_an_event_in_one_read_counts_too(size: int) -> None:
    """Also on the one-read fast path: an event longer than the bound raises, one at the bound passes."""
    with pytest.raises(EventTooLarge):
        SSEDecoder(max_event=size).feed(b"data: " + b"z" * (size + 1) + b"\n\n")
    assert SSEDecoder(max_event=size + 7).feed(b"data: " + b"z" * size + b"\n\n") == [SSEEvent("z" * size)]


def test_events_under_the_bound_decode_as_without_one_at_every_split_point() -> None:
    raw = b"data: " + b"a" * 300 + b"\n\n: c\r\ndata: b\rdata: c\n\nevent: e\ndata: " + b"d" * 200 + b"\n\n"
    want = decode(raw)
    for k in range(len(raw) + 1):
        decoder = SSEDecoder(max_event=320)
        got = decoder.feed(raw[:k]) + decoder.feed(raw[k:]) + decoder.flush()
        assert got == want, k
        assert decoder.held == 0


def test_a_long_line_in_small_reads_is_not_rescanned() -> None:
    """Linear in the input: the pieces of a long line are kept and joined once, so a 4 MB line in
    4096 reads takes milliseconds (rescanning what is held on every read would be ~8 GB of work)."""
    import time

    def run(piece: int) -> float:
        decoder = SSEDecoder(max_event=8 << 20)
        data = b"x" * piece
        started = time.perf_counter()
        decoder.feed(b"data: ")
        for _ in range((4 << 20) // piece):
            decoder.feed(data)
        decoder.feed(b"\n\n")
        return time.perf_counter() - started

    assert run(1024) < 2.0  # generous: a busy machine
