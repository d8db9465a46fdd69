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
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from oaishim.capture.redact import parse_path
from oaishim.engine.tokens import load_special_tokens
from oaishim.profiles import get_profile
from oaishim.transform.context import ReasoningField
from oaishim.transform.special import SpecialTokens
from oaishim.wire.paths import parse_rule

REASONING_FIELDS: tuple[ReasoningField, ...] = ("reasoning_content", "reasoning", "both", "drop")
# Backend paths a client may reach through the gateway besides the OpenAI endpoints: read-only ones.
# Admin routes (vLLM /v1/load_lora_adapter, /sleep; SGLang /flush_cache, …) stay out unless listed.
DEFAULT_PASSTHROUGH = ("POST /tokenize", "POST /detokenize", "GET /version")
# The paths the gateway answers itself: no pass-through rule may cover them.
GATEWAY_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses", "/health")


class ConfigError(ValueError):
    """A setting that cannot work; the message says which and why."""


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

    def route(self, model: str | None) -> ModelRoute | None:
        """The route for a client's model name; a single route serves any name."""
        for route in self.models:
            if route.name == model:
                return route
        # "*" serves every other name (/v1/models lists its backend's models, so they must route)
        return next((route for route in self.models if route.name == "*"), None)


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}


def default_state_path() -> Path:
    """``$XDG_STATE_HOME/oaishim/responses.sqlite`` (``~/.local/state`` when the variable is unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "oaishim" / "responses.sqlite"


def is_postgres(target: str) -> bool:
    return target.strip().lower().startswith(("postgresql:", "postgres:"))


def _env(name: str) -> str | None:
    value = os.environ.get("OAISHIM_" + name)
    return value if value not in (None, "") else None


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}: expected a boolean, got {value!r}")


def _number(value: Any, name: str, kind: type[int] | type[float], low: float, high: float = float("inf")) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if isinstance(value, bool) or not low <= number <= high:
        raise ConfigError(f"{name}: {value!r} is out of range")
    return number


def upstream_url(value: Any, name: str) -> str:
    """An upstream's base URL as configured (http or https, no trailing slash); ``name`` says where it was given."""
    url = value.strip().rstrip("/") if isinstance(value, str) else ""
    if not url.startswith(("http://", "https://")) or not url.partition("://")[2]:
        raise ConfigError(f"{name}: {value!r} is not an http:// or https:// URL")
    return url


def _profile(value: Any, name: str) -> str:
    if value == "auto":
        return "auto"
    try:
        get_profile(str(value))
    except KeyError as exc:
        raise ConfigError(f"{name}: {exc.args[0]}") from None
    return str(value)


