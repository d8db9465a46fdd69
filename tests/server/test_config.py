"""Gateway settings: TOML and YAML files with several models and replicas, ``OAISHIM_*`` variables,
the precedence flag > environment > file > default, and a clear ConfigError for what cannot work."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oaishim.commands.main import main
from oaishim.server.config import ConfigError, ModelRoute, Settings, build_settings

TOML = """
host = "0.0.0.0"
port = 9001
api_keys = ["file-key-1", "file-key-2"]
reasoning_field = "reasoning"
keep_extensions = true
max_body_bytes = 2048
first_byte_timeout = 30

[[models]]
name = "qwen3"
upstream_model = "Qwen/Qwen3-8B"
upstreams = ["http://10.0.0.1:8000/", "http://10.0.0.2:8000"]
profile = "vllm"
upstream_api_key = "up-key"

[[models]]
name = "llama"
upstream = "http://10.0.0.3:8080"
profile = "llamacpp"
"""

YAML = """
host: 0.0.0.0
port: 9001
api_keys: [file-key-1, file-key-2]
reasoning_field: reasoning
keep_extensions: true
max_body_bytes: 2048
first_byte_timeout: 30
models:
  - name: qwen3
    upstream_model: Qwen/Qwen3-8B
    upstreams:
      - http://10.0.0.1:8000/
      - http://10.0.0.2:8000
    profile: vllm
    upstream_api_key: up-key
  - name: llama
    upstream: http://10.0.0.3:8080
    profile: llamacpp
