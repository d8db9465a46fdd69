"""Gateway settings: from flags, ``OAISHIM_*`` environment variables and a TOML or YAML file.

Precedence: command-line flag > environment variable > config file > default. A config file may
declare several models, each with its replicas and profile:

```toml
[[models]]
name = "qwen3"                       # the name clients use
upstream_model = "Qwen/Qwen3-8B"     # the name the backend serves (default: same as name)
upstreams = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
profile = "vllm"                     # or "auto"
```
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from oaishim.server.knobs import (
    DEFAULT_PASSTHROUGH,
    KNOBS,
    REASONING_FIELDS,
    ConfigError,
    _env,
    _keys,
    _profile,
    is_postgres,
    upstream_url,
)
from oaishim.transform.context import ReasoningField
from oaishim.transform.special import SpecialTokens

AccessFormat = Literal["text", "json", "off"]

__all__ = [
    "DEFAULT_PASSTHROUGH",
    "KNOBS",
    "REASONING_FIELDS",
    "ConfigError",
    "ModelRoute",
    "Settings",
    "VirtualKey",
    "build_settings",
    "default_state_path",
    "is_postgres",
    "load_file",
    "upstream_url",
]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    name: str
    upstreams: tuple[str, ...]
    profile: str = "auto"
    upstream_model: str | None = None
    upstream_api_key: str | None = None


@dataclass(frozen=True, slots=True)
class VirtualKey:
    """A client key from the config's ``keys`` with what it may do: the models it may use (None:
    every one), requests and tokens per minute (None: no bound), and the label the metrics and the
    access line show for it (never the key)."""

    key: str
    label: str
    models: frozenset[str] | None = None
    rpm: int | None = None
    tpm: int | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    models: tuple[ModelRoute, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    # serving processes sharing the listening socket (server.workers): 1 unless asked, see the README
    workers: int = 1
    api_keys: tuple[str, ...] = ()
    keep_extensions: bool = False
    reasoning_field: ReasoningField = "reasoning_content"
    text_repair: bool = True  # split <think>, parse tool-call text, enforce stop strings at the gateway
    thinking_open: bool = False  # the chat template opens <think>: outputs start inside reasoning
    special_tokens: SpecialTokens | None = None  # the model's protected tokens (kept whole, never cleaned)
    display_cleanup: bool = False  # strip non-end-of-turn special tokens such as <|im_start|> from display text
    max_body_bytes: int = 16 * 1024 * 1024
    # One SSE event or one plain body read from the backend; past it the client gets a 502.
    max_upstream_event_bytes: int = 16 * 1024 * 1024
    # the client side (server.http): seconds for a request's head and for its body, the head's size,
    # open connections (None: no bound)
    header_timeout: float = 20.0
    body_timeout: float = 60.0
    send_timeout: float = 60.0  # a client that takes none of its answer this long is dropped
    max_header_bytes: int = 64 * 1024
    max_connections: int | None = 1024
    # microseconds each serving process polls after a read before it sleeps (server.idle_poll): 0, off
    idle_poll_us: int = 0
    # the upstream side (server.upstream): connecting, the response head (from the start of an
    # attempt), a silence inside the body, the whole exchange (None: no deadline)
    connect_timeout: float = 10.0
    first_byte_timeout: float = 600.0
    idle_timeout: float = 300.0
    total_timeout: float | None = None
    capture_dir: Path | None = None  # record every exchange there (oaishim.capture)
    capture_redact: tuple[str, ...] = ()  # JSON paths redacted in the records, beyond keys and cookies
    # the exchanges the capture process may hold unbuilt (server.capture_pace; None: from the memory)
    capture_backlog_bytes: int | None = None
    # the embedded engine (serve with no upstream): its context in tokens (None: the tiny model's
    # TINY_CONTEXT, a GGUF's own trained context), CPU threads, request slots sharing that context,
    # and any other llama-server arguments
    ctx_size: int | None = None
    threads: int = 1
    parallel: int | None = None  # None: llama.cpp's own choice (4 slots on one shared KV cache)
    llama_args: tuple[str, ...] = ()
    passthrough: tuple[str, ...] = DEFAULT_PASSTHROUGH  # "[METHOD] PATH[*]" entries (wire.paths.parse_rule)
    # the response store behind /v1/responses (server.responses): a path, sqlite:…, postgresql://… or
    # memory (None: responses.sqlite in the per-user state folder); how long a record is kept (None:
    # for ever) and how large one may be; the HMAC key sealing encrypted_content (None: a random key
    # kept in a 0600 file beside an SQLite store, a fresh one per process for memory)
    state: str | None = None
    state_max_age: float | None = 30 * 86400.0
    state_max_bytes: int = 8 * 1024 * 1024
    state_secret: str | None = None
    # operating it: the access line's format (server.access) and the key GET /metrics asks for (None: none)
    access_log: AccessFormat = "text"
    metrics_key: str | None = None
    # virtual keys (the config's ``keys``) and where their limits are counted: None for this
    # process's memory, redis://… for a Redis shared by replicas (server.limits)
    virtual_keys: tuple[VirtualKey, ...] = ()
    limits: str | None = None

    @property
    def client_keys(self) -> tuple[str, ...]:
        """Every key a client may present: ``api_keys`` and the virtual keys."""
        return (*self.api_keys, *(v.key for v in self.virtual_keys))

    def route(self, model: str | None) -> ModelRoute | None:
        """The route for a client's model name; a single route serves any name."""
        for route in self.models:
            if route.name == model:
                return route
        # "*" serves every other name (/v1/models lists its backend's models, so they must route)
        return next((route for route in self.models if route.name == "*"), None)