def _keys(value: Any, name: str) -> tuple[str, ...]:
    """A list of keys, or one comma-separated string (never a string's characters)."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{name}: expected a list of strings, got {value!r}")
    return tuple(k.strip() for k in value if k.strip())


def _passthrough(value: Any) -> tuple[str, ...]:
    """Pass-through entries from flags, a comma-separated variable or a list; "none" lists none."""
    entries = _keys(value, "passthrough")
    if [e.lower() for e in entries] == ["none"]:
        return ()
    for entry in entries:
        try:
            rule = parse_rule(entry)
        except ValueError as exc:
            raise ConfigError(f"passthrough: {exc}") from None
        own = [path for path in GATEWAY_PATHS if rule.matches_path(path) or path_under(rule.path, path)]
        if own:
            # such a rule is dead for the endpoint itself, and would send its odd spellings
            # (a trailing "/") to the backend without validation
            raise ConfigError(f"passthrough: {entry!r} covers the gateway's own {own[0]}; list backend paths only")
    return entries


def path_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


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
    host: str | None = None,
    port: int | None = None,
    config: Path | None = None,
    keep_extensions: bool | None = None,
    reasoning_field: str | None = None,
    text_repair: bool | None = None,
    thinking_open: bool | None = None,
    special_tokens: Path | None = None,
    display_cleanup: bool | None = None,
    capture: Path | None = None,
    capture_redact: Sequence[str] = (),
    passthrough: Sequence[str] = (),
    max_body_bytes: int | None = None,
    header_timeout: float | None = None,
    body_timeout: float | None = None,
    max_header_bytes: int | None = None,
    max_connections: int | None = None,
    connect_timeout: float | None = None,
    first_byte_timeout: float | None = None,
    idle_timeout: float | None = None,
    total_timeout: float | None = None,
    max_upstream_event_mb: float | None = None,
    ctx_size: int | None = None,
    threads: int | None = None,
    parallel: int | None = None,
    llama_args: Sequence[str] = (),
    state: str | None = None,
    state_max_age: float | None = None,
    state_max_mb: float | None = None,
    state_secret: str | None = None,
) -> Settings:
    """Combine flags (None = not given), the environment and the config file into Settings."""
    file_path = config or (Path(p) if (p := _env("CONFIG")) else None)
    data = load_file(file_path) if file_path else {}
    upstream = upstream or _env("UPSTREAM") or data.get("upstream")
    routes = _routes(data["models"]) if "models" in data else ()
    if upstream:
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
        routes = (route, *[r for r in routes if r.name != name])
    keys = tuple(api_keys) or _keys(_env("API_KEYS") or _env("API_KEY") or "", "OAISHIM_API_KEYS")
    keys = keys or _keys(data.get("api_keys", []), "api_keys")
    field_name = reasoning_field or _env("REASONING_FIELD") or data.get("reasoning_field", "reasoning_content")
    if field_name not in REASONING_FIELDS:
        raise ConfigError(f"reasoning_field: {field_name!r} is not one of {', '.join(REASONING_FIELDS)}")
    keep = (
        keep_extensions
        if keep_extensions is not None
        else _bool(_env("KEEP_EXTENSIONS") or data.get("keep_extensions", False), "keep_extensions")
    )
    repair = (
        text_repair
        if text_repair is not None
        else _bool(_env("TEXT_REPAIR") or data.get("text_repair", True), "text_repair")
    )
    opened = (
        thinking_open
        if thinking_open is not None
        else _bool(_env("THINKING_OPEN") or data.get("thinking_open", False), "thinking_open")
    )
    tokens_path = special_tokens or (Path(p) if (p := _env("SPECIAL_TOKENS") or data.get("special_tokens")) else None)
    tokens = None
    if tokens_path is not None:
        try:
            tokens = load_special_tokens(Path(tokens_path))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"special_tokens: cannot load {tokens_path}: {exc}") from exc
    cleanup = (
        display_cleanup
        if display_cleanup is not None
        else _bool(_env("DISPLAY_CLEANUP") or data.get("display_cleanup", False), "display_cleanup")
    )
    capture_dir = capture or (Path(p) if (p := _env("CAPTURE") or data.get("capture")) else None)
    redact = tuple(capture_redact) or _keys(_env("CAPTURE_REDACT") or data.get("capture_redact", []), "capture_redact")
    for path in redact:
        try:
            parse_path(path)
        except ValueError as exc:
            raise ConfigError(f"capture_redact: {exc}") from None
    passing = _passthrough(passthrough or _env("PASSTHROUGH") or data.get("passthrough", DEFAULT_PASSTHROUGH))

    def number(flag: float | None, key: str, kind: type[int] | type[float], low: float) -> Any:
        """A flag, else OAISHIM_<KEY>, else the file's ``key``, else the default in Settings."""
        value = flag if flag is not None else _env(key.upper())
        value = value if value is not None else data.get(key, _DEFAULTS[key])
        return None if value is None else _number(value, key, kind, low)

    store = state or _env("STATE") or data.get("state")
    if store is not None and (not isinstance(store, str) or not store.strip()):
        raise ConfigError(f"state: expected a path, sqlite:…, postgresql://… or memory, got {store!r}")
    secret = state_secret or _env("STATE_SECRET") or data.get("state_secret")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise ConfigError("state_secret: expected a string of at least 16 characters")
    if store is not None and is_postgres(store) and secret is None:
        # every replica must seal and open encrypted_content with one key: a key made up per
        # process would refuse, on one replica, the reasoning another one sealed
        raise ConfigError(
            "state: a PostgreSQL store is shared by replicas, which must share the key that seals "
            "encrypted_content: set --state-secret (OAISHIM_STATE_SECRET, state_secret) to the same value on each"
        )
    age = state_max_age if state_max_age is not None else _env("STATE_MAX_AGE")
    age = age if age is not None else data.get("state_max_age", _DEFAULTS["state_max_age"])
    port_value = _number(port if port is not None else _env("PORT") or data.get("port", 8000), "port", int, 0, 65535)
    return Settings(
        models=routes,
        host=host or _env("HOST") or data.get("host", "127.0.0.1"),
        port=port_value,
        api_keys=keys,
        keep_extensions=keep,
        reasoning_field=field_name,
        text_repair=repair,
        thinking_open=opened,
        special_tokens=tokens,
        display_cleanup=cleanup,
        max_body_bytes=number(max_body_bytes, "max_body_bytes", int, 1),
        header_timeout=number(header_timeout, "header_timeout", float, 1e-3),
        body_timeout=number(body_timeout, "body_timeout", float, 1e-3),
        max_header_bytes=number(max_header_bytes, "max_header_bytes", int, 256),
        max_connections=number(max_connections, "max_connections", int, 0) or None,  # 0: no bound
        connect_timeout=number(connect_timeout, "connect_timeout", float, 1e-3),
        first_byte_timeout=number(first_byte_timeout, "first_byte_timeout", float, 1e-3),
        idle_timeout=number(idle_timeout, "idle_timeout", float, 1e-3),
        total_timeout=number(total_timeout, "total_timeout", float, 0) or None,  # 0: no deadline
        capture_dir=capture_dir,
        capture_redact=redact,
        passthrough=passing,
        ctx_size=number(ctx_size, "ctx_size", int, 0) or None,  # 0: the model's own
        threads=number(threads, "threads", int, 1),
        parallel=number(parallel, "parallel", int, 1),
        llama_args=_arguments(llama_args or _env("LLAMA_ARGS") or data.get("llama_args", ())),
        max_upstream_event_bytes=_megabytes(
            max_upstream_event_mb
            if max_upstream_event_mb is not None
            else _env("MAX_UPSTREAM_EVENT_MB") or data.get("max_upstream_event_mb", 16),
            "max_upstream_event_mb",
        ),
        state=store.strip() if store is not None else None,
        state_max_age=_number(age, "state_max_age", float, 0) or None,  # 0: kept for ever
        state_max_bytes=_megabytes(
            state_max_mb if state_max_mb is not None else _env("STATE_MAX_MB") or data.get("state_max_mb", 8),
            "state_max_mb",
        ),
        state_secret=secret,
    )


def _arguments(value: Any) -> tuple[str, ...]:
    """llama-server arguments: a list, or one string split as a shell would (``--flash-attn on -b 512``)."""
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"llama_args: expected a string or a list of strings, got {value!r}")


def _megabytes(value: Any, name: str) -> int:
    """A size in MiB (fractions allowed) as bytes."""
    return max(1, int(_number(value, name, float, 1e-6) * 1024 * 1024))
