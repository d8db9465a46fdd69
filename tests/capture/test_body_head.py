"""``capture.record.body_head``: the first bytes of a stored body, as ``body_bytes`` gives them,
without decoding the rest (``timeline.is_stream`` reads 64 bytes of every response it is asked
about, four times a record).

* property: for any body stored as text or as base64, any size, the same bytes as
  ``body_bytes(...)[:size]``;
* a base64 body whose later part is not base64 still gives its first bytes (``body_bytes`` gives
  nothing for it: the documented difference), and one whose start is not base64 gives nothing;
* ``is_stream`` still tells a stream from a plain body, by its bytes and by its content type;
* ``header_value`` finds a name in any case (it lowers only the names of the right length).
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.capture.record import body_bytes, body_head, header_value
from oaishim.capture.timeline import is_stream


@examples(300)
@given(st.one_of(st.text(), st.binary()), st.integers(min_value=0, max_value=120))
def test_the_head_is_the_whole_body_cut(body: str | bytes, size: int) -> None:
    stored: dict[str, Any] = (
        {"body": body} if isinstance(body, str) else {"body_b64": base64.b64encode(body).decode("ascii")}
    )
    assert body_head(stored, size) == body_bytes(stored)[:size]


def test_bad_base64_after_the_head_and_in_it() -> None:
    late = {"body_b64": base64.b64encode(b"data: {}\n\n").decode("ascii") + "!!!!"}
    assert body_bytes(late) == b""
    assert body_head(late, 6) == b"data: "
    assert body_head({"body_b64": "!!!!QUJD"}, 3) == b""
    assert body_head(None, 5) == body_head({}, 5) == b""


def test_is_stream_by_bytes_and_by_type() -> None:
    sse = {"status": 200, "headers": [], "body": '\r\ndata: {"a": 1}\n\n'}
    plain = {"status": 200, "headers": [["content-type", "application/json"]], "body": '{"data": 1}'}
    typed = {"status": 200, "headers": [["Content-Type", "text/event-stream"]], "body": ""}
    assert is_stream(sse)
    assert not is_stream(plain)
    assert is_stream(typed)
    assert not is_stream({"status": 200, "headers": [], "body_b64": base64.b64encode(b"\x00\x01").decode()})


def test_header_value_in_any_case_and_none_of_a_near_name() -> None:
    stored = {"headers": [["Content-Length", "9"], ["CONTENT-TYPE", "text/plain"], ["content-typ", "x"], ["X", "y"]]}
    assert header_value(stored, "content-type") == "text/plain"
    assert header_value(stored, "content-length") == "9"
    assert header_value(stored, "content-typ") == "x"
    assert header_value(stored, "x-request-id") is None
    assert header_value({"headers": [["K", "kelvin"]]}, "k") == "kelvin"  # (KELVIN SIGN lowers to k)
