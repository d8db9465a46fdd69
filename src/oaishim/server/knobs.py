"""The gateway's settings one by one: each knob's key (flag keyword, config key, ``OAISHIM_<KEY>``),
the Settings field it fills and the parser that turns what was given into that field's value.

``server.config.build_settings`` reads every knob the same way (flag, else variable, else file, else
the Settings default); what a knob accepts, and the error that says what is wrong with a value,
is its parser's.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oaishim.capture.redact import parse_path
from oaishim.engine.tokens import load_special_tokens
from oaishim.profiles import get_profile
from oaishim.server.idle_poll import MAX_WINDOW_US
from oaishim.transform.context import ReasoningField
from oaishim.transform.special import SpecialTokens
from oaishim.wire.paths import parse_rule

REASONING_FIELDS: tuple[ReasoningField, ...] = ("reasoning_content", "reasoning", "both", "drop")
# Backend paths a client may reach through the gateway besides the OpenAI endpoints: read-only ones.
# Admin routes (vLLM /v1/load_lora_adapter, /sleep; SGLang /flush_cache, …) stay out unless listed.
DEFAULT_PASSTHROUGH = ("POST /tokenize", "POST /detokenize", "GET /version")
# The paths the gateway answers itself: no pass-through rule may cover them.
GATEWAY_PATHS = (
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses", "/health", "/metrics",
)  # fmt: skip
ACCESS_FORMATS = ("text", "json", "off")


class ConfigError(ValueError):
    """A setting that cannot work; the message says which and why."""


def _env(name: str) -> str | None:
    value = os.environ.get("OAISHIM_" + name)
    return value if value not in (None, "") else None


def is_postgres(target: str) -> bool:
    return target.strip().lower().startswith(("postgresql:", "postgres:"))


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


def _arguments(value: Any, name: str) -> tuple[str, ...]:
    """llama-server arguments: a list, or one string split as a shell would (``--flash-attn on -b 512``)."""
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{name}: expected a string or a list of strings, got {value!r}")


def _megabytes(value: Any, name: str) -> int:
    """A size in MiB (fractions allowed) as bytes."""
    return max(1, int(_number(value, name, float, 1e-6) * 1024 * 1024))


def _numeric(kind: type[int] | type[float], low: float, high: float = float("inf"), *, zero: bool = False) -> Parse:
    """A number in ``[low, high]``; with ``zero``, 0 stands for None (no bound, no deadline, the model's own)."""

    def parse(value: Any, name: str) -> Any:
        number = _number(value, name, kind, low, high)
        return None if zero and number == 0 else number

    return parse


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return value.strip()


def _reasoning_field(value: Any, name: str) -> ReasoningField:
    for known in REASONING_FIELDS:
        if value == known:
            return known
    raise ConfigError(f"{name}: {value!r} is not one of {', '.join(REASONING_FIELDS)}")


def _special_tokens(value: Any, name: str) -> SpecialTokens:
    try:
        return load_special_tokens(Path(value))
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{name}: cannot load {value}: {exc}") from exc


def _redact_paths(value: Any, name: str) -> tuple[str, ...]:
    paths = _keys(value, name)
    for path in paths:
        try:
            parse_path(path)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return paths


def _state(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}: expected a path, sqlite:…, postgresql://… or memory, got {value!r}")
    return value.strip()


def _secret(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) < 16:
        raise ConfigError(f"{name}: expected a string of at least 16 characters")
    return value


def _access_log(value: Any, name: str) -> str:
    if isinstance(value, str) and value.strip().lower() in ACCESS_FORMATS:
        return value.strip().lower()
    raise ConfigError(f"{name}: {value!r} is not one of {', '.join(ACCESS_FORMATS)}")


def _metrics_key(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value.strip()) < 8:
        raise ConfigError(f"{name}: expected a key of at least 8 characters")
    return value.strip()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def usable_memory(root: Path = Path("/")) -> int | None:
    """The bytes of memory this process may use: the machine's (``/proc/meminfo``), or less where
    its cgroup (v2), or one above it, sets ``memory.max``; None where neither can be read.
    ``root``: where ``/proc`` and ``/sys`` are (a test's folder)."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                found.append(int(line.split()[1]) * 1024)  # kB
                break
    with contextlib.suppress(OSError):
        for line in (root / "proc/self/cgroup").read_text().splitlines():
            if not line.startswith("0::"):
                continue  # (a v1 hierarchy's line)
            top = root / "sys/fs/cgroup"
            group = top / line[3:].strip().lstrip("/")
            for folder in (group, *group.parents):
                with contextlib.suppress(OSError, ValueError):
                    value = (folder / "memory.max").read_text().strip()
                    if value != "max":
                        found.append(int(value))
                if folder == top:
                    break
    return min(found) if found else None


class IdleCores:
    """The cores the machine left idle on average since the last call, from ``/proc/stat`` (its
    first line: the time of all cores, in ticks); None where that file cannot be read."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path
        self._last = self._read()

    def _read(self) -> tuple[int, int, int] | None:
        try:
            with open(self.path, "rb") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if len(fields) < 5 or fields[0] != b"cpu":
            return None
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
        return ticks[3] + ticks[4], sum(ticks), os.cpu_count() or 1

    def __call__(self) -> float | None:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return (now[0] - last[0]) / (now[1] - last[1]) * now[2]


def _workers(value: Any, name: str) -> int:
    """Serving processes; 0 stands for one per usable core."""
    number: int = _number(value, name, int, 0, 1024)
    return number or usable_cores()


def _limits(value: Any, name: str) -> str | None:
    """Where the virtual keys' limits are counted: memory (this process) or redis://…, rediss://…"""
    text = value.strip() if isinstance(value, str) else ""
    if text.lower() == "memory":
        return None
    if not text.lower().startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"{name}: expected memory or a redis:// URL, got {value!r}")
    return text


