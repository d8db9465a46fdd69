"""Whether the gateway makes OpenTelemetry traces: only when the standard ``OTEL_*`` variables ask for them.

Tracing is off unless an exporter is named (``OTEL_TRACES_EXPORTER``, other than ``none``) or an
OTLP endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
``OTEL_SDK_DISABLED=true`` turns it off whatever else is set. Off, nothing of OpenTelemetry is
imported and a request pays one ``is None`` test per hook. On, :mod:`oaishim.server.spans` (the
``otel`` extra: opentelemetry-api, -sdk and the OTLP/HTTP exporter) makes the spans; when the extra is
not installed the gateway says so once and serves without traces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oaishim.server.spans import Spans

__all__ = ["configured", "wanted"]

log = logging.getLogger("oaishim.tracing")
_warned: list[bool] = []  # the missing extra is said once per process


def wanted(environ: Mapping[str, str]) -> bool:
    """What the ``OTEL_*`` variables say: are traces to be exported?"""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",")} - {""}
    if exporters:
        return exporters != {"none"}
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configured(environ: Mapping[str, str] | None = None) -> Spans | None:
    """The gateway's tracing as the environment configures it; None when off (or not installed)."""
    environ = os.environ if environ is None else environ
    if not wanted(environ):
        return None
    try:
        from oaishim.server import spans
    except ImportError as exc:
        if not _warned:
            _warned.append(True)
            log.warning(
                "OTEL_* variables ask for traces, but OpenTelemetry is not installed (%s): serving without "
                "traces. Install the extra: pip install 'oaishim[otel]'",
                exc,
            )
        return None
    return spans.from_env(environ)
