"""One exchange's recorder: what a capture notes on the request path, compiled with the core.

A :class:`Recorder` follows one exchange through its phases, as mitmproxy's hooks do: the client
request received, the upstream request sent and its answer's head (``upstream_sent``, or
``upstream_opened`` through ``server.recorder_upstream``'s wrappers), each piece sent to the
client (``wrap``'s send, or the direct write, ``direct``, or the whole answer the server writes at
once, ``respond``), and the end (``end``).

Where the parts can be had as they crossed the wire, they are kept as such, and read back later
by ``server.capture_wire``: a client request the HTTP server received whole in one read, as that
read (its scope's ``READ``: no wrapper around ``receive``, no list of header pairs); a whole
answer, as the bytes the server wrote; the gateway's own upstream client's request, as the head it
wrote, and its answer, as the list its connection appends each read to (``SentRequest``'s ``head``
and ``wire``). That client hands each request it sent to the recorder itself (the exchange's
``upstream_sent``), so nothing wraps it.

An exchange made of those alone, the common one, is noted in the fields the recorder inherits
(``capture.raw.PlainExchange``) and handed over as them (``submit_plain``): no part objects, and
the capture process's link frames it without marshalling parts (``server.capture_frame``). The
first note of any other kind turns what was noted into parts (``graph``), and the rest of the
exchange is noted in them. The recorder only reads a clock and keeps references; the record is
built, redacted, checked and written later, by the store's thread (``capture.store``) or the
capture process, and ``end`` never blocks.

These run for every message and every streamed chunk of a captured exchange, so they live in a
module ``hatch_build`` compiles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

from oaishim.capture.raw import Mode, PlainExchange, RawExchange, RawRequest, RawResponse
from oaishim.server.asgi import Headers, Message, Receive, Scope, Send
from oaishim.server.exchange import READ, DirectBody, Respond
from oaishim.server.seam import UpstreamResponse

now: Final = time.perf_counter_ns


class Submit(Protocol):
    """Where a finished exchange goes: the writer thread, or the capture process (server.capture_process)."""

    def submit(self, exchange: RawExchange) -> bool: ...

    def submit_plain(self, plain: PlainExchange) -> bool: ...


class Recorder(PlainExchange):
    """One exchange's recorder. The common exchange (a request that came whole in one read,
    answered whole, through the gateway's own upstream client) is noted in the fields it inherits
    (``capture.raw.PlainExchange``) and handed to the writer as such (``submit_plain``): no part
    objects made, none to frame. The first note of any other kind (a message through the send
    chain, a piece written direct, a request read in messages, another upstream) turns what was
    noted into parts (``graph``) and from then on every note goes to them, as :attr:`raw`."""

    __slots__ = ("_graph", "_writer")

    def __init__(self, writer: Submit, scope: Scope, mode: Mode, wall: float = 0.0) -> None:
        """``wall``: the exchange's wall-clock start, when the caller has read it already (else now)."""
        wall = wall or time.time()
        read: tuple[int, bytes] | None = scope.get(READ)
        self._writer = writer
        self._graph: RawExchange | None = None
        if read is not None:  # it came whole in one read (server.http): the exchange starts then
            super().__init__(read[0], wall, mode, read[1])
            return
        t0 = now()
        super().__init__(t0, wall, mode, b"")
        query: bytes = scope.get("query_string", b"")
        target: bytes = scope.get("raw_path") or scope["path"].encode()
        target = (target + b"?" + query) if query else target
        self._graph = RawExchange(t0, wall, mode)
        self._graph.client_request = RawRequest(t0, scope["method"], target.decode("latin-1"), scope["headers"])

    def graph(self) -> RawExchange:
        """The exchange as parts, made from what the fields hold at the first call."""
        graph = self._graph
        if graph is None:
            graph = self._graph = self.exchange()
        return graph

    @property
    def raw(self) -> RawExchange:
        return self.graph()

    def wrap(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """The ASGI receive and send of this exchange, recording what passes through them (the
        receive as it is when the request is its read: its body is in it)."""
        if self._graph is None:
            return receive, RecordingSend(self, send)
        return RecordingReceive(self._graph, receive), RecordingSend(self, send)

    def direct(self, direct_body: DirectBody | None) -> DirectBody | None:
        """The server's direct write of body pieces (``server.direct``), noting each piece as sent."""
        if direct_body is None:
            return None
        return RecordingDirect(self, direct_body)

    def respond(self, respond: Respond | None) -> Respond | None:
        """The server's whole-answer write (``Exchange.answer``), noting the answer as sent."""
        if respond is None:
            return None
        return RecordingRespond(self, respond)

    def answered(self, t_ns: int, status: int, written: bytes) -> None:
        """The answer, written whole at ``t_ns`` (``respond``)."""
        graph = self._graph
        if graph is None and not self.answer_ns:
            self.answer_ns, self.status, self.written = t_ns, status, written
            return
        self.graph().client_response = RawResponse(t_ns, status, (), [(t_ns, written)], True, True)

    def upstream_read(self, piece: bytes, opened: RawResponse | None = None, t_ns: int = 0) -> None:
        """Each piece read from the upstream (at ``t_ns``, or now); ``b""`` when its body ended.
        ``opened``: the response the piece belongs to; a record holds one upstream answer, so pieces
        of another (n fanned out: the copies' answers) are not mixed into it."""
        response = self.graph().upstream_response
        if response is not None and (opened is None or opened is response):
            if piece:
                response.reads.append((t_ns or now(), piece))
            else:
                response.complete = True

    def upstream_sent(self, t_ns: int, response: UpstreamResponse, body: bytes | None) -> None:
        """The upstream request (sent at ``t_ns``) and its response's head, received now, from the
        gateway's own client (``Exchange.upstream_sent``): a later one replaces it, as in
        :meth:`upstream_opened`."""
        sent = response.request
        head, wire = sent.head, sent.wire
        if self._graph is None and head is not None and wire is not None:
            self.sent_ns, self.method, self.url, self.head = t_ns, sent.method, sent.url, head
            self.body, self.up_status, self.reads = body or b"", response.status, wire
            return
        self.upstream_opened(t_ns, response, body)

    def upstream_opened(self, t_ns: int, response: UpstreamResponse, body: bytes | None) -> RawResponse:
        """The upstream request (sent at ``t_ns``) and its response's head, received now, as parts."""
        sent = response.request
        head = sent.head  # the head as written, whole (one object to frame), when the client gives it
        request = RawRequest(t_ns, sent.method, sent.url, head if head is not None else sent.headers)
        request.body.append(body or b"")
        graph = self.graph()
        graph.upstream_request = request
        wire = sent.wire
        if wire is not None:  # the connection notes the reads of the answer itself: its head is in them
            # (its time is that of the read that completed the head, read back with it; this one
            # stands in only if none did)
            opened = RawResponse(t_ns, response.status, (), wire, wire=True)
        else:
            opened = RawResponse(now(), response.status, list(response.headers))
        graph.upstream_response = opened
        return opened

    def end(self, error: str | None = None, profile: str | None = None) -> None:
        """The exchange is over (``error``: why it broke off; ``profile``: the one its request was
        prepared for): the exchange goes to the writer."""
        end_ns = now()
        graph = self._graph
        if graph is None:  # plain: any answer was written whole
            if error is None and not self.answer_ns:
                error = "no response was sent: the client went away first"
            self.end_ns, self.profile, self.error = end_ns, profile, error
            self._writer.submit_plain(self)
            return
        graph.end_ns = end_ns
        graph.profile = profile
        response = graph.client_response
        if error is None and response is None:
            error = "no response was sent: the client went away first"
        elif error is None and response is not None and not response.complete:
            error = "the client went away before the response ended"
        graph.error = error
        self._writer.submit(graph)


class RecordingReceive:
    """The ASGI receive, noting the request body's pieces and when the last arrived."""

    __slots__ = ("_raw", "_receive")

    def __init__(self, raw: RawExchange, receive: Receive) -> None:
        self._raw, self._receive = raw, receive

    async def __call__(self) -> Message:
        message = await self._receive()
        request = self._raw.client_request
        if request is not None and message["type"] == "http.request":
            request.t_ns = now()
            request.body.append(message.get("body", b""))
        return message


class RecordingSend:
    """The ASGI send, noting the response head and each body piece as it goes."""

    __slots__ = ("_recorder", "_send")

    def __init__(self, recorder: Recorder, send: Send) -> None:
        self._recorder, self._send = recorder, send

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            response = self._recorder.graph().client_response
            if response is not None:
                response.reads.append((now(), message.get("body", b"")))
                response.complete = not message.get("more_body", False)
        elif kind == "http.response.start":
            self._recorder.graph().client_response = RawResponse(now(), message["status"], message.get("headers", []))
        await self._send(message)


class RecordingRespond:
    """The server's ``respond``: a whole answer, noted as the bytes the server wrote (its head and
    body, read back by ``server.capture_wire``: no list of header pairs to frame), complete (a head
    the server refused to write is noted as the send chain notes a start, without a body)."""

    __slots__ = ("_recorder", "_respond")

    def __init__(self, recorder: Recorder, respond: Respond) -> None:
        self._recorder, self._respond = recorder, respond

    def __call__(self, status: int, headers: Headers, body: bytes) -> bytes | None:
        t_ns = now()
        try:
            written = self._respond(status, headers, body)
        except BaseException:
            self._recorder.graph().client_response = RawResponse(t_ns, status, headers)
            raise
        if written is None:
            return None  # nothing written: the answer goes through the send chain, noted there
        self._recorder.answered(t_ns, status, written)
        return written


class RecordingDirect:
    """The server's ``direct_body``: the (ready, write) it gives, with the write noting each piece."""

    __slots__ = ("_direct", "_recorder")

    def __init__(self, recorder: Recorder, direct: DirectBody) -> None:
        self._recorder, self._direct = recorder, direct

    def __call__(self, scope: object) -> tuple[Callable[[], bool], Callable[[bytes], None]] | None:
        found = self._direct(scope)
        if found is None:
            return None
        ready, write = found
        return ready, RecordingWrite(self._recorder.graph(), write)


class RecordingWrite:
    __slots__ = ("_raw", "_write")

    def __init__(self, raw: RawExchange, write: Callable[[bytes], None]) -> None:
        self._raw, self._write = raw, write

    def __call__(self, data: bytes) -> None:
        response = self._raw.client_response
        if response is not None:
            response.reads.append((now(), data))
        self._write(data)