Parse = Callable[[Any, str], Any]


@dataclass(frozen=True, slots=True)
class Knob:
    parse: Parse
    field: str | None = None  # the Settings field, when it is not the knob's key


KNOBS: dict[str, Knob] = {
    "host": Knob(_text),
    "port": Knob(_numeric(int, 0, 65535)),
    "workers": Knob(_workers),  # serving processes (server.workers)
    "keep_extensions": Knob(_bool),
    "reasoning_field": Knob(_reasoning_field),
    "text_repair": Knob(_bool),
    "thinking_open": Knob(_bool),
    "special_tokens": Knob(_special_tokens),
    "display_cleanup": Knob(_bool),
    "capture": Knob(
        lambda value, name: Path(value) if isinstance(value, Path) else Path(_text(value, name)), "capture_dir"
    ),
    "capture_redact": Knob(_redact_paths),
    "capture_backlog_mb": Knob(_megabytes, "capture_backlog_bytes"),  # server.capture_pace
    "passthrough": Knob(lambda value, name: _passthrough(value)),
    # the client side (server.http)
    "max_body_bytes": Knob(_numeric(int, 1)),
    "header_timeout": Knob(_numeric(float, 1e-3)),
    "body_timeout": Knob(_numeric(float, 1e-3)),
    "send_timeout": Knob(_numeric(float, 1e-3)),
    "max_header_bytes": Knob(_numeric(int, 256)),
    "max_connections": Knob(_numeric(int, 0, zero=True)),
    "idle_poll_us": Knob(_numeric(int, 0, MAX_WINDOW_US)),  # server.idle_poll
    # the upstream side (server.upstream)
    "connect_timeout": Knob(_numeric(float, 1e-3)),
    "first_byte_timeout": Knob(_numeric(float, 1e-3)),
    "idle_timeout": Knob(_numeric(float, 1e-3)),
    "total_timeout": Knob(_numeric(float, 0, zero=True)),
    "max_upstream_event_mb": Knob(_megabytes, "max_upstream_event_bytes"),
    # the embedded engine
    "ctx_size": Knob(_numeric(int, 0, zero=True)),
    "threads": Knob(_numeric(int, 1)),
    "parallel": Knob(_numeric(int, 1)),
    "llama_args": Knob(_arguments),
    # the response store
    "state": Knob(_state),
    "state_max_age": Knob(_numeric(float, 0, zero=True)),
    "state_max_mb": Knob(_megabytes, "state_max_bytes"),
    "state_secret": Knob(_secret),
    # operating it (server.access, server.metrics)
    "access_log": Knob(_access_log),
    "metrics_key": Knob(_metrics_key),
    "limits": Knob(_limits),
}
