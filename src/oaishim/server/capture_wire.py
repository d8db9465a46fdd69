"""An upstream answer recorded as the reads that carried it, read back into its parts.

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
"""

from __future__ import annotations

import httptools

from oaishim.capture.raw import RawExchange, RawResponse


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
    ended (the empty read the client adds when it did). One that is not ``wire`` (or none) is
    returned as it is."""
    if response is None or not response.wire:
        return response
    reader = _Reader(head_only)
    complete = False
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


def settle_wire(raw: RawExchange) -> None:
    """The exchange's upstream answer read back when it was noted as its reads."""
    request, response = raw.upstream_request, raw.upstream_response
    if response is not None and response.wire:
        raw.upstream_response = read_wire(response, request is not None and request.method == "HEAD")
