"""The upstream side of a record is what went over the wire. The request: the head the gateway
wrote (the client hands the recorder the head it built, one ``bytes``, not a list of pairs), its
lines in order, the ``host`` and ``content-length`` the wire carried included, the same pairs the
backend received; the gateway's own head and the capture proxy's forwarded one alike. The answer:
the reads that carried it (``server.capture_wire``), so its head as the backend wrote it, line for line,
and its body, whether plain or streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from _apps import RunningApp, chat_answer, chat_chunks, get, post

from oaishim.capture.raw import head_pairs
from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes
from oaishim.capture_tools.proxy import CaptureProxy
from oaishim.server.app import Gateway
from oaishim.server.asgi import read_body
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import Recording

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = orjson.dumps(chat_answer("Hi"))


class Backend:
    """Keeps each request's headers as it received them (names, values, order) and its body."""

    def __init__(self) -> None:
        self.seen: list[tuple[list[list[str]], bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive, 1 << 20)
        self.seen.append(([[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]], body))
        if orjson.loads(body).get("stream"):
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            for piece in chat_chunks(["Hi", " there", "!"]):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})


def _upstream_request(folder: Path) -> dict[str, Any]:
    (record,) = CaptureReader(folder).records()
    request: dict[str, Any] = record["upstream"]["request"]
    return request


def test_the_gateways_record_holds_the_head_it_wrote(tmp_path: Path) -> None:
    backend = Backend()
    folder = tmp_path / "capture"
    with RunningApp(backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="llamacpp@b9174")
        with RunningApp(Gateway(Settings(models=(route,), capture_dir=folder))) as gw:
            assert post(gw.url + "/v1/chat/completions", CHAT, {"x-request-id": "req_wire_head"})[0] == 200
    ((received, body),) = backend.seen
    request = _upstream_request(folder)
    assert request["method"] == "POST" and request["target"] == upstream.url + "/v1/chat/completions"
    assert request["headers"] == received  # every line, in the order it went
    names = [name for name, _ in request["headers"]]
    assert names[0] == "host" and ["content-length", str(len(body))] in request["headers"]
    assert ["x-request-id", "req_wire_head"] in request["headers"]
    assert request["target"] == upstream.url + "/v1/chat/completions" and request["method"] == "POST"


def test_the_proxys_record_holds_the_head_it_forwarded(tmp_path: Path) -> None:
    backend = Backend()
    folder = tmp_path / "proxy"
    with RunningApp(backend) as upstream, RunningApp(CaptureProxy(upstream.url, Recording(folder, mode="proxy"))) as px:
        assert post(px.url + "/v1/chat/completions", CHAT, {"x-trace": "a:b"})[0] == 200
    ((received, _),) = backend.seen
    assert _upstream_request(folder)["headers"] == received
    assert ["x-trace", "a:b"] in received  # a colon in a value stays in the value


@pytest.mark.parametrize("stream", [False, True])
def test_the_gateways_record_holds_the_answer_as_the_backend_wrote_it(tmp_path: Path, stream: bool) -> None:
    folder = tmp_path / "capture"
    with RunningApp(Backend()) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="llamacpp@b9174")
        with RunningApp(Gateway(Settings(models=(route,), capture_dir=folder))) as gw:
            assert post(gw.url + "/v1/chat/completions", {**CHAT, "stream": stream})[0] == 200
    (record,) = CaptureReader(folder).records()
    answer = record["upstream"]["response"]
    sent = b"".join(chat_chunks(["Hi", " there", "!"])) if stream else ANSWER
    # the backend's server wrote the app's headers, then its own framing line
    framing = ["transfer-encoding", "chunked"] if stream else ["content-length", str(len(ANSWER))]
    want = [["content-type", "text/event-stream" if stream else "application/json"], framing]
    assert (answer["status"], answer["headers"], body_bytes(answer), answer["complete"]) == (200, want, sent, True)
    assert sum(size for _, size in answer["reads"]) == len(sent) and answer["t"] <= answer["reads"][0][0]
    assert record["timings"]["upstream_ttfb_ms"] is not None


@pytest.mark.parametrize(
    ("head", "pairs"),
    [
        (
            b"POST /v1/x HTTP/1.1\r\nhost: h:1\r\ncontent-length: 2\r\n\r\n",
            [(b"host", b"h:1"), (b"content-length", b"2")],
        ),
        (b"HTTP/1.1 200 OK\r\nx-a:  spaced \t\r\nx-b:\r\n\r\n", [(b"x-a", b"spaced"), (b"x-b", b"")]),
        (b"HTTP/1.1 204 No Content\r\n\r\n", []),
        ([("content-type", "application/json")], [("content-type", "application/json")]),
    ],
)
def test_a_wire_heads_pairs(head: Any, pairs: list[tuple[Any, Any]]) -> None:
    assert head_pairs(head) == pairs


class Lister:
    """A backend that lists one model and answers anything else with the chat answer, keeping the
    method and path of each request it got."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive, 1 << 20)
        self.got.append((scope["method"], scope["path"]))
        body = orjson.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        if scope["path"] != "/v1/models":
            body = ANSWER if scope["method"] == "POST" else b"{}"
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def test_what_the_gateway_asks_a_backend_for_itself_is_not_in_a_records_upstream_part(tmp_path: Path) -> None:
    """A profile's detection and the backend's model list are the gateway's own requests, made while
    a client's waits: the record's upstream part is the request sent for the client (none for the
    model list), though the upstream client hands each request it sends to the exchange's recorder."""
    backend = Lister()
    folder = tmp_path / "capture"
    with RunningApp(backend) as upstream:
        routes = (
            ModelRoute(name="tiny", upstreams=(upstream.url,), profile="auto"),
            ModelRoute(name="*", upstreams=(upstream.url,), profile="generic"),
        )
        with RunningApp(Gateway(Settings(models=routes, capture_dir=folder))) as gw:
            assert post(gw.url + "/v1/chat/completions", CHAT)[0] == 200
            assert get(gw.url + "/v1/models")[0] == 200
    asked = [path for method, path in backend.got if method == "GET"]
    assert "/v1/models" in asked and len(asked) >= 2  # the detection's GETs, then the listing's
    records = {r["client"]["request"]["target"]: r for r in CaptureReader(folder).records()}
    chat, listing = records["/v1/chat/completions"], records["/v1/models"]
    assert chat["upstream"]["request"]["method"] == "POST"
    assert chat["upstream"]["request"]["target"] == upstream.url + "/v1/chat/completions"
    assert listing["upstream"] is None
