"""wire.headers: which of a backend's headers a client is given."""

from __future__ import annotations

from oaishim.wire.headers import is_hop_by_hop, passthrough_headers, retry_headers


def test_passthrough_and_retry_headers_lower_names() -> None:
    given = [(b"Retry-After", b"3"), (b"X-RateLimit-Remaining-Requests", b"9"), (b"Server", b"x"), (b"X-Mine", b"1")]
    assert retry_headers(given) == [(b"retry-after", b"3"), (b"x-ratelimit-remaining-requests", b"9")]
    assert passthrough_headers(given) == [
        (b"retry-after", b"3"),
        (b"x-ratelimit-remaining-requests", b"9"),
        (b"x-mine", b"1"),
    ]
    assert is_hop_by_hop("Transfer-Encoding") and is_hop_by_hop(b"KEEP-ALIVE") and not is_hop_by_hop(b"x-mine")
