"""Running the gateway: uvicorn with uvloop and httptools (the fastest pure-Python-hosted stack)."""

from __future__ import annotations

import logging

import uvicorn

from oaishim.server.app import Gateway
from oaishim.server.config import Settings


def serve(settings: Settings, *, log_level: str = "info") -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = Gateway(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level=log_level,
        access_log=False,
        server_header=False,
    )
    uvicorn.Server(config).run()