"""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("OAISHIM_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Any]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    yield write


def test_toml_file_with_models_and_replicas(files: Any) -> None:
    settings = build_settings(config=files("gateway.toml", TOML))
    qwen, llama = settings.models
    assert qwen == ModelRoute(
        name="qwen3",
        upstreams=("http://10.0.0.1:8000", "http://10.0.0.2:8000"),  # trailing slash gone: paths are appended
        profile="vllm",
        upstream_model="Qwen/Qwen3-8B",
        upstream_api_key="up-key",
    )
    assert llama == ModelRoute(name="llama", upstreams=("http://10.0.0.3:8080",), profile="llamacpp")
    assert (settings.host, settings.port, settings.api_keys) == ("0.0.0.0", 9001, ("file-key-1", "file-key-2"))
    assert (settings.reasoning_field, settings.keep_extensions) == ("reasoning", True)
    assert (settings.max_body_bytes, settings.first_byte_timeout) == (2048, 30.0)
    # what the file leaves out keeps the defaults of Settings
    assert (settings.connect_timeout, settings.idle_timeout) == (Settings().connect_timeout, Settings().idle_timeout)
    assert settings.route("qwen3") is qwen and settings.route("llama") is llama
    assert settings.route("gpt-4o") is None  # named routes only: an unknown model is a 404


def test_yaml_file_gives_the_same_settings_as_toml(files: Any) -> None:
    from_toml = build_settings(config=files("gateway.toml", TOML))
    for name in ("gateway.yaml", "gateway.yml"):
        assert build_settings(config=files(name, YAML)) == from_toml


def test_environment_variables(files: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OAISHIM_UPSTREAM", "http://10.1.0.1:8000, http://10.1.0.2:8000/")
    monkeypatch.setenv("OAISHIM_PROFILE", "sglang")
    monkeypatch.setenv("OAISHIM_SERVED_MODEL_NAME", "tiny")
    monkeypatch.setenv("OAISHIM_UPSTREAM_API_KEY", "env-up-key")
    monkeypatch.setenv("OAISHIM_API_KEYS", "env-key-1, env-key-2")
    monkeypatch.setenv("OAISHIM_HOST", "127.0.0.2")
    monkeypatch.setenv("OAISHIM_PORT", "9100")
    monkeypatch.setenv("OAISHIM_KEEP_EXTENSIONS", "yes")
    monkeypatch.setenv("OAISHIM_REASONING_FIELD", "both")
    settings = build_settings()
    assert settings.models == (
        ModelRoute("tiny", ("http://10.1.0.1:8000", "http://10.1.0.2:8000"), "sglang", upstream_api_key="env-up-key"),
    )
    # "k1, k2": the space is not part of the second key (a client could never present it)
    assert settings.api_keys == ("env-key-1", "env-key-2")
    assert (settings.host, settings.port, settings.keep_extensions, settings.reasoning_field) == (
        "127.0.0.2",
        9100,
        True,
        "both",
    )
    monkeypatch.setenv("OAISHIM_CONFIG", str(files("gateway.toml", TOML)))
    assert [r.name for r in build_settings().models] == ["tiny", "qwen3", "llama"]


def test_flag_over_environment_over_file(files: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = files("gateway.toml", TOML)
    flags: dict[str, Any] = {
        "port": 9003,
        "host": "10.9.9.9",
        "reasoning_field": "drop",
        "keep_extensions": False,
        "api_keys": ["flag-key"],
        "upstream": "http://flag:1",
        "profile": "trtllm",
    }
    env = {
        "PORT": "9002",
        "HOST": "10.8.8.8",
        "REASONING_FIELD": "both",
        "KEEP_EXTENSIONS": "true",
        "API_KEYS": "env-key",
        "UPSTREAM": "http://env:1",
        "PROFILE": "sglang",
    }
    for name, value in env.items():
        monkeypatch.setenv("OAISHIM_" + name, value)

    def view(settings: Settings) -> tuple[Any, ...]:
        first = settings.models[0]
        return (
            settings.port,
            settings.host,
            settings.reasoning_field,
            settings.keep_extensions,
            settings.api_keys,
            first.upstreams,
            first.profile,
        )

    assert view(build_settings(config=config, **flags)) == (
        9003,
        "10.9.9.9",
        "drop",
        False,
        ("flag-key",),
        ("http://flag:1",),
        "trtllm",
    )
    assert view(build_settings(config=config)) == (
        9002,
        "10.8.8.8",
        "both",
        True,
        ("env-key",),
        ("http://env:1",),
        "sglang",
    )
    for name in env:
        monkeypatch.delenv("OAISHIM_" + name)
    settings = build_settings(config=config)
    assert view(settings)[:5] == (9001, "0.0.0.0", "reasoning", True, ("file-key-1", "file-key-2"))
    assert settings.models[0].name == "qwen3"  # no upstream given: the file's models only
    defaults = build_settings(upstream="http://only:1")
    assert (defaults.port, defaults.host, defaults.reasoning_field, defaults.keep_extensions) == (
        8000,
        "127.0.0.1",
        "reasoning_content",
        False,
    )
    assert defaults.models == (ModelRoute("*", ("http://only:1",)),)


def test_upstream_flag_with_file_models(files: Any) -> None:
    """The flag's route comes first; a file route of the same name gives way to it; a "*" route
    serves every model the named ones do not (it is what /v1/models lists from that backend)."""
    config = files("gateway.toml", TOML)
    same = build_settings(config=config, upstream="http://flag:1", served_model_name="qwen3")
    assert [(r.name, r.upstreams) for r in same.models] == [
        ("qwen3", ("http://flag:1",)),
        ("llama", ("http://10.0.0.3:8080",)),
    ]
    assert same.models[0].upstream_model is None  # the flag route does not inherit the file's
    wildcard = build_settings(config=config, upstream="http://flag:1")
    assert [r.name for r in wildcard.models] == ["*", "qwen3", "llama"]
    assert wildcard.route("llama") is wildcard.models[2]
    assert wildcard.route("anything-else") is wildcard.models[0]


def test_api_keys_as_one_string_in_a_file(files: Any) -> None:
    """A string is a key (or comma-separated keys), never the set of its characters."""
    settings = build_settings(config=files("keys.toml", 'api_keys = "sk-secret"\nupstream = "http://u:1"'))
    assert settings.api_keys == ("sk-secret",)


BAD_FILES = [
    ("broken.toml", 'upstream = "http://u:1\n', "cannot parse the config file"),
    ("broken.yaml", "models: [name: x\n", "cannot parse the config file"),
    ("list.yaml", "- upstream: http://u:1\n", "does not hold a table"),
    ("empty.yaml", "", "does not hold a table"),
    ("models.toml", '[models]\nname = "x"\n', "models: expected a list"),
    ("noname.toml", '[[models]]\nupstreams = ["http://u:1"]\n', "models[0]: needs a name"),
    ("noups.toml", '[[models]]\nname = "x"\n', "models[0] (x): needs upstreams"),
    ("emptyups.toml", '[[models]]\nname = "x"\nupstreams = []\n', "models[0] (x): needs upstreams"),
    ("scheme.toml", '[[models]]\nname = "x"\nupstreams = ["10.0.0.1:8000"]\n', "models[0] (x).upstreams"),
    ("profile.toml", '[[models]]\nname = "x"\nupstream = "http://u:1"\nprofile = "vlm"\n', "unknown profile 'vlm'"),
    ("field.toml", 'upstream = "http://u:1"\nreasoning_field = "thoughts"\n', "reasoning_field: 'thoughts'"),
    ("keep.toml", 'upstream = "http://u:1"\nkeep_extensions = "maybe"\n', "keep_extensions: expected a boolean"),
    ("port.toml", 'upstream = "http://u:1"\nport = "eighty"\n', "port: expected an integer"),
    ("bigport.toml", 'upstream = "http://u:1"\nport = 70000\n', "port: 70000 is out of range"),
    ("body.toml", 'upstream = "http://u:1"\nmax_body_bytes = "big"\n', "max_body_bytes: expected an integer"),
    ("timeout.toml", 'upstream = "http://u:1"\nfirst_byte_timeout = -1\n', "first_byte_timeout: -1 is out of range"),
    ("keys.toml", 'upstream = "http://u:1"\napi_keys = 5\n', "api_keys: expected a list of strings"),
    ("upstream.toml", "upstream = 5\n", "upstream: expected a URL"),
    ("backlog.toml", 'upstream = "http://u:1"\ncapture_backlog_mb = 0\n', "capture_backlog_mb: 0 is out of range"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_and_values(files: Any, name: str, text: str, message: str) -> None:
    path = files(name, text)
    with pytest.raises(ConfigError) as caught:
        build_settings(config=path)
    assert message in str(caught.value)
    if "config file" in message:
        assert str(path) in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        build_settings(config=tmp_path / "nowhere.toml")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OAISHIM_PORT", "abc", "port: expected an integer"),
        ("OAISHIM_KEEP_EXTENSIONS", "sometimes", "keep_extensions: expected a boolean"),
        ("OAISHIM_PROFILE", "llama.cpp", "unknown profile 'llama.cpp'"),
        ("OAISHIM_UPSTREAM", "localhost:8000", "upstream: 'localhost:8000' is not an http"),
    ],
)
def test_bad_environment_values(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str) -> None:
    monkeypatch.setenv("OAISHIM_UPSTREAM", "http://u:1")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        build_settings()
    assert message in str(caught.value)


def test_the_capture_backlog_from_the_flag_the_environment_or_the_file(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build_settings(upstream="http://u:1").capture_backlog_bytes is None  # (from the memory: capture_pace)
    path = files("backlog.toml", 'upstream = "http://u:1"\ncapture_backlog_mb = 64\n')
    assert build_settings(config=path).capture_backlog_bytes == 64 << 20
    monkeypatch.setenv("OAISHIM_CAPTURE_BACKLOG_MB", "512")
    assert build_settings(config=path).capture_backlog_bytes == 512 << 20
    assert build_settings(config=path, capture_backlog_mb=0.5).capture_backlog_bytes == 1 << 19


def test_profile_with_a_version_is_accepted() -> None:
    assert build_settings(upstream="http://u:1", profile="vllm@0.32.0").models[0].profile == "vllm@0.32.0"


# ---------------------------------------------------------------------------------------------------
# oaishim serve


def test_serve_without_an_upstream_and_a_missing_model_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without --upstream the embedded engine serves --model; a model that is not there is refused
    # before anything starts.
    assert main(["serve", "--model", str(tmp_path / "missing.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oaishim: ") and "model file not found" in err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["serve", "--upstream", "http://u:1", "--profile", "vlm"], {}, "unknown profile 'vlm'"),
        (["serve", "--upstream", "http://u:1", "--reasoning-field", "x"], {}, "reasoning_field: 'x'"),
        (["serve", "--upstream", "http://u:1"], {"OAISHIM_PORT": "eighty"}, "port: expected an integer"),
        (["serve", "--upstream", "u:1"], {}, "upstream: 'u:1' is not an http"),
    ],
)
def test_serve_with_a_bad_setting_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], env: Any, message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_serve_with_an_unreadable_config_exits_2(files: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = files("bad.toml", "models = [")
    assert main(["serve", "--config", str(path)]) == 2
    assert f"cannot parse the config file {path}" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# Limits and timeouts: a flag, an OAISHIM_* variable and a file key each, in that precedence

LIMITS = {  # setting: (flag value, environment value, file value)
    "header_timeout": (1.5, "2.5", 3.5),
    "body_timeout": (4.0, "5", 6.0),
    "send_timeout": (14.0, "15", 16.0),
    "max_header_bytes": (4096, "8192", 16384),
    "max_body_bytes": (1000, "2000", 3000),
    "max_connections": (10, "20", 30),
    "connect_timeout": (0.5, "1.5", 2.5),
    "first_byte_timeout": (7.0, "8", 9.0),
    "idle_timeout": (11.0, "12", 13.0),
    "total_timeout": (100.0, "200", 300.0),
    "ctx_size": (32768, "16384", 8192),
    "threads": (3, "2", 4),
    "parallel": (4, "3", 5),
    "workers": (3, "2", 5),
}


def test_limits_and_timeouts_from_flags_environment_and_file(
    files: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = files("limits.toml", "".join(f"{key} = {values[2]}\n" for key, values in LIMITS.items()))
    seen: list[Settings] = []
    monkeypatch.setattr("oaishim.server.main.serve", lambda settings, log_level: seen.append(settings))
    argv = ["serve", "--upstream", "http://u:1", "--config", str(config)]
    flags = [arg for key, values in LIMITS.items() for arg in ("--" + key.replace("_", "-"), str(values[0]))]

    def read(settings: Settings) -> dict[str, Any]:
        return {key: getattr(settings, key) for key in LIMITS}

    assert main([*argv, *flags]) == 0
    assert read(seen[-1]) == {key: values[0] for key, values in LIMITS.items()}
    for key, values in LIMITS.items():
        monkeypatch.setenv("OAISHIM_" + key.upper(), values[1])
    assert main([*argv, *flags]) == 0
    assert read(seen[-1]) == {key: values[0] for key, values in LIMITS.items()}  # a flag beats the variable
    assert main(argv) == 0
    assert read(seen[-1]) == {key: type(values[0])(values[1]) for key, values in LIMITS.items()}
    for key in LIMITS:
        monkeypatch.delenv("OAISHIM_" + key.upper())
    assert main(argv) == 0
    assert read(seen[-1]) == {key: values[2] for key, values in LIMITS.items()}
    assert main(["serve", "--upstream", "http://u:1"]) == 0
    assert read(seen[-1]) == {key: getattr(Settings(), key) for key in LIMITS}


def test_zero_means_no_total_deadline_and_no_connection_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OAISHIM_TOTAL_TIMEOUT", "0")
    monkeypatch.setenv("OAISHIM_MAX_CONNECTIONS", "0")
    settings = build_settings(upstream="http://u:1")
    assert (settings.total_timeout, settings.max_connections) == (None, None)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OAISHIM_HEADER_TIMEOUT", "0", "header_timeout: '0' is out of range"),
        ("OAISHIM_TOTAL_TIMEOUT", "-3", "total_timeout: '-3' is out of range"),
        ("OAISHIM_MAX_HEADER_BYTES", "10", "max_header_bytes: '10' is out of range"),
        ("OAISHIM_MAX_CONNECTIONS", "many", "max_connections: expected an integer"),
        ("OAISHIM_IDLE_TIMEOUT", "soon", "idle_timeout: expected a number"),
    ],
)
def test_bad_limit_values(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        build_settings(upstream="http://u:1")
    assert message in str(caught.value)


def test_llama_server_arguments_from_flags_environment_and_file(files: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = files("engine.toml", 'llama_args = ["--flash-attn", "on"]\n')
    assert build_settings(config=config).llama_args == ("--flash-attn", "on")
    monkeypatch.setenv("OAISHIM_LLAMA_ARGS", "-b 512 --mlock")
    assert build_settings(config=config).llama_args == ("-b", "512", "--mlock")
    assert build_settings(config=config, llama_args=["--no-warmup"]).llama_args == ("--no-warmup",)
    monkeypatch.delenv("OAISHIM_LLAMA_ARGS")
    with pytest.raises(ConfigError, match="llama_args"):
        build_settings(config=files("bad.toml", "llama_args = 5\n"), llama_args=())


def test_the_embedded_engine_gets_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve with no upstream hands the engine settings to start_embedded (the engine itself is
    replaced here: tests/engine/test_embedded.py runs the real one with these settings)."""
    from types import SimpleNamespace

    from oaishim.engine import embedded

    got: dict[str, Any] = {}
    stopped: list[bool] = []

    def fake_start(model: Any, alias: str, **options: Any) -> Any:
        got.update(options, model=model, alias=alias)
        server = SimpleNamespace(url="http://127.0.0.1:1", stop=lambda: stopped.append(True))
        return SimpleNamespace(server=server, special=None)

    monkeypatch.setattr(embedded, "start_embedded", fake_start)
    monkeypatch.setattr("oaishim.server.main.serve", lambda settings, log_level: None)
    argv = ["serve", "--ctx-size", "20000", "--threads", "2", "--parallel", "3", "--llama-arg=--mlock"]
    assert main(argv) == 0
    assert got == {
        "model": None,
        "alias": "tiny",
        "ctx_size": 20000,
        "threads": 2,
        "parallel": 3,
        "extra_args": ("--mlock",),
    }
    assert stopped == [True]


