"""``/v1/responses`` through the gateway, in process: the request takes the chat path to a simulated
TensorRT-LLM (``_trt.TrtSim``: it refuses unknown fields and history ``reasoning_content``, and
writes ``<think>`` and tool calls as text), the answer comes back as Responses, and the store keeps
what ``previous_response_id``, ``GET``, ``DELETE`` and ``input_items`` read."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake import APPS, FakeResponse, FakeUpstream, _call, call
from _responses import (
    CITIES,
    INSTRUCTIONS,
    MODEL,
    TOOLS,
    calls,
    errors,
    events,
    final,
    get,
    post,
    reasoning,
    text,
    weather_output,
)
from _servers import Canned
from _trt import ANSWER_CHAT, ANSWER_RESULT, THINK_CHAT, THINK_RESULT, THINK_TOOL, TrtSim

from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings

IN_PROCESS = True
PROFILE = "trtllm@1.4"  # history reasoning goes to TRT as `reasoning`, which TrtSim accepts and records
KEY_A, KEY_B = "sk-tenant-a-0123456789", "sk-tenant-b-0123456789"


@pytest.fixture
def trt(backend: FakeUpstream) -> Iterator[TrtSim]:
    sim = TrtSim()
    backend.responder = sim
    yield sim
    backend.responder = None


@pytest.fixture
def gw(gateways: Any) -> str:
    url: str = gateways(PROFILE, state="memory")
    return url


def ask(city: str) -> dict[str, Any]:
    return {"role": "user", "content": f"查看{city}天气"}


# ---------------------------------------------------------------------------------------------------
# One turn, plain and streamed


def test_plain_answer_is_a_response_with_reasoning_split_from_the_think_text(trt: TrtSim, gw: str) -> None:
    status, _, raw = post(gw, {"model": MODEL, "input": "你好"})
    assert status == 200, raw
    body = json.loads(raw)
    assert body["object"] == "response" and body["status"] == "completed" and body["id"].startswith("resp_")
    assert text(body) == ANSWER_CHAT
    assert [part["text"].strip("\n") for item in reasoning(body) for part in item["content"]] == [THINK_CHAT]
    assert errors(raw, {"model": MODEL, "input": "你好"}) == []
    assert body["usage"]["output_tokens"] > 0
    # the backend got a chat request: no Responses field reached it (TrtSim refuses unknown ones)
    assert trt.rejected == [] and trt.requests[-1]["messages"] == [{"role": "user", "content": "你好"}]


def test_stream_is_the_responses_event_grammar_and_its_final_response_is_stored(trt: TrtSim, gw: str) -> None:
    request = {"model": MODEL, "input": [ask("上海")], "instructions": INSTRUCTIONS, "tools": TOOLS, "stream": True}
    status, headers, raw = post(gw, request)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert errors(raw, request, 200, headers) == []
    seen = events(raw)
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    assert seen[0]["type"] == "response.created" and seen[-1]["type"] == "response.completed"
    response = final(raw)
    [call_item] = calls(response)
    assert call_item["name"] == "get_weather" and json.loads(call_item["arguments"]) == {"city": "上海"}
    assert reasoning(response)[0]["content"][0]["text"].strip("\n") == THINK_TOOL.format(
        what="查看上海天气", tool="get_weather"
    )
    # the instructions reached TRT as the system prompt (its template drops developer messages)
    assert trt.rendered[-1][0] == {"role": "system", "content": INSTRUCTIONS}
    status, stored = get(gw, f"/v1/responses/{response['id']}")
    assert status == 200 and stored == response


def test_every_split_of_the_upstream_stream_gives_the_same_clean_stream(trt: TrtSim) -> None:
    """The upstream bytes cut in two at every position (and byte by byte) give one answer, always
    clean: the pipe's decoding state is carried across reads."""
    request = {"model": MODEL, "input": "你好", "stream": True, "store": False}
    answer = trt.generate({}, [{"role": "user", "content": "你好"}])
    body = trt.stream({"model": MODEL, "stream_options": {"include_usage": True}}, answer, 1)
    upstream = SplitUpstream(body)
    app = Gateway(Settings(models=(ModelRoute("*", ("http://x",), PROFILE),), state="memory"), upstream)
    APPS["inproc://split"] = app
    asyncio.run(app.startup())
    try:
        upstream.cut = -1
        status, headers, raw = call("inproc://split/v1/responses", "POST", request)
        assert status == 200 and errors(raw, request, status, headers) == []
        response = final(raw)
        assert (text(response), reasoning(response)[0]["content"][0]["text"].strip("\n")) == (ANSWER_CHAT, THINK_CHAT)
        expected = without_ids(raw)
        assert expected != raw and len(events(expected)) == len(events(raw))  # only the values were masked

        async def every_cut() -> None:  # one event loop for the 5,500 requests: a loop each costs more
            data, json_type = json.dumps(request).encode(), {"content-type": "application/json"}
            for cut in range(len(body) + 1):
                upstream.cut = cut
                reply = await _call(app, "POST", "/v1/responses", data, json_type)
                assert reply.status == 200 and without_ids(reply.body) == expected, cut

        asyncio.run(every_cut())
    finally:
        asyncio.run(app.shutdown())
        APPS.pop("inproc://split")


