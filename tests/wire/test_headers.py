"""wire.headers: which backend headers a client is given, and header names lowered once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oaishim.wire import headers
from oaishim.wire.headers import lower_name, passthrough_headers, retry_headers


@given(st.binary(min_size=1, max_size=100))
def test_lower_name_is_bytes_lower(name: bytes) -> None:
    assert lower_name(name) == name.lower()
    assert lower_name(name) == name.lower()  # the second time from the table, where it was kept


def test_the_table_is_bounded() -> None:
    headers._LOWERED.clear()
    assert lower_name(b"Content-Type") == b"content-type"
    assert headers._LOWERED == {b"Content-Type": b"content-type"}
    long = b"X-" + b"A" * 100
    assert lower_name(long) == long.lower()
    assert long not in headers._LOWERED  # past 64 bytes: lowered each time
    for i in range(headers._LOWERED_MAX + 100):
        assert lower_name(b"X-Made-Up-%d" % i) == b"x-made-up-%d" % i
    assert len(headers._LOWERED) == headers._LOWERED_MAX
    headers._LOWERED.clear()


def test_passthrough_and_retry_headers_lower_names() -> None:
    given_ = [(b"Retry-After", b"3"), (b"X-RateLimit-Remaining-Requests", b"9"), (b"Server", b"x"), (b"X-Mine", b"1")]
    assert retry_headers(given_) == [(b"retry-after", b"3"), (b"x-ratelimit-remaining-requests", b"9")]
    assert passthrough_headers(given_) == [
        (b"retry-after", b"3"),
        (b"x-ratelimit-remaining-requests", b"9"),
        (b"x-mine", b"1"),
    ]