@pytest.mark.parametrize("entry", ["/v1/*", "GET /v1/models", "/v1/chat/completions/*", "/health", "/*"])
def test_a_pass_through_rule_may_not_cover_the_gateways_own_paths(entry: str) -> None:
    with pytest.raises(ConfigError, match="the gateway's own"):
        build_settings(upstream="http://u:1", passthrough=[entry])


def test_the_gateways_route_table_answers_as_settings_route() -> None:
    """The gateway looks routes up in a table built once; it gives what ``Settings.route`` gives."""
    from oaishim.server.app import Gateway
    from oaishim.wire.errors import OpenAIError

    a1, b, a2, anything = (
        ModelRoute("a", ("http://127.0.0.1:9",)),
        ModelRoute("b", ("http://127.0.0.1:9",)),
        ModelRoute("a", ("http://127.0.0.1:8",)),
        ModelRoute("*", ("http://127.0.0.1:7",)),
    )
    for models in ((a1, b, a2, anything), (a1, b, a2)):
        settings = Settings(models=models, state="memory")
        gateway = Gateway(settings)
        for name in ("a", "b", "c", "*"):
            want = settings.route(name)
            if want is None:
                with pytest.raises(OpenAIError) as refused:
                    gateway.model_route({"model": name})
                assert refused.value.status == 404
            else:
                assert gateway.model_route({"model": name}) is want
    assert Gateway(Settings(models=(a1, b, a2, anything), state="memory")).model_route({"model": "a"}) is a1
