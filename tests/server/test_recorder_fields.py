"""The recorder's two forms (``server.recorder``): a plain exchange noted as fields and handed over
as them, and any note of another kind turning what was noted into parts, nothing lost, whenever it
comes. Driven as the gateway drives it: the read in the scope, the gateway's own client handing
over the request it sent, the whole answer written, or the send chain's messages."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from oaishim.capture.raw import PlainExchange, RawExchange
from oaishim.server.exchange import READ
from oaishim.server.recorder import Recorder, RecordingRespond, RecordingSend
from oaishim.server.seam import SentRequest

READ_BYTES = b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}"
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: u\r\ncontent-length: 9\r\n\r\n"
WRITTEN = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"


class Writes:
    def __init__(self) -> None:
        self.plain: list[PlainExchange] = []
        self.parts: list[RawExchange] = []

    def submit(self, exchange: RawExchange) -> bool:
        self.parts.append(exchange)
        return True

    def submit_plain(self, plain: PlainExchange) -> bool:
        self.plain.append(plain)
        return True


@dataclass
class Answer:
    """What the gateway's own client hands the recorder: the request as sent, and the answer's status."""

    request: SentRequest
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def begin(writer: Writes) -> tuple[Recorder, int]:
    t0 = time.perf_counter_ns()
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    scope[READ] = (t0, READ_BYTES)
    return Recorder(writer, scope, "gateway", 1.5), t0


def sent(rec: Recorder, reads: list[tuple[int, bytes]]) -> int:
    t = time.perf_counter_ns()
    request = SentRequest("POST", "http://u/v1/chat/completions", head=HEAD, wire=reads)
    rec.upstream_sent(t, Answer(request), b'{"a": 1}')  # type: ignore[arg-type]  # (the fields the recorder reads)
    return t


def test_a_plain_exchange_is_handed_over_as_fields_that_read_as_its_parts() -> None:
    writer = Writes()
    rec, t0 = begin(writer)
    reads: list[tuple[int, bytes]] = []
    t_up = sent(rec, reads)
    reads += [(t_up + 5, b"HTTP/1.1 200 OK\r\n\r\n{}"), (t_up + 6, b"")]  # (the connection appends after)
    assert RecordingRespond(rec, lambda status, headers, body: WRITTEN)(200, [], b"{}") == WRITTEN
    rec.end(profile="vllm")
    assert writer.parts == [] and writer.plain == [rec]
    x = rec.exchange()
    assert x.client_request is not None and (x.client_request.t_ns, x.client_request.headers) == (t0, READ_BYTES)
    assert x.client_response is not None and x.client_response.reads[0][1] == WRITTEN and x.client_response.complete
    up = x.upstream_request
    assert up is not None and (up.t_ns, up.method, up.headers, up.body) == (t_up, "POST", HEAD, [b'{"a": 1}'])
    assert x.upstream_response is not None and x.upstream_response.reads == reads  # the reads after, too
    assert (x.profile, x.error) == ("vllm", None) and x.end_ns >= t0


@pytest.mark.parametrize("when", ["before the upstream", "after the upstream"])
def test_a_message_through_the_send_chain_turns_the_fields_into_parts_losing_nothing(when: str) -> None:
    """A stream's answer goes through the send chain: the exchange is handed over as parts, with
    whatever had been noted as fields in them."""
    writer = Writes()
    rec, t0 = begin(writer)
    reads: list[tuple[int, bytes]] = [(t0 + 3, b"HTTP/1.1 200 OK\r\n\r\ndata: 1\n\n")]
    chain = RecordingSend(rec, lambda message: asyncio.sleep(0))

    async def answer() -> None:
        await chain({"type": "http.response.start", "status": 200, "headers": [(b"a", b"b")]})
        await chain({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await chain({"type": "http.response.body", "body": b"", "more_body": False})

    if when == "before the upstream":
        asyncio.run(answer())
        t_up = sent(rec, reads)
    else:
        t_up = sent(rec, reads)
        asyncio.run(answer())
    rec.end()
    assert writer.plain == [] and len(writer.parts) == 1
    x = writer.parts[0]
    assert x.client_request is not None and x.client_request.wire and x.client_request.headers == READ_BYTES
    response = x.client_response
    assert response is not None and response.status == 200 and response.complete
    assert [piece for _, piece in response.reads] == [b"data: 1\n\n", b""]
    up = x.upstream_request
    assert up is not None and (up.t_ns, up.headers, up.body) == (t_up, HEAD, [b'{"a": 1}'])
    assert x.upstream_response is not None and x.upstream_response.reads is reads and x.error is None


def test_an_exchange_the_client_left_unanswered_says_so_in_either_form() -> None:
    writer = Writes()
    rec, _ = begin(writer)
    sent(rec, [])
    rec.end()
    (plain,) = writer.plain
    assert plain.exchange().client_response is None
    assert plain.error == "no response was sent: the client went away first"


def test_a_second_upstream_request_replaces_the_first_as_with_parts() -> None:
    """n fanned out by the gateway: each copy's request goes to the recorder; a record keeps one."""
    writer = Writes()
    rec, _ = begin(writer)
    sent(rec, [(1, b"first")])
    second: list[tuple[int, bytes]] = [(2, b"second")]
    t = sent(rec, second)
    rec.end()
    x = writer.plain[0].exchange()
    assert x.upstream_request is not None and x.upstream_request.t_ns == t
    assert x.upstream_response is not None and x.upstream_response.reads is second
