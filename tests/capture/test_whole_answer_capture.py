"""A plain answer the server writes whole (its ``oaishim.respond`` extension: head and body in one
call) is recorded as the send chain records its two messages: the same status, headers and body,
complete. The capture no longer turns the whole write off; these tests hold the two paths to one
record, and show which path each run took."""

from __future__ import annotations

import http.client
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from _apps import RunningApp, chat_answer, post

from oaishim.capture.raw import PlainExchange, RawExchange, RawResponse, to_tuple
from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes
from oaishim.server.app import Gateway
from oaishim.server.capture_wire import read_wire
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.exchange import READ, RESPOND
from oaishim.server.recorder import Recorder, RecordingRespond, RecordingSend
from oaishim.server.recording import Recording

PLAIN = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = orjson.dumps(chat_answer("Hello!", answer_id="chatcmpl-7", prompt_tokens=3, completion_tokens=2))


async def backend(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


class Extension:
    """Between the HTTP server and the gateway: counts the whole writes (``keep``), or takes the
    extension away, so the answer goes as its two messages."""

    def __init__(self, app: Any, *, keep: bool) -> None:
        self.app, self.keep = app, keep
        self.written: list[bool] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        extensions = dict(scope.get("extensions") or {})
        respond = extensions.pop(RESPOND, None)
        if self.keep and respond is not None:

            def counted(status: int, headers: Any, body: bytes) -> bytes | None:
                done: bytes | None = respond(status, headers, body)
                self.written.append(done is not None)
                return done

            extensions[RESPOND] = counted
        if scope["type"] == "http":
            scope["extensions"] = extensions
        await self.app(scope, receive, send)


def captured(tmp_path: Path, *, keep: bool) -> tuple[dict[str, Any], bytes, list[bool]]:
    folder = tmp_path / ("whole" if keep else "messages")
    with RunningApp(backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,))
        gateway = Extension(Gateway(Settings(models=(route,), capture_dir=folder)), keep=keep)
        with RunningApp(gateway) as gw:
            status, body = post(gw.url + "/v1/chat/completions", PLAIN)
            assert status == 200
    (record,) = CaptureReader(folder).records()
    return record, body, gateway.written


def test_an_answer_written_whole_is_recorded_as_its_two_messages(tmp_path: Path) -> None:
    whole, whole_body, written = captured(tmp_path, keep=True)
    messages, messages_body, untouched = captured(tmp_path, keep=False)
    assert written == [True] and untouched == []  # each run took the path it was meant to
    assert whole["error"] is None and messages["error"] is None
    for record, received in ((whole, whole_body), (messages, messages_body)):
        response = record["client"]["response"]
        assert body_bytes(response) == received and response["complete"] is True
        assert orjson.loads(received)["choices"][0]["message"]["content"] == "Hello!"

    def comparable(record: dict[str, Any]) -> dict[str, Any]:
        response = record["client"]["response"]
        varying = {"x-request-id", "date"}
        return {
            "status": response["status"],
            "headers": [h for h in response["headers"] if h[0].lower() not in varying],
            "body": orjson.loads(body_bytes(response)) | {"id": None, "created": None},
            "findings": record["findings"],
        }

    assert comparable(whole) == comparable(messages)


