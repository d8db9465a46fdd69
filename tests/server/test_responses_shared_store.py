"""Two gateway replicas sharing one PostgreSQL store (the session's private cluster): a conversation
started on one continues on the other, a response one stored is read and deleted through the other,
and the reasoning one sealed the other opens (they share ``--state-secret``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _responses import INSTRUCTIONS, MODEL, TOOLS, calls, final, get, post, reasoning, text, weather_output
from _servers import Replayer, RunningGateway, free_port
from _trt import ANSWER_RESULT, TrtSim

from _postgres import Cluster
from oaishim.server.app import Gateway
from oaishim.server.config import ConfigError, ModelRoute, Settings

SECRET = "replicas-share-this-secret-0123"


@pytest.fixture
def replicas(pg_cluster: Cluster) -> Iterator[tuple[str, str, TrtSim]]:
    import psycopg

    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS shared_gateways CASCADE")
        conn.execute("CREATE SCHEMA shared_gateways")
    url = pg_cluster.url(options="-csearch_path%3Dshared_gateways")
    sim = TrtSim()
    with Replayer() as backend:
        backend.responder = sim
        route = ModelRoute("*", (backend.url,), "trtllm@1.4")
        made = [Settings(models=(route,), port=free_port(), state=url, state_secret=SECRET) for _ in range(2)]
        with RunningGateway(made[0]) as one, RunningGateway(made[1]) as two:
            yield one.url, two.url, sim


def test_a_conversation_started_on_one_replica_continues_on_the_other(replicas: tuple[str, str, TrtSim]) -> None:
    one, two, sim = replicas
    request = {
        "model": MODEL,
        "input": [{"role": "user", "content": "查看深圳天气"}],
        "instructions": INSTRUCTIONS,
        "tools": TOOLS,
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    }
    status, _, raw = post(one, request)
    assert status == 200
    first = final(raw)
    [call] = calls(first)
    # the other replica reads it at once (the record was committed before the terminal event)
    assert get(two, f"/v1/responses/{first['id']}") == (200, first)
    status, _, raw = post(
        two,
        {**request, "input": [weather_output(call["call_id"], "深圳")], "previous_response_id": first["id"]},
    )
    assert status == 200
    second = final(raw)
    assert text(second) == ANSWER_RESULT.format(result="深圳：晴，25°C")
    assert [m["role"] for m in sim.requests[-1]["messages"]] == ["system", "user", "assistant", "tool"]
    # sealed on one, opened on the other
    [thought] = reasoning(first)
    item = {"type": "reasoning", "id": thought["id"], "summary": [], "encrypted_content": thought["encrypted_content"]}
    status, _, raw = post(two, {**request, "stream": False, "store": False, "input": [request["input"][0], item]})
    assert status == 200, raw
    assert sim.requests[-1]["messages"][-1]["reasoning"] == thought["content"][0]["text"]
    # deleted through one, gone for both
    assert get(one, f"/v1/responses/{second['id']}", method="DELETE")[0] == 200
    assert get(two, f"/v1/responses/{second['id']}")[0] == 404
    assert json.loads(post(one, {**request, "previous_response_id": second["id"]})[2])["error"]["code"] == (
        "previous_response_not_found"
    )


def test_a_postgres_store_without_a_shared_secret_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="state-secret"):
        Gateway(Settings(state="postgresql://localhost/x"))
