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
class Settings:
    models: tuple[ModelRoute, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
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
    max_header_bytes: int = 64 * 1024
    max_connections: int | None = 1024
    # the upstream side (server.upstream): connecting, the response head (from the start of an
    # attempt), a silence inside the body, the whole exchange (None: no deadline)
    connect_timeout: float = 10.0
    first_byte_timeout: float = 600.0
    idle_timeout: float = 300.0
    total_timeout: float | None = None
    capture_dir: Path | None = None  # record every exchange there (oaishim.capture)
    capture_redact: tuple[str, ...] = ()  # JSON paths redacted in the records, beyond keys and cookies
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
    store, secret = values.get("state"), values.get("state_secret")
    if store is not None and is_postgres(store) and secret is None:
        # every replica must seal and open encrypted_content with one key: a key made up per
        # process would refuse, on one replica, the reasoning another one sealed
        raise ConfigError(
            "state: a PostgreSQL store is shared by replicas, which must share the key that seals "
            "encrypted_content: set --state-secret (OAISHIM_STATE_SECRET, state_secret) to the same value on each"
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