def default_state_path() -> Path:
    """``$XDG_STATE_HOME/oaishim/responses.sqlite`` (``~/.local/state`` when the variable is unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "oaishim" / "responses.sqlite"


def load_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        else:
            data = tomllib.loads(raw.decode())
    except Exception as exc:  # a parse error of either format, reported with the file name
        raise ConfigError(f"cannot parse the config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} does not hold a table of settings")
    return data


def _routes(entries: Any) -> tuple[ModelRoute, ...]:
    if not isinstance(entries, list):
        raise ConfigError("models: expected a list of tables")
    routes = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"models[{i}]: needs a name")
        ups = entry.get("upstreams", entry.get("upstream"))
        ups = [ups] if isinstance(ups, str) else ups
        if not isinstance(ups, list) or not ups or not all(isinstance(u, str) for u in ups):
            raise ConfigError(f"models[{i}] ({entry['name']}): needs upstreams, a list of URLs")
        where = f"models[{i}] ({entry['name']})"
        routes.append(
            ModelRoute(
                name=entry["name"],
                upstreams=tuple(upstream_url(u, f"{where}.upstreams") for u in ups),
                profile=_profile(entry.get("profile", "auto"), f"{where}.profile"),
                upstream_model=entry.get("upstream_model"),
                upstream_api_key=entry.get("upstream_api_key"),
            )
        )
    return tuple(routes)


def _virtual_keys(entries: Any, routes: set[str]) -> tuple[VirtualKey, ...]:
    if not isinstance(entries, list):
        raise ConfigError("keys: expected a list of tables (key, label, models, rpm, tpm)")
    out: list[VirtualKey] = []
    for i, entry in enumerate(entries):
        where = f"keys[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("key"), str) or len(entry["key"]) < 8:
            raise ConfigError(f"{where}: needs a key of at least 8 characters")
        unknown = sorted(set(entry) - {"key", "label", "models", "rpm", "tpm"})
        if unknown:
            raise ConfigError(f"{where}: unknown setting {unknown[0]!r}")
        label = entry.get("label", f"key{i}")
        if not isinstance(label, str) or not label.strip() or len(label) > 64:
            raise ConfigError(f"{where}.label: expected a short name")
        models = entry.get("models")
        if models is not None:
            if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
                raise ConfigError(f"{where}.models: expected a list of model names")
            missing = [m for m in models if m not in routes]
            if missing and "*" not in routes:
                raise ConfigError(f"{where}.models: {missing[0]!r} is not a configured model")
        limits = {}
        for name in ("rpm", "tpm"):
            value = entry.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{where}.{name}: expected a whole number of 1 or more")
            limits[name] = value
        out.append(VirtualKey(entry["key"], label.strip(), frozenset(models) if models is not None else None, **limits))
    labels = [v.label for v in out]
    if len(set(labels)) != len(labels) or len({v.key for v in out}) != len(out):
        raise ConfigError("keys: each key and each label must be unique")
    return tuple(out)


def build_settings(
    *,
    upstream: str | None = None,
    profile: str | None = None,
    served_model_name: str | None = None,
    api_keys: Sequence[str] = (),
    upstream_api_key: str | None = None,
    config: Path | None = None,
    **flags: Any,
) -> Settings:
    """Combine flags, the environment and the config file into Settings.

    ``flags`` are the settings of :data:`KNOBS`, by key (``idle_timeout=120``); a flag that is None
    or empty was not given. Each knob is read from its flag, else ``OAISHIM_<KEY>``, else the file's
    ``key``, else left at the Settings default, and parsed by the knob's own parser (which says what
    is wrong, naming the key). The upstream, its routes and the keys are read here, by hand: they
    combine several settings into one."""
    unknown = sorted(set(flags) - set(KNOBS))
    if unknown:
        raise TypeError(f"build_settings() got unknown settings: {', '.join(unknown)}")
    file_path = config or (Path(p) if (p := _env("CONFIG")) else None)
    data = load_file(file_path) if file_path else {}
    values: dict[str, Any] = {}
    for key, knob in KNOBS.items():
        raw = _given(flags.get(key))
        raw = raw if raw is not None else _env(key.upper())
        raw = raw if raw is not None else data.get(key)
        if raw is not None:
            values[knob.field or key] = knob.parse(raw, key)
    values["models"] = _models(data, upstream, profile, served_model_name, upstream_api_key)
    keys = tuple(api_keys) or _keys(_env("API_KEYS") or _env("API_KEY") or "", "OAISHIM_API_KEYS")
    values["api_keys"] = keys or _keys(data.get("api_keys", []), "api_keys")
    if "keys" in data:
        values["virtual_keys"] = _virtual_keys(data["keys"], {r.name for r in values["models"]})
    store, secret = values.get("state"), values.get("state_secret")
    if store is not None and is_postgres(store) and secret is None:
        # every replica must seal and open encrypted_content with one key: a key made up per
        # process would refuse, on one replica, the reasoning another one sealed
        raise ConfigError(
            "state: a PostgreSQL store is shared by replicas, which must share the key that seals "
            "encrypted_content: set --state-secret (OAISHIM_STATE_SECRET, state_secret) to the same value on each"
        )
    if values.get("workers", 1) > 1 and values.get("state") == "memory":
        # each process would hold its own store: a response created through one worker would be
        # unknown to the next request, which may reach another
        raise ConfigError(
            "state: a memory store is not shared between worker processes; with --workers above 1 use an "
            "SQLite file (the default) or postgresql://…"
        )
    return Settings(**values)


def _given(flag: Any) -> Any:
    """A flag's value, or None when it was not given (None, an empty string or list)."""
    return None if flag is None or (isinstance(flag, (str, list, tuple)) and not flag) else flag


def _models(
    data: Mapping[str, Any],
    upstream: str | None,
    profile: str | None,
    served_model_name: str | None,
    upstream_api_key: str | None,
) -> tuple[ModelRoute, ...]:
    """The file's ``models``, with the one ``upstream`` (flag, variable or file) first."""
    upstream = upstream or _env("UPSTREAM") or data.get("upstream")
    routes = _routes(data["models"]) if "models" in data else ()
    if not upstream:
        return routes
    name = served_model_name or _env("SERVED_MODEL_NAME") or data.get("served_model_name") or "*"
    urls = upstream.split(",") if isinstance(upstream, str) else upstream
    if not isinstance(urls, list):
        raise ConfigError(f"upstream: expected a URL or a list of URLs, got {upstream!r}")
    route = ModelRoute(
        name=name,
        upstreams=tuple(upstream_url(u, "upstream") for u in urls),
        profile=_profile(profile or _env("PROFILE") or data.get("profile", "auto"), "profile"),
        upstream_api_key=upstream_api_key or _env("UPSTREAM_API_KEY") or data.get("upstream_api_key"),
    )
    return (route, *[r for r in routes if r.name != name])