def test_the_gateways_plain_exchange_is_handed_over_as_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain request (its read, the answer written whole, the gateway's own upstream client's
    head and reads) reaches the writer as the recorder's fields (``submit_plain``, which the
    capture process's link frames without making parts), and as parts it is the shape
    ``capture.raw`` frames as one flat tuple: were either not so, each capture would pay for the
    slower form without a test failing."""
    lengths: list[int] = []
    plain: list[PlainExchange] = []
    with RunningApp(backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,))
        gateway = Gateway(Settings(models=(route,), capture_dir=tmp_path))
        assert isinstance(gateway.recording, Recording)
        writer = gateway.recording.writer
        submit, submit_plain = writer.submit, writer.submit_plain

        def noted(raw: RawExchange) -> bool:
            lengths.append(len(to_tuple(raw)))
            return submit(raw)

        def noted_plain(fields: PlainExchange) -> bool:
            plain.append(fields)
            return submit_plain(fields)

        monkeypatch.setattr(writer, "submit", noted)
        monkeypatch.setattr(writer, "submit_plain", noted_plain)
        with RunningApp(gateway) as gw:  # sent as wrk sends it: head and body in one write
            address = urlsplit(gw.url)
            body = orjson.dumps(PLAIN)
            head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {address.netloc}\r\ncontent-type: application/json\r\n"
            with socket.create_connection((str(address.hostname), int(address.port or 80)), timeout=10) as sock:
                sock.sendall(head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body)
                answer = http.client.HTTPResponse(sock)
                answer.begin()
                received = answer.read()
    assert answer.status == 200 and len(plain) == 1 and lengths == [16]
    assert plain[0].read.startswith(head.encode()) and plain[0].written.endswith(received)
    (record,) = CaptureReader(tmp_path).records()  # and the record is whole
    assert record["error"] is None and record["client"]["request"]["method"] == "POST"
    assert body_bytes(record["client"]["response"]) == received and record["upstream"]["response"]["complete"]


class Writes:
    """A writer that keeps what it is handed."""

    def __init__(self) -> None:
        self.got: list[RawExchange] = []
        self.plain = 0

    def submit(self, exchange: RawExchange) -> bool:
        self.got.append(exchange)
        return True

    def submit_plain(self, plain: PlainExchange) -> bool:
        self.plain += 1
        return self.submit(plain.exchange())


def recorder(read: bool, writer: Writes | None = None) -> Recorder:
    """A recorder of a request that came as one read (``read``: noted as fields until another
    kind of note comes), or as a scope (noted as parts from the start)."""
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/x", "headers": [], "query_string": b""}
    if read:
        scope[READ] = (time.perf_counter_ns(), b"POST /v1/x HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
    return Recorder(writer or Writes(), scope, "gateway", 1.5)


@pytest.mark.parametrize("read", [True, False], ids=["read", "scope"])
@pytest.mark.parametrize("outcome", ["written", "refused", "raised"])
def test_the_recording_respond_notes_only_what_was_written(outcome: str, read: bool) -> None:
    writer = Writes()
    rec = recorder(read, writer)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]

    wrote = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

    def respond(status: int, headers: Any, body: bytes) -> bytes | None:
        if outcome == "raised":
            raise ConnectionResetError("the client went away")
        return wrote if outcome == "written" else None

    recording = RecordingRespond(rec, respond)
    if outcome == "raised":
        with pytest.raises(ConnectionResetError):
            recording(200, headers, b"{}")
    else:
        assert recording(200, headers, b"{}") is (wrote if outcome == "written" else None)
    rec.end()
    (ended,) = writer.got
    # as fields only while nothing but the whole answer was noted
    assert writer.plain == (1 if read and outcome != "raised" else 0)
    got = ended.client_response
    if outcome == "refused":  # nothing sent: the send chain sends it next, and notes it there
        assert got is None and ended.error == "no response was sent: the client went away first"
        return
    assert got is not None
    if outcome == "raised":  # the head as given, nothing written
        assert (got.status, got.headers, got.reads, got.complete, got.wire) == (200, headers, [], False, False)
        return
    # the bytes the server wrote, whole, read back (server.capture_wire) to the head and body
    assert (got.reads, got.complete, got.wire) == ([(got.t_ns, wrote)], True, True)
    back = read_wire(got)
    assert back is not None and not back.wire
    assert (back.status, back.headers, back.complete) == (200, headers, True)
    assert back.reads == [(got.t_ns, b"{}")]


@pytest.mark.parametrize("read", [True, False], ids=["read", "scope"])
def test_a_refused_whole_write_is_noted_once_by_the_send_chain(read: bool) -> None:
    """Refused, the answer goes as two messages through the recording send: one response, not two."""
    import asyncio

    writer = Writes()
    rec = recorder(read, writer)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        headers = [(b"content-type", b"application/json")]
        assert RecordingRespond(rec, lambda status, headers, body: None)(200, headers, b"{}") is None
        chain = RecordingSend(rec, send)
        await chain({"type": "http.response.start", "status": 200, "headers": headers})
        await chain({"type": "http.response.body", "body": b"{}"})

    asyncio.run(run())
    rec.end()
    (ended,) = writer.got
    assert writer.plain == 0  # (the send chain's notes are parts)
    response = ended.client_response
    assert isinstance(response, RawResponse) and [piece for _, piece in response.reads] == [b"{}"]
    assert response.complete and len(sent) == 2 and ended.error is None
    request = ended.client_request  # what was noted before the chain's first message is kept
    assert request is not None and request.wire == read