# The values that differ between two runs of one answer (ids, times), masked in the stream's bytes:
# the rest must be byte for byte the same (a regex: parsing 5,500 streams would cost more than the gateway).
VARYING = re.compile(rb'(?:(?<="id":)|(?<="item_id":)|(?<="created_at":)|(?<="completed_at":))("[^"\\]*"|\d+)')


def without_ids(raw: bytes) -> bytes:
    return VARYING.sub(b'"?"', raw)


class SplitUpstream(FakeUpstream):
    """Serves one stream body cut at ``cut`` (-1: byte by byte)."""

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body, self.cut = body, 0
        self.responder = lambda seen: Canned(body, content_type="text/event-stream")

    async def open(self, *args: Any, **kwargs: Any) -> FakeResponse:
        response = await super().open(*args, **kwargs)
        cut = self.cut

        async def pieces() -> AsyncIterator[bytes]:
            if cut < 0:
                for i in range(len(self.body)):
                    yield self.body[i : i + 1]
            else:
                yield self.body[:cut]
                yield self.body[cut:]
            response.finished = True

        response.pieces = pieces  # type: ignore[method-assign]
        return response


# ---------------------------------------------------------------------------------------------------
# Errors before and after the stream started


def test_an_upstream_error_before_the_stream_is_an_http_error(backend: FakeUpstream, gw: str) -> None:
    backend.push(
        Canned(b'{"object":"error","message":"busy","type":"x","code":503}', 503, headers={"retry-after": "7"})
    )
    status, headers, raw = post(gw, {"model": MODEL, "input": "hi", "stream": True})
    assert status == 503 and headers["retry-after"] == "7"
    assert set(json.loads(raw)["error"]) == {"message", "type", "param", "code"}


