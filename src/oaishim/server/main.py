"""Running ASGI apps: uvicorn with uvloop and httptools (the fastest pure-Python-hosted stack)."""

from __future__ import annotations

import logging
from typing import Any

import uvicorn

from oaishim.server.app import Gateway
from oaishim.server.config import Settings


def run_asgi(app: Any, host: str, port: int, log_level: str = "info", *, date_header: bool = True) -> None:
    """Serve an ASGI app as the gateway is served; ``date_header=False`` adds no header of uvicorn's
    own (the capture proxy and the mock pass the recorded headers as they were)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level=log_level,
        access_log=False,
        server_header=False,
        date_header=date_header,
    )
    uvicorn.Server(config).run()


def serve(settings: Settings, *, log_level: str = "info") -> None:
    run_asgi(Gateway(settings), settings.host, settings.port, log_level)
