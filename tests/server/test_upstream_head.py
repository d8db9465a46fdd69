"""The head of a request to a backend (``server.upstream``): the gateway's own headers, their fixed
lines rendered once per route, make the same bytes as the general head of the same header list."""

from __future__ import annotations

import itertools

import pytest

from oaishim.server.config import ModelRoute, Settings
from oaishim.server.exchange import Exchange
from oaishim.server.upstream import (
    Upstreams,
    _own_head,
    _request_head,
    _target,
    fixed_headers,
    request_headers,
    request_scoped_headers,
)


class Trace:
    """What a request's span adds for the backend (``server.spans``), without an exporter."""

    def inject(self, headers: dict[str, str]) -> None:
        headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        headers["tracestate"] = "k=v"


@pytest.mark.parametrize(
    ("key", "content_type", "method", "body", "traced"),
    list(
        itertools.product(
            (None, "sk-upstream-1"),
            ("application/json", None),
            ("POST", "GET"),
            (b'{"model":"m"}', None),
            (False, True),
        )
    ),
)
def test_the_gateways_own_head_is_the_general_head_of_its_headers(
    key: str | None, content_type: str | None, method: str, body: bytes | None, traced: bool
) -> None:
    route = ModelRoute("m", ("http://127.0.0.1:9/v1",), upstream_api_key=key)
    upstreams = Upstreams(Settings(models=(route,)))
    where = _target("http://127.0.0.1:9/v1", "/v1/chat/completions?a=1")
    ex = Exchange({"type": "http", "headers": [(b"x-request-id", b"req_given")]}, None)
    if traced:
        ex.trace = Trace()  # type: ignore[assignment]
    token = ex.enter()
    try:
        general = _request_head(method, where, list(request_headers(route, content_type).items()), body)
        for _ in range(2):  # rendered once, then taken from the route's cache
            lines = upstreams._fixed_for(route, content_type)
            scoped = request_scoped_headers()
            assert [*fixed_headers(route, content_type), *scoped] == list(request_headers(route, content_type).items())
            assert _own_head(method, where, lines, scoped, body) == general
    finally:
        ex.leave(token)
    assert b"x-request-id: req_given\r\n" in general
    assert (b"traceparent: " in general) is traced
    assert (b"authorization: Bearer sk-upstream-1\r\n" in general) is (key is not None)
