"""The canonical request path: every rule of ``wire.paths`` with its cases, the upstream URL join
and its host check, the query as sent on, and the pass-through entries."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.wire.paths import BadTarget, PassRule, allowed, join_upstream, normalize_path, parse_rule, quote_query

# (raw target path, canonical form)
CANONICAL = [
    # already canonical: unchanged
    (b"/", "/"),
    (b"/v1/chat/completions", "/v1/chat/completions"),
    (b"/v1/models/Qwen-3_8B.gguf~x", "/v1/models/Qwen-3_8B.gguf~x"),
    (b"/a/", "/a/"),  # a trailing slash is a different path, kept
    (b"/a;b=c/d:e@f!$&'()*+,=", "/a;b=c/d:e@f!$&'()*+,="),  # sub-delimiters written as themselves
    # dot segments
    (b"/v1/chat/../chat/completions", "/v1/chat/completions"),
    (b"/v1/./chat/completions", "/v1/chat/completions"),
    (b"/v1/chat/completions/.", "/v1/chat/completions/"),
    (b"/a/b/..", "/a/"),
    (b"/a/..", "/"),
    (b"/a/b/c/../../d", "/a/d"),
    (b"/./.", "/"),
    (b"/..a/b..", "/..a/b.."),  # not dot segments, only look like them
    (b"/.well-known/x", "/.well-known/x"),
    # encoded dot segments
    (b"/v1/chat/%2e%2e/chat/completions", "/v1/chat/completions"),
    (b"/v1/chat/%2E%2E/chat/completions", "/v1/chat/completions"),
    (b"/v1/chat/.%2e/chat/completions", "/v1/chat/completions"),
    (b"/v1/%2e/chat/completions", "/v1/chat/completions"),
    # merged slashes
    (b"//v1//chat///completions", "/v1/chat/completions"),
    (b"//", "/"),
    (b"/a//", "/a/"),
    (b"/a//../b", "/b"),
    # unreserved characters decoded, other escapes kept with upper-case hex
    (b"/v1/chat/%63ompletions", "/v1/chat/completions"),
    (b"/v1/%43hat/%7e%2D%5f", "/v1/Chat/~-_"),
    (b"/a%20b", "/a%20b"),
    (b"/a%2ab", "/a%2Ab"),
    (b"/caf%c3%a9", "/caf%C3%A9"),
    (b"/100%25", "/100%25"),
    (b"/a%252e%252e/b", "/a%252e%252e/b"),  # double-encoded: one decoding gives "%2e", not a dot
]


@pytest.mark.parametrize(("raw", "expected"), CANONICAL, ids=[c[0].decode() for c in CANONICAL])
def test_canonical_form(raw: bytes, expected: str) -> None:
    assert normalize_path(raw) == expected


# (raw target path, a word the reason must hold)
REFUSED = [
    # not origin-form
    (b"*", "start"),
    (b"*@127.0.0.1:9999/x", "start"),
    (b"127.0.0.1:9999", "start"),
    (b"http://evil/x", "start"),
    (b"", "start"),
    (b"v1/chat/completions", "start"),
    # encoded delimiters
    (b"/v1/chat%2Fcompletions", "%2F"),
    (b"/v1/chat%2fcompletions", "%2F"),
    (b"/v1/chat/completions%3Fx=1", "%3F"),
    (b"/v1/chat/completions%23frag", "%23"),
    (b"/v1/chat/completions%3Bjsessionid=1", "%3B"),
    (b"/v1%5Cchat/completions", "%5C"),
    # encoded control characters
    (b"/v1/chat/completions%00.json", "control"),
    (b"/a%0Ab", "control"),
    (b"/a%7f", "control"),
    # malformed escapes
    (b"/a%", "malformed"),
    (b"/a%2", "malformed"),
    (b"/a%zz", "malformed"),
    (b"/a%-1", "malformed"),
    # literal bytes no path may hold
    (b"/v1\\chat/completions", "backslash"),
    (b"/a\x00b", "control"),
    (b"/a b", "space"),
    (b"/a\tb", "control"),
    (b"/caf\xc3\xa9", "ASCII"),
    (b"/a\x7f", "ASCII"),
    # above the root
    (b"/..", "root"),
    (b"/../v1/chat/completions", "root"),
    (b"/a/../..", "root"),
    (b"/%2e%2e/x", "root"),
]


@pytest.mark.parametrize(("raw", "word"), REFUSED, ids=[repr(r[0]) for r in REFUSED])
def test_refused_targets(raw: bytes, word: str) -> None:
    with pytest.raises(BadTarget) as caught:
        normalize_path(raw)
    assert word in caught.value.reason
    assert caught.value.reason.endswith(".")


PATH_BYTES = st.lists(
    st.sampled_from([b"/", b".", b"..", b"a", b"%2e", b"%2E", b"%41", b"%20", b"~", b"//", b"%", b";", b"%2F"]),
    max_size=12,
)


@examples(300)
@given(PATH_BYTES)
def test_canonical_form_is_a_fixed_point_without_dot_segments(parts: list[bytes]) -> None:
    raw = b"/" + b"".join(parts)
    try:
        path = normalize_path(raw)
    except BadTarget:
        return
    assert normalize_path(path.encode()) == path  # what the backend gets routes the same way again
    segments = unquote(path).split("/")[1:]
    assert "." not in segments and ".." not in segments
    assert "//" not in path and path.startswith("/")


def test_join_keeps_the_configured_host() -> None:
    assert join_upstream("http://10.0.0.1:8000", "/v1/chat/completions") == "http://10.0.0.1:8000/v1/chat/completions"
    assert join_upstream("http://h:1/prefix", "/tokenize?x=1") == "http://h:1/prefix/tokenize?x=1"
    assert join_upstream("https://h/", "/a@b:c") == "https://h/a@b:c"  # "@" after the first "/" is in the path
    # The target as a client can write it without a leading "/": the result would name another host
    for target in ("*@127.0.0.1:9999/x", "@evil/x", ".evil.com/x", ":9999/x", "*", ""):
        with pytest.raises(BadTarget):
            join_upstream("http://127.0.0.1:8000", target)


def test_query_sent_on() -> None:
    assert quote_query(b"add_special_tokens=false&note=a%20b") == "add_special_tokens=false&note=a%20b"
    assert quote_query(b"a=1&b=x/y?z:@!$'()*+,;") == "a=1&b=x/y?z:@!$'()*+,;"
    assert quote_query(b"q=caf\xc3\xa9 x") == "q=caf%C3%A9%20x"  # nothing that could end the request line
    assert quote_query(b"q=1\r\nX-Injected: 1") == "q=1%0D%0AX-Injected:%201"
    assert quote_query(b"x=%23#frag") == "x=%23"  # a fragment is the client's own
    assert quote_query(b"") == ""


def test_pass_rules() -> None:
    assert parse_rule("/version") == PassRule(None, "/version")
    assert parse_rule("post /tokenize") == PassRule("POST", "/tokenize")
    assert parse_rule("GET /props/*") == PassRule("GET", "/props/", prefix=True)
    for bad in ("", "GET", "GET /a /b", "G3T /a", "version", "/a/../b", "//a", "/a%2Fb", "/%63"):
        with pytest.raises(ValueError):
            parse_rule(bad)
    rules = [parse_rule(r) for r in ("POST /tokenize", "/version", "GET /props/*")]
    assert allowed(rules, "POST", "/tokenize") is True
    assert allowed(rules, "GET", "/tokenize") is False  # listed for POST only: a 405
    assert allowed(rules, "DELETE", "/version") is True
    assert allowed(rules, "GET", "/props/slots") is True
    assert allowed(rules, "GET", "/props") is None  # the prefix is "/props/"
    assert allowed(rules, "POST", "/tokenize/") is None
    assert allowed(rules, "POST", "/sleep") is None
    assert allowed([], "GET", "/version") is None


@pytest.mark.parametrize("target", ["/../admin", "/%2e%2e/admin", "/x/./y", "/a/%2E/b", "/v1/..?q=1"])
def test_the_upstream_url_has_no_dot_segments(target: str) -> None:
    """The capture proxy forwards targets as they came: a dot segment, encoded or not, would leave
    the base path on the backend's side once the backend resolves it."""
    with pytest.raises(BadTarget):
        join_upstream("http://h:1/api", target)


def test_a_prefix_rule_matches_at_a_segment_boundary() -> None:
    rule = parse_rule("GET /props*")
    assert [rule.matches_path(p) for p in ("/props", "/props/x", "/propsecret", "/prop")] == [True, True, False, False]


def test_remembered_paths_are_the_computed_ones_and_bounded() -> None:
    from oaishim.wire import paths

    paths._SEEN.clear()
    first = normalize_path(b"/v1/chat/completions")
    assert normalize_path(b"/v1/chat/completions") == first == "/v1/chat/completions"
    assert paths._SEEN == {b"/v1/chat/completions": "/v1/chat/completions"}
    assert normalize_path(b"//v1//models") == "/v1/models"  # not plain: computed, never remembered
    assert b"//v1//models" not in paths._SEEN
    long = b"/" + b"a" * 200
    assert normalize_path(long) == long.decode()
    assert long not in paths._SEEN  # past 128 bytes
    for i in range(paths._SEEN_MAX + 50):
        assert normalize_path(b"/p%d" % i) == f"/p{i}"
    assert len(paths._SEEN) == paths._SEEN_MAX
    paths._SEEN.clear()