def test_a_stream_cut_mid_answer_ends_in_error_and_response_failed(trt: TrtSim, backend: FakeUpstream, gw: str) -> None:
    body = trt.stream({"model": MODEL}, trt.generate({}, [{"role": "user", "content": "你好"}]), 1)
    backend.responder = None
    backend.push(Canned(body, content_type="text/event-stream", cut_after=len(body) // 2))
    request = {"model": MODEL, "input": "你好", "stream": True}
    status, headers, raw = post(gw, request)
    assert status == 200
    assert errors(raw, request, status, headers) == []
    kinds = [e["type"] for e in events(raw)]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
    response = final(raw)
    assert response["status"] == "failed" and response["error"]["code"] == "server_error"


def test_validation_errors_are_the_official_ones(gw: str) -> None:
    status, _, raw = post(gw, {"model": MODEL, "input": "x", "foo": 1})
    assert status == 400 and json.loads(raw)["error"]["code"] == "unknown_parameter"
    status, _, raw = call(gw + "/v1/responses", "POST", b"{not json")
    assert status == 400 and "could not parse the JSON body" in json.loads(raw)["error"]["message"]
    status, _, raw = post(gw, {"model": MODEL, "input": "x", "background": True})
    assert status == 400 and json.loads(raw)["error"]["param"] == "background"
    status, _, raw = call(gw + "/v1/responses", "GET")
    assert status == 405


# ---------------------------------------------------------------------------------------------------
# The store: previous_response_id, store false, tenants, GET / DELETE / input_items


def test_store_false_is_not_kept_and_cannot_be_continued(trt: TrtSim, gw: str) -> None:
    status, _, raw = post(gw, {"model": MODEL, "input": "你好", "store": False})
    assert status == 200
    rid = json.loads(raw)["id"]
    assert get(gw, f"/v1/responses/{rid}")[0] == 404
    status, _, raw = post(gw, {"model": MODEL, "input": "再见", "previous_response_id": rid})
    assert status == 400
    assert json.loads(raw)["error"] == {
        "message": f"Previous response with id '{rid}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_a_response_is_seen_only_by_the_key_that_made_it(trt: TrtSim, gateways: Any) -> None:
    gw = gateways(PROFILE, api_keys=(KEY_A, KEY_B), state="memory")
    status, _, raw = post(gw, {"model": MODEL, "input": "你好"}, KEY_A)
    assert status == 200
    rid = json.loads(raw)["id"]
    assert get(gw, f"/v1/responses/{rid}", KEY_A)[0] == 200
    for target in (f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
        status, body = get(gw, target, KEY_B)
        assert status == 404 and body["error"]["message"] == f"No response found with id '{rid}'."
    assert get(gw, f"/v1/responses/{rid}", KEY_B, "DELETE")[0] == 404
    status, _, raw = post(gw, {"model": MODEL, "input": "x", "previous_response_id": rid}, KEY_B)
    assert status == 400 and json.loads(raw)["error"]["code"] == "previous_response_not_found"
    assert get(gw, f"/v1/responses/{rid}", KEY_A)[0] == 200  # B's delete did not touch it


@pytest.mark.parametrize("stream", [False, True])
def test_item_references_are_the_stored_items_they_name(trt: TrtSim, gateways: Any, stream: bool) -> None:
    """The Vercel AI SDK (store on, its default) sends the reasoning of the turn before as an
    ``item_reference``; the gateway refused every such request before."""
    gw = gateways(PROFILE, api_keys=(KEY_A, KEY_B), state="memory")
    first = {"model": MODEL, "input": [ask("上海")], "instructions": INSTRUCTIONS, "tools": TOOLS, "stream": stream}
    status, _, raw = post(gw, first, KEY_A)
    assert status == 200
    response = final(raw) if stream else json.loads(raw)
    [thought] = reasoning(response)
    [call_item] = calls(response)
    listed = get(gw, f"/v1/responses/{response['id']}/input_items", KEY_A)[1]["data"]
    refs = [{"type": "item_reference", "id": i} for i in (listed[0]["id"], thought["id"], call_item["id"])]
    output = {"type": "function_call_output", "call_id": call_item["call_id"], "output": "上海：多云，18°C"}
    follow = {"model": MODEL, "input": [*refs, output], "instructions": INSTRUCTIONS, "tools": TOOLS, "stream": stream}
    status, _, raw = post(gw, follow, KEY_A)
    assert status == 200, raw
    assert text(final(raw) if stream else json.loads(raw)) == ANSWER_RESULT.format(result="上海：多云，18°C")
    sent = trt.requests[-1]["messages"]
    assert sent[1] == {"role": "user", "content": [{"type": "text", "text": "查看上海天气"}]}
    assert sent[2]["reasoning"] == thought["content"][0]["text"]
    assert sent[2]["tool_calls"][0]["id"] == call_item["call_id"]
    # the item itself, as the listing shows it, and not the reference
    second = final(raw) if stream else json.loads(raw)
    listed = get(gw, f"/v1/responses/{second['id']}/input_items?order=asc", KEY_A)[1]
    assert [i["id"] for i in listed["data"][:3]] == [r["id"] for r in refs]
    assert listed["data"][1]["type"] == "reasoning"
    # unknown, another tenant's, or of a response that was not stored: the official 404
    unstored = json.loads(post(gw, {"model": MODEL, "input": "你好", "store": False}, KEY_A)[2])
    for key, ref in (
        (KEY_B, thought["id"]),
        (KEY_A, "rs_" + "0" * 52),
        (KEY_A, "msg_1"),
        (KEY_A, unstored["output"][-1]["id"]),
    ):
        status, _, raw = post(gw, {"model": MODEL, "input": [{"type": "item_reference", "id": ref}]}, key)
        assert status == 404, raw
        assert json.loads(raw)["error"] == {
            "message": f"Item with id '{ref}' not found. Items are not persisted when `store` is set to false. Try "
            "again with `store` set to true, or remove this item from your input.",
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        }


def test_delete_then_get_is_not_found(trt: TrtSim, gw: str) -> None:
    rid = json.loads(post(gw, {"model": MODEL, "input": "你好"})[2])["id"]
    assert get(gw, f"/v1/responses/{rid}", method="DELETE") == (
        200,
        {"id": rid, "object": "response.deleted", "deleted": True},
    )
    status, body = get(gw, f"/v1/responses/{rid}")
    assert status == 404
    assert body["error"]["message"] == f"No response found with id '{rid}'." and body["error"]["type"] == (
        "invalid_request_error"
    )
    assert get(gw, f"/v1/responses/{rid}", method="DELETE")[0] == 404
    assert get(gw, f"/v1/responses/{rid}?stream=true")[0] == 400


def test_input_items_are_listed_in_pages(trt: TrtSim, gw: str) -> None:
    items = [{"role": "user", "content": f"第{i}句"} for i in range(5)]
    rid = json.loads(post(gw, {"model": MODEL, "input": items})[2])["id"]
    status, first = get(gw, f"/v1/responses/{rid}/input_items?limit=2")
    assert status == 200 and first["has_more"] is True
    assert [i["content"][0]["text"] for i in first["data"]] == ["第4句", "第3句"]  # newest first
    status, rest = get(gw, f"/v1/responses/{rid}/input_items?limit=10&after={first['last_id']}")
    assert [i["content"][0]["text"] for i in rest["data"]] == ["第2句", "第1句", "第0句"] and rest["has_more"] is False
    status, ordered = get(gw, f"/v1/responses/{rid}/input_items?order=asc")
    assert [i["content"][0]["text"] for i in ordered["data"]] == [f"第{i}句" for i in range(5)]
    assert get(gw, f"/v1/responses/{rid}/input_items?limit=0")[0] == 400


def test_a_store_that_cannot_write_fails_the_request_not_the_continuation(
    trt: TrtSim, gateways: Any, tmp_path: Path
) -> None:
    """A store whose file cannot be opened (its path is a folder): a plain request gets the store's
    500, a stream ends in error + response.failed instead of response.completed."""
    gw = gateways(PROFILE, state=str(tmp_path))
    status, _, raw = post(gw, {"model": MODEL, "input": "你好"})
    assert status == 500 and json.loads(raw)["error"]["type"] == "server_error"
    request = {"model": MODEL, "input": "你好", "stream": True}
    status, headers, raw = post(gw, request)
    assert status == 200 and errors(raw, request, status, headers) == []
    assert [e["type"] for e in events(raw)][-2:] == ["error", "response.failed"]
    assert final(raw)["error"]["code"] == "server_error"
    # store: false never touches it
    assert post(gw, {"model": MODEL, "input": "你好", "store": False})[0] == 200


# ---------------------------------------------------------------------------------------------------
# An agent's function-call loop, ten turns


@pytest.mark.parametrize("stream", [False, True])
def test_ten_tool_turns_through_previous_response_id(trt: TrtSim, gw: str, stream: bool) -> None:
    """Each turn the model calls get_weather; the client sends the output and its next question with
    previous_response_id only. The backend sees the whole conversation each time, its earlier
    reasoning included (as TRT's `reasoning`), and never a field it refuses."""
    base = {"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS, "stream": stream}
    base["include"] = ["reasoning.encrypted_content"]
    previous: dict[str, Any] | None = None
    thoughts: list[str] = []
    for turn, city in enumerate(CITIES):
        request: dict[str, Any] = {**base, "input": [ask(city)]}
        if previous is not None:
            [last_call] = calls(previous)
            request["input"] = [weather_output(last_call["call_id"], CITIES[turn - 1]), ask(city)]
            request["previous_response_id"] = previous["id"]
        status, headers, raw = post(gw, request)
        assert status == 200, raw
        if stream:
            assert errors(raw, request, status, headers) == []
        previous = final(raw) if stream else json.loads(raw)
        [call_item] = calls(previous)
        assert json.loads(call_item["arguments"]) == {"city": city}
        [item] = reasoning(previous)
        assert item["encrypted_content"].startswith("rsn1.")
        thoughts.append(item["content"][0]["text"])
        sent = trt.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", *["user", "assistant", "tool"] * turn, "user"]
        assert [m.get("reasoning") for m in sent if m["role"] == "assistant"] == thoughts[:-1]
    assert previous is not None
    [last_call] = calls(previous)
    request = {
        **base,
        "input": [weather_output(last_call["call_id"], CITIES[-1])],
        "previous_response_id": previous["id"],
    }
    status, _, raw = post(gw, request)
    done = final(raw) if stream else json.loads(raw)
    assert text(done) == ANSWER_RESULT.format(result=f"{CITIES[-1]}：晴，25°C")
    assert reasoning(done)[0]["content"][0]["text"].strip("\n") == THINK_RESULT
    assert trt.rejected == []
    assert len(trt.requests[-1]["messages"]) == 1 + 3 * len(CITIES)  # system, then user/assistant/tool


def test_ten_tool_turns_stateless_with_encrypted_reasoning(trt: TrtSim, gw: str) -> None:
    """store: false, the client sends the whole conversation each turn (as Codex does): its reasoning
    items carry only encrypted_content, which the gateway opens back into the model's reasoning."""
    base = {"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS, "store": False}
    base["include"] = ["reasoning.encrypted_content"]
    conversation: list[dict[str, Any]] = []
    thoughts: list[str] = []
    for turn, city in enumerate(CITIES):
        conversation.append(ask(city))
        status, _, raw = post(gw, {**base, "input": conversation})
        assert status == 200, raw
        response = json.loads(raw)
        [item] = reasoning(response)
        thoughts.append(item["content"][0]["text"])
        # back as a stateless client keeps it: no readable content, the sealed value only
        conversation.append(
            {"type": "reasoning", "id": item["id"], "summary": [], "encrypted_content": item["encrypted_content"]}
        )
        [call_item] = calls(response)
        conversation.append({k: call_item[k] for k in ("type", "id", "call_id", "name", "arguments")})
        conversation.append(weather_output(call_item["call_id"], city))
        sent = trt.requests[-1]["messages"]
        assert [m.get("reasoning") for m in sent if m["role"] == "assistant"] == thoughts[:-1]
        assert len(sent) == 1 + 3 * turn + 1  # system, user/assistant/tool per earlier turn, the question
    assert trt.rejected == []
    # a sealed value this server did not write is refused, naming the item
    forged = dict(conversation[1], encrypted_content=conversation[1]["encrypted_content"][:-4] + "AAAA")
    status, _, raw = post(gw, {**base, "input": [conversation[0], forged, *conversation[2:]]})
    assert status == 400 and json.loads(raw)["error"]["param"] == "input[1].encrypted_content"
