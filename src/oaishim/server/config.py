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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oaishim.transform.context import ReasoningField

REASONING_FIELDS: tuple[ReasoningField, ...] = ("reasoning_content", "reasoning", "both", "drop")


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
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout: float = 10.0
    first_byte_timeout: float = 600.0
    idle_timeout: float = 300.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def route(self, model: str | None) -> ModelRoute | None:
        """The route for a client's model name; a single route serves any name."""
        for route in self.models:
            if route.name == model:
                return route
        if len(self.models) == 1 and self.models[0].name == "*":
            return self.models[0]
        return None


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
        routes.append(
            ModelRoute(
                name=entry["name"],
                upstreams=tuple(u.rstrip("/") for u in ups),
                profile=str(entry.get("profile", "auto")),
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
) -> Settings:
    """Combine flags (None = not given), the environment and the config file into Settings."""
    file_path = config or (Path(p) if (p := _env("CONFIG")) else None)
    data = load_file(file_path) if file_path else {}
    upstream = upstream or _env("UPSTREAM") or data.get("upstream")
    routes = _routes(data["models"]) if "models" in data else ()
    if upstream:
        name = served_model_name or _env("SERVED_MODEL_NAME") or data.get("served_model_name") or "*"
        route = ModelRoute(
            name=name,
            upstreams=tuple(u.strip().rstrip("/") for u in upstream.split(",")),
            profile=profile or _env("PROFILE") or data.get("profile", "auto"),
            upstream_api_key=upstream_api_key or _env("UPSTREAM_API_KEY") or data.get("upstream_api_key"),
        )
        routes = (route, *[r for r in routes if r.name != name])
    keys = tuple(api_keys) or tuple(k for k in (_env("API_KEYS") or _env("API_KEY") or "").split(",") if k)
    keys = keys or tuple(data.get("api_keys", ()))
    field_name = reasoning_field or _env("REASONING_FIELD") or data.get("reasoning_field", "reasoning_content")
    if field_name not in REASONING_FIELDS:
        raise ConfigError(f"reasoning_field: {field_name!r} is not one of {', '.join(REASONING_FIELDS)}")
    keep = (
        keep_extensions
        if keep_extensions
        else _bool(_env("KEEP_EXTENSIONS") or data.get("keep_extensions", False), "keep_extensions")
    )
    port_value = port if port is not None else int(_env("PORT") or data.get("port", 8000))
    return Settings(
        models=routes,
        host=host or _env("HOST") or data.get("host", "127.0.0.1"),
        port=port_value,
        api_keys=keys,
        keep_extensions=keep,
        reasoning_field=field_name,
        max_body_bytes=int(data.get("max_body_bytes", 16 * 1024 * 1024)),
        connect_timeout=float(data.get("connect_timeout", 10.0)),
        first_byte_timeout=float(data.get("first_byte_timeout", 600.0)),
        idle_timeout=float(data.get("idle_timeout", 300.0)),
    )
