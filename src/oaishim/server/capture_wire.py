"""An upstream answer recorded as the reads that carried it, and a client request as the one read
that carried it, read back into their parts.

Under capture the gateway's upstream client notes each network read of an answer with its time
(``server.h1client``: one reference and a clock reading a read), then an empty read once the answer
is complete, rather than a list of header pairs and a wrapper around every read of the body (on the
request path, a dozen objects to frame for the head alone, and a layer on every read). Here, later
(the capture process, or the proxy's writer thread, before ``capture.build`` makes the record),
the same reads go through an HTTP/1.1 response parser (httptools: llhttp, as the client's own; in
the server layer, as the capture core below it parses no HTTP): the status and headers of the final
head (an interim ``1xx`` is passed over) at the time of the read that completed it, each body piece
at the time of the read that carried it (a chunked body decoded), and whether the answer ended. A
read the parser refuses ends the reading: what came before is kept, and the answer is not complete.

A client request the server received whole in one read (``server.http``) is noted as that read and
its time (one reference, where the scope's header list is a dozen objects to frame, and no wrapper
around the app's ``receive``); :func:`read_request` reads it back as the server read it. A whole
answer the server wrote in one call (``respond``) is noted as the bytes it wrote, and read back as
an upstream answer is.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httptools

from oaishim.capture.raw import RawExchange, RawRequest, RawResponse


class _Reader:
    """httptools' callbacks for one response."""

    def __init__(self, head_only: bool) -> None:
        self.head_only = head_only  # the answer to a HEAD: its head is all of it
        self.parser = httptools.HttpResponseParser(self)
        self.t = 0  # the time of the read being parsed
        self.status = 0
        self.headers: list[tuple[str | bytes, str | bytes]] = []
        self.pieces: list[tuple[int, bytes]] = []
        self.headed = False  # the final head is in
        self.head_t = 0  # the time of the read that completed it

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.headers = []  # an interim answer: the final head follows
            return
        self.status, self.headed, self.head_t = status, True, self.t

    def on_body(self, body: bytes) -> None:
        if not self.head_only:
            self.pieces.append((self.t, body))


def read_wire(response: RawResponse | None, head_only: bool = False) -> RawResponse | None:
    """The response ``response.reads`` carried (a ``wire`` one), with its head's status and
    headers and the time of the read that completed the head, its body's pieces and whether it
    ended (the empty read the client adds when it did; a whole answer the server wrote, noted as
    one write, comes ``complete`` already). One that is not ``wire`` (or none) is returned as it is."""
    if response is None or not response.wire:
        return response
    reader = _Reader(head_only)
    complete = response.complete  # a whole answer the server wrote (no empty read follows it)
    for t, data in response.reads:
        if not data:
            complete = True  # the client saw the answer end
            break
        reader.t = t
        try:
            reader.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # what came before is kept
            break
    return RawResponse(
        reader.head_t if reader.headed else response.t_ns,
        reader.status if reader.headed else response.status,
        reader.headers,
        reader.pieces,
        complete and reader.headed,
    )


class _RequestReader:
    """httptools' callbacks for one request: as the server's (``server.http``) read it into a scope."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[str | bytes, str | bytes]] = []
        self.body: list[bytes] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))  # lowered, as in the scope

    def on_body(self, body: bytes) -> None:
        if not self.done:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def read_request(request: RawRequest | None) -> RawRequest | None:
    """The request a ``wire`` one's read carried, as the server gave it to the app: its method, its
    target (the path and query: the server's ``raw_path`` and ``query_string``), its headers (names
    lowered) and its body. One that is not ``wire`` (or none) is returned as it is; a read the parser
    refuses (the server, which parsed it first, would have refused the request) keeps what came
    before it."""
    if request is None or not request.wire or not isinstance(request.headers, bytes):
        return request
    reader = _RequestReader()
    with contextlib.suppress(httptools.HttpParserError, httptools.HttpParserUpgrade):  # what came before is kept
        reader.parser.feed_data(request.headers)
    method = ""
    target = reader.url
    try:
        method = reader.parser.get_method().decode("ascii")
        url: Any = httptools.parse_url(reader.url)  # (its stub says bytes; a missing part is None)
        target = (url.path or b"/") + (b"?" + url.query if url.query else b"")
    except (httptools.HttpParserError, UnicodeDecodeError):
        pass
    return RawRequest(request.t_ns, method, target.decode("latin-1"), reader.headers, reader.body)


def settle_wire(raw: RawExchange) -> None:
    """The exchange's client request and upstream answer read back where they were noted as reads."""
    client = raw.client_request
    if client is not None and client.wire:
        raw.client_request = client = read_request(client)
    answer = raw.client_response
    if answer is not None and answer.wire:
        raw.client_response = read_wire(answer, client is not None and client.method == "HEAD")
    request, response = raw.upstream_request, raw.upstream_response
    if response is not None and response.wire:
        raw.upstream_response = read_wire(response, request is not None and request.method == "HEAD")
