"""One access line per request, on the ``oaishim.access`` logger (stderr under ``oaishim serve``).

``--access-log text`` (the default) writes ``key=value`` fields after the time and the request id;
``json`` one JSON object a line; ``off`` nothing. ``GET /metrics`` (a scraper, every few seconds) is
logged at debug level only. No secret can appear: the line holds no header, no query and no body,
and it is masked with the gateway's secrets like everything a client is sent.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final
from urllib.parse import quote

import orjson

from oaishim.capture.redact import scrub_bytes
from oaishim.server.config import AccessFormat
from oaishim.server.exchange import Exchange

__all__ = ["AccessLog"]

log: Final = logging.getLogger("oaishim.access")
_PATH_SAFE: Final = (
    "/:@!$&'()*+,;=-._~%"  # a path as sent: only what would break the line (spaces, quotes, controls) is escaped
)


def _enabled(level: int) -> bool:
    """``log.isEnabledFor(level)``, read from the logger's own cache when it holds the answer
    (``isEnabledFor`` is interpreted Python, a thousand instructions a request). The cache is the
    logging module's, emptied by every change of level or of ``logging.disable``, so a level set
    later counts at once; without it (another logging), the method answers."""
    if log.disabled:
        return False
    cache: dict[int, bool] | None = getattr(log, "_cache", None)
    known = cache.get(level) if cache is not None else None
    return log.isEnabledFor(level) if known is None else known


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _stamp(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1000):03d}Z"


class AccessLog:
    def __init__(self, form: AccessFormat, secrets: tuple[bytes, ...]) -> None:
        self.form = form
        self.secrets = secrets

    def fields(self, ex: Exchange, ended: float) -> dict[str, Any]:
        return {
            "time": _stamp(ex.wall),
            "request_id": ex.request_id,
            "client": ex.client(),
            "method": ex.method,
            "path": ex.path,
            "model": ex.model,
            "key": ex.key_label,
            "status": ex.status,
            "upstream_status": ex.upstream_status,
            "duration_ms": _ms(ended - ex.started),
            "ttft_ms": _ms(ex.first_token - ex.started) if ex.first_token is not None else None,
            "tokens_in": ex.tokens_in,
            "tokens_out": ex.tokens_out,
            "repairs": list(ex.repairs),
            "bytes": ex.bytes_out,
        }

    def write(self, ex: Exchange, ended: float) -> None:
        if self.form == "off":
            return
        level = logging.DEBUG if ex.path == "/metrics" else logging.INFO
        if not _enabled(level):
            return
        fields = self.fields(ex, ended)
        if self.form == "json":
            line = orjson.dumps(fields)
        else:
            head = f"{fields.pop('time')} {fields.pop('request_id')} {fields.pop('client')} "
            head += f'"{fields.pop("method")} {quote(fields.pop("path"), safe=_PATH_SAFE)}"'
            rest = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
            line = f"{head} {rest}".encode()
        if self.secrets:
            line = scrub_bytes(line, self.secrets)
        log.log(level, "%s", line.decode())


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(value) or "-"
    return str(value)
