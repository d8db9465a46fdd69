"""Gateway bugs the probe found against the real llama.cpp server, each pinned by a test here.

``stream.n2`` (n: 2 streamed): llama.cpp sends each choice's role chunk (``content: null``, no
text) as soon as its slot starts, and the text of whichever slot runs first; choice 1's text may
come before choice 0's. The normaliser numbered choices when it first *saw* them but opened them
(role chunk) at their first text, so choice 1 could open before choice 0 — a stream the official
API never sends (checker ``stream.choice-index``), seen intermittently in the probe's live run.
"""

from __future__ import annotations

import socketserver
from typing import Any

import orjson

from oaishim.check import CheckOptions, Exchange, check
from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe
from oaishim.wire.sse import SSEDecoder


def _llama(index: int, delta: dict[str, Any], finish: str | None = None) -> str:
    chunk = {
        "choices": [{"finish_reason": finish, "index": index, "delta": delta}],
        "created": 1,
        "id": "chatcmpl-x",
        "model": "tiny",
        "object": "chat.completion.chunk",
    }
    return orjson.dumps(chunk).decode()


def _run(events: list[str], *, chat: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    pipe = StreamPipe(ResponseContext(model="tiny", chat=chat))
    raw = b"".join(pipe.feed(b"data: " + e.encode() + b"\n\n") for e in events) + pipe.flush()
    decoder = SSEDecoder()
    sse = decoder.feed(raw) + decoder.flush()
    request = {"model": "tiny", "messages": [], "stream": True, "n": 2}
    findings = check(Exchange(request, 200, {"content-type": "text/event-stream"}, events=sse), CheckOptions())
    chunks = [orjson.loads(e.data) for e in sse if e.data != "[DONE]"]
    return chunks, [f.rule for f in findings if f.severity == "error"]


def test_choices_open_in_index_order_whatever_order_the_backend_starts_them() -> None:
    events = [
        _llama(1, {"role": "assistant", "content": None}),
        _llama(1, {"content": "one"}),  # choice 1's text arrives first ...
        _llama(0, {"role": "assistant", "content": None}),
        _llama(0, {"content": "zero"}),
        _llama(1, {}, "length"),
        _llama(0, {}, "length"),
    ]
    chunks, errors = _run(events)
    assert errors == []
    opened = [c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"]]
    assert opened == [0, 1]
    # ... and stays one choice: its text and its finish carry the index it was opened with
    by_index: dict[int, str] = {}
    for chunk in chunks:
        (choice,) = chunk["choices"]
        by_index[choice["index"]] = by_index.get(choice["index"], "") + (choice["delta"].get("content") or "")
    assert sorted(by_index.values()) == ["one", "zero"]


def test_role_chunks_before_any_text_keep_the_order_too() -> None:
    events = [
        _llama(0, {"role": "assistant", "content": None}),
        _llama(1, {"role": "assistant", "content": None}),
        _llama(1, {"content": "b"}),
        _llama(0, {"content": "a"}),
        _llama(0, {}, "length"),
        _llama(1, {}, "length"),
    ]
    chunks, errors = _run(events)
    assert errors == []
    assert [c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"]] == [0, 1]


# ---------------------------------------------------------------------------------------------------
# A backend that closes an idle keep-alive connection just as the gateway reuses it.
#
# llama-server answers with ``Keep-Alive: timeout=5, max=100`` and closes idle connections after
# 5 s; the gateway's pool kept them for 15 s (aiohttp's default), so a request could be written
# into a connection the server was closing. Under load the probe's live run saw this as sporadic
# 502s ("no upstream replica could be reached (ServerDisconnectedError)", "no valid HTTP response
# (ClientOSError)"). The server below makes the race certain: it answers the first request of each
# connection and closes the connection, unanswered, when a second request arrives on it.

_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "logprobs": None, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


class _OneRequestPerConnection(socketserver.BaseRequestHandler):
    def _read_request(self, buffer: bytes) -> bytes | None:
        while b"\r\n\r\n" not in buffer:
            data = self.request.recv(65536)
            if not data:
                return None
            buffer += data
        head, _, rest = buffer.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(rest) < length:
            data = self.request.recv(65536)
            if not data:
                return None
            rest += data
        return rest[length:]

    def handle(self) -> None:
        rest = self._read_request(b"")
        if rest is None:
            return
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5, max=100\r\n"
            b"Content-Length: " + str(len(_ANSWER)).encode() + b"\r\n\r\n"
        )
        self.request.sendall(head + _ANSWER)
        self._read_request(rest)  # the next request on this connection: closed unanswered
        self.request.close()


def test_a_keep_alive_connection_the_backend_closed_is_not_a_502() -> None:
    import sys
    import threading
    import urllib.request
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from _servers import RunningGateway, free_port

    from oaishim.server.config import ModelRoute, Settings

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _OneRequestPerConnection)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        route = ModelRoute(name="m", upstreams=(f"http://127.0.0.1:{server.server_address[1]}",), profile="openai")
        with RunningGateway(Settings(models=(route,), port=free_port())) as gateway:
            body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            for _ in range(3):
                request = urllib.request.Request(
                    gateway.url + "/v1/chat/completions", body, {"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    assert response.status == 200
                    assert orjson.loads(response.read())["choices"][0]["message"]["content"] == "hi"
    finally:
        server.shutdown()
        server.server_close()
