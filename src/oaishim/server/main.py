"""Running ASGI apps: the gateway's own HTTP/1.1 server (server.serving, server.http: httptools on
uvloop, with deadlines and size bounds for requests and a connection bound), in one process or
in workers beside a capture process."""

from __future__ import annotations

import dataclasses
import logging
import resource
import tempfile
from pathlib import Path
from typing import Any

from oaishim.server.app import Gateway
from oaishim.server.capture_process import CaptureProcess
from oaishim.server.cluster import Cluster
from oaishim.server.config import Settings
from oaishim.server.http import HttpLimits
from oaishim.server.serving import Server
from oaishim.server.shared_limits import SharedBuckets
from oaishim.server.workers import Listener, Supervisor

log = logging.getLogger("oaishim.server")
# File descriptors kept beside the client connections: the listening socket, logs, capture files,
# idle pooled upstream connections.
FD_RESERVE = 64


def limits_for(settings: Settings) -> HttpLimits:
    return HttpLimits(
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        send_timeout=settings.send_timeout,
        max_header_bytes=settings.max_header_bytes,
        max_body_bytes=settings.max_body_bytes,
        max_connections=settings.max_connections,
        idle_poll_us=settings.idle_poll_us,
    )


def fit_connections(limits: HttpLimits) -> HttpLimits:
    """Make room for ``max_connections`` in the open-file limit (each client connection can hold an
    upstream one too): raise the soft limit toward the hard one, else lower the bound to what fits.
    Without this, a flood of connections exhausts the descriptors and nothing is answered."""
    wanted = limits.max_connections
    if wanted is None:
        return limits
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    room = wanted if soft == resource.RLIM_INFINITY else max(1, (soft - FD_RESERVE) // 2)
    if room < wanted:
        log.warning("max_connections lowered from %d to %d to fit the open-file limit (%d)", wanted, room, soft)
        return dataclasses.replace(limits, max_connections=room)
    return limits


def run_asgi(
    app: Any,
    host: str,
    port: int,
    log_level: str = "info",
    *,
    date_header: bool = True,
    limits: HttpLimits | None = None,
) -> bool:
    """Serve an ASGI app as the gateway is served, until a stop signal; whether it started (its
    lifespan startup passed). ``date_header=False`` adds no header of the server's own (the capture
    proxy and the mock pass the recorded headers as they were)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return Server(app, host, port, fit_connections(limits or HttpLimits()), date_header=date_header).run()


def serve(settings: Settings, *, log_level: str = "info") -> int:
    """Serve until stopped; the exit status. One process unless ``--workers`` or ``--capture``
    asks for more (server.workers, server.capture_process)."""
    if settings.workers <= 1 and settings.capture_dir is None:
        started = run_asgi(Gateway(settings), settings.host, settings.port, log_level, limits=limits_for(settings))
        return 0 if started else 3
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = fit_connections(limits_for(settings))
    with tempfile.TemporaryDirectory(prefix="oaishim-") as run:  # 0700: the processes' sockets
        run_dir = Path(run)
        try:
            listener = Listener(settings.host, settings.port)
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", settings.host, settings.port, exc.strerror or exc)
            return 1
        settings = dataclasses.replace(settings, port=listener.port)
        limited = tuple(k for k in settings.virtual_keys if k.rpm or k.tpm)
        buckets = (
            SharedBuckets(settings.virtual_keys, run_dir / "limits.lock") if limited and settings.workers > 1 else None
        )
        cluster = Cluster(run_dir, settings.workers, buckets=buckets)
        helper = None
        if settings.capture_dir is not None:
            capture = CaptureProcess(settings, run_dir / "capture.sock")
            cluster.capture, cluster.capture_backlog = capture.address, capture.backlog

            def start_capture() -> int:
                capture.start()
                return capture.pid

            helper = (start_capture, capture.stop)

        def worker() -> int:
            sock = listener.for_worker()
            gateway = Gateway(settings, cluster=cluster)  # here: each worker has its own upstream pool
            return 0 if Server(gateway, settings.host, listener.port, limits).run(sockets=[sock]) else 3

        try:
            return Supervisor(settings.workers, worker, helper=helper).run()
        except OSError as exc:  # the capture folder cannot be written, the capture socket not made
            log.error("cannot start: %s", exc)
            return 1
        finally:
            listener.close()
