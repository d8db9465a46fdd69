"""``mock`` (matching, /v1/models, timing, misses, a recording that broke off), the logging proxy
(bytes untouched, an unreachable upstream, a client that leaves), ``replay`` (same and changed
answers) and ``inspect`` (list and one exchange), the last three through their command lines."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from _apps import EchoBackend, RunningApp, backend_record, chat_chunks, free_port, get, post, write_store

from oaishim.capture.playbook import Playbook
from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import body_bytes
from oaishim.capture_tools.mock import MockBackend
from oaishim.capture_tools.proxy import CaptureProxy
from oaishim.check import check, exchange_from_bytes
from oaishim.commands.capture import add_parsers
from oaishim.profiles import get_profile
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import Recording
from oaishim.transform.request import prepare

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
PLAIN = {"model": "tiny", "messages": [{"role": "user", "content": "plain"}]}
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1,
        "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
)


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code: int = args.run(args)
    return code


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "recorded"
    write_store(
        folder,
        [
            backend_record(CHAT, chat_chunks(["a", "b", "c"]), step_ms=50),
            backend_record(PLAIN, [ANSWER], content_type="application/json"),
            backend_record(
                {**PLAIN, "messages": [{"role": "user", "content": "twice"}]},
                [b'{"n": 1}'],
                content_type="application/json",
            ),
            backend_record(
                {**PLAIN, "messages": [{"role": "user", "content": "twice"}]},
                [b'{"n": 2}'],
                content_type="application/json",
            ),
        ],
    )
    return folder


def test_mock_matches_method_path_and_normalised_body(store: Path) -> None:
    book = Playbook.of(CaptureReader(store).records())
    with RunningApp(MockBackend(book, "fast")) as mock:
        reordered = {"messages": PLAIN["messages"], "model": "tiny"}  # other key order, same JSON
        assert post(mock.url + "/v1/chat/completions", reordered) == (200, ANSWER)
        twice = {**PLAIN, "messages": [{"role": "user", "content": "twice"}]}
        answers = [post(mock.url + "/v1/chat/completions", twice)[1] for _ in range(3)]
        assert answers == [b'{"n": 1}', b'{"n": 2}', b'{"n": 1}']  # in turn
        status, body = post(mock.url + "/v1/chat/completions", {**PLAIN, "temperature": 0.5})
        assert status == 404 and not [f for f in check(exchange_from_bytes(body, status=404)) if f.severity == "error"]
        assert (
            orjson.loads(body)["error"]["code"] == "mock_no_match"
            and "4 recorded" in orjson.loads(body)["error"]["message"]
        )
        status, body = post(mock.url + "/v1/completions", PLAIN)
        assert status == 404
        status, models = get(mock.url + "/v1/models")
        assert status == 200 and [m["id"] for m in orjson.loads(models)["data"]] == ["tiny"]
        assert get(mock.url + "/health")[0] == 200


def test_mock_timing_original_keeps_the_pace_and_fast_does_not(store: Path) -> None:
    book = Playbook.of(CaptureReader(store).records())

    def timed(timing: str) -> tuple[float, bytes]:
        with RunningApp(MockBackend(book, timing)) as mock:  # type: ignore[arg-type]
            started = time.monotonic()
            status, body = post(mock.url + "/v1/chat/completions", CHAT)
            assert status == 200
            return time.monotonic() - started, body

    slow, slow_body = timed("original")
    fast, fast_body = timed("fast")
    assert slow_body == fast_body == b"".join(chat_chunks(["a", "b", "c"]))
    assert slow >= 0.35  # the last of the pieces was recorded 350 ms after the request
    assert slow - fast >= 0.25  # fast sends them at once: the same work, without the waits


def test_mock_breaks_off_where_the_recording_did(tmp_path: Path) -> None:
    raw = backend_record(CHAT, chat_chunks(["a", "b"])[:2], step_ms=1)
    assert raw.upstream_response is not None
    raw.upstream_response.complete = False
    write_store(tmp_path, [raw])
    with RunningApp(MockBackend(Playbook.of(CaptureReader(tmp_path).records()), "fast")) as mock:

        async def read() -> bytes:
            async with (
                aiohttp.ClientSession() as session,
                session.post(mock.url + "/v1/chat/completions", json=CHAT) as r,
            ):
                return await r.read()

        with pytest.raises(aiohttp.ClientPayloadError):
            asyncio.run(read())


def test_proxy_passes_odd_bytes_through_and_records_them(tmp_path: Path) -> None:
    odd = [
        b": keep-alive\r\n\r\n",
        b'data: {"a":\r\n',
        b'data: 1}\r\n\r\nerror: {"message": "x"}\n\n',
        b"\xff\xfe tail",
    ]
    recorded = tmp_path / "odd"
    write_store(recorded, [backend_record(CHAT, odd, step_ms=1)])
    with (
        RunningApp(MockBackend(Playbook.of(CaptureReader(recorded).records()), "fast")) as mock,
        RunningApp(CaptureProxy(mock.url, Recording(tmp_path / "cap", mode="proxy"))) as proxy,
    ):
        status, body = post(proxy.url + "/v1/chat/completions", CHAT)
    assert status == 200 and body == b"".join(odd)
    (record,) = CaptureReader(tmp_path / "cap").records()
    assert body_bytes(record["client"]["response"]) == body_bytes(record["upstream"]["response"]) == body
    assert "body_b64" in record["client"]["response"]  # not UTF-8: stored as base64, losslessly


def test_proxy_answers_an_unreachable_upstream_and_records_it(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with RunningApp(CaptureProxy(dead, Recording(tmp_path, mode="proxy"))) as proxy:
        status, body = post(proxy.url + "/v1/chat/completions", CHAT)
    assert status == 502 and orjson.loads(body)["error"]["code"] == "upstream_unreachable"
    (record,) = CaptureReader(tmp_path).records()
    assert record["upstream"] is None and record["client"]["response"]["status"] == 502
    assert "No upstream replica" in record["error"]


def test_gateway_records_a_client_that_goes_away(tmp_path: Path) -> None:
    recorded = tmp_path / "slow"
    sent = prepare("chat", CHAT, get_profile("vllm@0.32")).body  # what the gateway sends
    # 0.8 s of stream: the client leaves after the first piece, long before the end
    write_store(recorded, [backend_record(sent, chat_chunks(["x"] * 14), step_ms=50)])
    with RunningApp(MockBackend(Playbook.of(CaptureReader(recorded).records()), "original")) as mock:
        settings = Settings(
            models=(ModelRoute("tiny", (mock.url,), profile="vllm@0.32"),), capture_dir=tmp_path / "cap"
        )
        with RunningApp(Gateway(settings)) as gw:

            async def leave_early() -> None:
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(gw.url + "/v1/chat/completions", json=CHAT) as response,
                ):
                    await response.content.readany()

            asyncio.run(leave_early())
            deadline = time.monotonic() + 5  # until the gateway has noticed and its writer has written
            while not list(CaptureReader(tmp_path / "cap").records()) and time.monotonic() < deadline:
                time.sleep(0.01)
    (record,) = CaptureReader(tmp_path / "cap").records()
    assert record["error"] == "the client went away before the response ended"
    assert record["client"]["response"]["complete"] is False
    assert record["upstream"]["response"]["complete"] is False  # the gateway closed it at once


def _echo_capture(folder: Path, backend: EchoBackend) -> None:
    with RunningApp(backend) as upstream, RunningApp(CaptureProxy(upstream.url, Recording(folder, mode="proxy"))) as px:
        post(px.url + "/v1/chat/completions", CHAT)
        post(px.url + "/v1/chat/completions", PLAIN)


def test_replay_reports_same_against_the_same_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = EchoBackend()
    _echo_capture(tmp_path / "cap", backend)
    with RunningApp(backend) as again:
        assert cli("replay", str(tmp_path / "cap"), "--to", again.url, "--concurrency", "2") == 0
    out = capsys.readouterr().out
    assert "2 replayed: 2 same, 0 different" in out


def test_replay_reports_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _echo_capture(tmp_path / "cap", EchoBackend())
    changed = tmp_path / "changed"
    plain = orjson.loads(ANSWER)
    plain["choices"][0]["message"]["content"] = "Hi there"  # what the echo backend says: only "x" is new
    stream = chat_chunks(["Hi", " you"], finish="length")
    stream[1] = stream[1].replace(b'"delta":{', b'"delta":{"reasoning_content":"hm",')
    write_store(
        changed,
        [
            backend_record(CHAT, stream),
            backend_record(PLAIN, [orjson.dumps({**plain, "x": {"y": 1}})], content_type="application/json"),
        ],
    )
    with RunningApp(MockBackend(Playbook.of(CaptureReader(changed).records()), "fast")) as mock:
        assert cli("replay", str(tmp_path / "cap"), "--to", mock.url, "--format", "json") == 1
    report = orjson.loads(capsys.readouterr().out)["exchanges"]
    kinds: dict[int, set[str]] = {i: {d["kind"] for d in e["differences"]} for i, e in enumerate(report)}
    messages = [d["message"] for e in report for d in e["differences"]]
    assert {"fields", "text", "finish_reason", "findings"} <= kinds[0]
    assert "+ $.choices[*].delta.reasoning_content" in messages
    assert "choice 0: stop -> length" in messages
    assert kinds[1] == {"fields", "findings"} and "+ $.x.y" in messages
    with RunningApp(MockBackend(Playbook.of(CaptureReader(changed).records()), "fast")) as mock:
        ignoring = ["--ignore", "fields", "--ignore", "text", "--ignore", "finish_reason", "--ignore", "findings"]
        assert cli("replay", str(tmp_path / "cap"), "--to", mock.url, *ignoring) == 0


def test_inspect_lists_and_shows_one_exchange(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("inspect", str(store)) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith("ID") and listing[-1] == "4 exchange(s)"
    assert "POST /v1/chat/completions stream" in listing[1]
    first_id = listing[1].split()[0]
    assert cli("inspect", str(store), "--id", first_id[:14]) == 0
    shown = capsys.readouterr().out
    assert "stream: 6 event(s), 6 read(s)" in shown
    for line in ("100.0 ms  role=assistant", '150.0 ms  "a"', "300.0 ms  finish_reason=stop", "350.0 ms  [DONE]"):
        assert line in shown
    assert '"content": "abc"' in shown and "findings (client): 1" in shown and "stream.first-delta" in shown
    assert cli("inspect", str(store), "--id", "nope") == 2
    assert cli("inspect", str(store), "--path", "completions", "--limit", "1", "--format", "json") == 0
    assert len(orjson.loads(capsys.readouterr().out)["exchanges"]) == 1


def test_mock_command_refuses_an_empty_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_store(tmp_path, [])
    assert cli("mock", str(tmp_path)) == 2
    assert "no exchange" in capsys.readouterr().err
    assert cli("capture", "--upstream", "ftp://x", "--out", str(tmp_path)) == 2
    assert cli("capture", "--upstream", "http://x", "--out", str(tmp_path), "--redact", "a[") == 2
