"""The official SDKs on ``/v1/responses`` over real sockets: openai-python (sync and async: create,
streamed events, the ``responses.stream`` helper, retrieve, delete, input item pages) and openai-node
(``tests/node/responses.mjs``), against the gateway in front of the simulated TensorRT-LLM."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from _responses import INSTRUCTIONS, MODEL, TOOLS, weather_output
from _servers import Replayer, RunningGateway, free_port
from _trt import ANSWER_CHAT, ANSWER_RESULT, THINK_CHAT, TrtSim

from oaishim.server.config import ModelRoute, Settings

PROFILE = "trtllm@1.4"
KEY = "sk-gateway-client-0123"
NODE_DIR = Path(__file__).resolve().parents[1] / "node"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TrtSim]]:
    sim = TrtSim()
    state = tmp_path_factory.mktemp("state") / "responses.sqlite"
    with Replayer() as backend:
        backend.responder = sim
        route = ModelRoute("*", (backend.url,), PROFILE)
        settings = Settings(models=(route,), port=free_port(), api_keys=(KEY,), state=str(state))
        with RunningGateway(settings) as gateway:
            yield gateway.url, sim


@pytest.fixture
def client(served: tuple[str, TrtSim]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=served[0] + "/v1", api_key=KEY, max_retries=0) as c:
        yield c


def test_create_plain_and_retrieve(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="你好")
    assert response.status == "completed" and response.output_text == ANSWER_CHAT
    [thought] = [item for item in response.output if item.type == "reasoning"]
    assert thought.content is not None and thought.content[0].text.strip("\n") == THINK_CHAT
    again = client.responses.retrieve(response.id)
    assert again.model_dump() == response.model_dump()


def test_create_stream_events(client: openai.OpenAI) -> None:
    kinds: list[str] = []
    deltas: list[str] = []
    final = None
    with client.responses.create(model=MODEL, input="你好", stream=True) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type == "response.completed":
                final = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "".join(deltas) == ANSWER_CHAT and final is not None and final.output_text == ANSWER_CHAT


def test_stream_helper_with_a_tool_call_and_its_output(client: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "查看杭州天气"}]
    with client.responses.stream(model=MODEL, input=ask, instructions=INSTRUCTIONS, tools=TOOLS) as stream:  # type: ignore[arg-type]
        first = stream.get_final_response()
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "杭州"}
    with client.responses.stream(
        model=MODEL,
        input=[weather_output(call.call_id, "杭州")],  # type: ignore[list-item]
        previous_response_id=first.id,
        instructions=INSTRUCTIONS,
        tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        second = stream.get_final_response()
    assert second.output_text == ANSWER_RESULT.format(result="杭州：晴，25°C")
    assert second.previous_response_id == first.id


def test_delete_then_retrieve_raises_not_found(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="你好")
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve(response.id)
    assert f"No response found with id '{response.id}'." in str(caught.value)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="x", previous_response_id=response.id)
    assert refused.value.code == "previous_response_not_found"


def test_input_items_pages(client: openai.OpenAI) -> None:
    items = [{"role": "user", "content": f"第{i}句"} for i in range(7)]
    response = client.responses.create(model=MODEL, input=items)  # type: ignore[arg-type]
    first = client.responses.input_items.list(response.id, limit=3, order="asc")
    assert len(first.data) == 3 and first.has_more
    texts = [item.content[0].text for item in client.responses.input_items.list(response.id, limit=3, order="asc")]  # type: ignore[union-attr]
    assert texts == [f"第{i}句" for i in range(7)]  # the SDK followed `after` through three pages


def test_async_client(served: tuple[str, TrtSim]) -> None:
    async def main() -> None:
        async with openai.AsyncOpenAI(base_url=served[0] + "/v1", api_key=KEY, max_retries=0) as client:
            plain = await client.responses.create(model=MODEL, input="你好")
            assert plain.output_text == ANSWER_CHAT
            kinds = [
                event.type async for event in await client.responses.create(model=MODEL, input="你好", stream=True)
            ]
            assert kinds[-1] == "response.completed"
            async with client.responses.stream(model=MODEL, input="你好", previous_response_id=plain.id) as stream:
                final = await stream.get_final_response()
            assert final.output_text == ANSWER_CHAT and final.previous_response_id == plain.id
            listed = [item.id async for item in client.responses.input_items.list(final.id, limit=1)]
            assert len(listed) == 1
            await client.responses.delete(final.id)
            with pytest.raises(openai.NotFoundError):
                await client.responses.retrieve(final.id)

    asyncio.run(main())


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="the official Node SDK is not installed (cd tests/node && npm ci)",
)
def test_node_sdk_reads_plain_and_stream(served: tuple[str, TrtSim]) -> None:
    payload = {
        "baseURL": served[0] + "/v1",
        "apiKey": KEY,
        "request": {
            "model": MODEL,
            "input": [{"role": "user", "content": "查看成都天气"}],
            "instructions": INSTRUCTIONS,
            "tools": TOOLS,
        },
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        ["node", str(NODE_DIR / "responses.mjs")],
        input=json.dumps(payload).encode(),
        capture_output=True,
        cwd=NODE_DIR,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    for kind in ("plain", "stream", "helper"):
        got = result[kind]
        assert got["status"] == "completed", (kind, got)
        assert got["calls"] == [{"name": "get_weather", "arguments": {"city": "成都"}}], kind
        assert got["reasoning"] and got["retrieved"] is True, kind
    assert result["stream"]["events"][:2] == ["response.created", "response.in_progress"]
    assert result["stream"]["events"][-1] == "response.completed"
    assert result["continued"] == ANSWER_RESULT.format(result="成都：晴，25°C")
