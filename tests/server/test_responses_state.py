"""The store's settings and its sealing key: flags, variables and file keys; a key kept beside an
SQLite store so that a restarted gateway opens what the previous one sealed."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest
from _fake import APPS, FakeUpstream, call
from _trt import TrtSim

from oaishim.server.app import Gateway
from oaishim.server.config import ConfigError, ModelRoute, Settings, build_settings, default_state_path

UP = "http://127.0.0.1:9"


def test_state_settings_from_flags_environment_and_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = build_settings(upstream=UP)
    assert (settings.state, settings.state_max_age, settings.state_max_bytes, settings.state_secret) == (
        None,
        30 * 86400.0,
        8 * 1024 * 1024,
        None,
    )
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_path() == tmp_path / "oaishim" / "responses.sqlite"
    monkeypatch.setenv("OAISHIM_STATE", "memory")
    monkeypatch.setenv("OAISHIM_STATE_MAX_AGE", "0")
    config = tmp_path / "c.toml"
    config.write_text('state_max_mb = 0.5\nstate_secret = "from-the-file-0123456"\n')
    settings = build_settings(upstream=UP, config=config, state_max_age=None)
    assert (settings.state, settings.state_max_age, settings.state_max_bytes) == ("memory", None, 512 * 1024)
    assert settings.state_secret == "from-the-file-0123456"
    assert build_settings(upstream=UP, state="/x/r.db", state_max_age=60).state_max_age == 60
    with pytest.raises(ConfigError, match="state-secret"):
        build_settings(upstream=UP, state="postgresql://db/x")
    assert build_settings(upstream=UP, state="postgresql://db/x", state_secret="s" * 16).state == "postgresql://db/x"
    with pytest.raises(ConfigError, match="state_secret"):
        build_settings(upstream=UP, state_secret="short")


def _gateway(upstream: FakeUpstream, path: Path, name: str) -> str:
    app = Gateway(Settings(models=(ModelRoute("*", ("http://x",), "trtllm@1.4"),), state=str(path)), upstream)
    asyncio.run(app.startup())
    APPS[f"inproc://{name}"] = app
    return f"inproc://{name}"


def test_a_restarted_gateway_opens_the_reasoning_the_previous_one_sealed(tmp_path: Path) -> None:
    upstream = FakeUpstream()
    sim = TrtSim()
    upstream.responder = sim
    path = tmp_path / "state" / "responses.sqlite"
    first = _gateway(upstream, path, "first")
    request = {"model": "m", "input": "你好", "include": ["reasoning.encrypted_content"]}
    status, _, raw = call(first + "/v1/responses", "POST", request)
    assert status == 200
    body = json.loads(raw)
    [item] = [i for i in body["output"] if i["type"] == "reasoning"]
    asyncio.run(APPS.pop(first).shutdown())
    key = path.with_name("responses.sqlite.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes().strip()) == 64

    second = _gateway(upstream, path, "second")  # the same files, a new process's gateway
    try:
        sealed = {"type": "reasoning", "id": item["id"], "summary": [], "encrypted_content": item["encrypted_content"]}
        status, _, raw = call(
            second + "/v1/responses", "POST", {**request, "input": [{"role": "user", "content": "你好"}, sealed]}
        )
        assert status == 200, raw
        assert sim.requests[-1]["messages"][-1]["reasoning"] == item["content"][0]["text"]
        assert call(second + f"/v1/responses/{body['id']}", "GET")[0] == 200  # and the record is still there
    finally:
        asyncio.run(APPS.pop(second).shutdown())


def test_a_gateway_that_serves_no_responses_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "responses.sqlite"
    app = Gateway(Settings(models=(ModelRoute("*", ("http://x",), "openai"),), state=str(path)), FakeUpstream())
    asyncio.run(app.startup())
    asyncio.run(app.shutdown())
    assert not path.parent.exists()
