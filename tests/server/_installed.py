"""Where ``scripts/install-clients`` puts the third-party clients, and the live client tests' shared
pieces: a missing install fails under CI (it must be there) and skips elsewhere, and the gateway in
front of the simulated TensorRT-LLM backend with a response store of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest
from _servers import Replayer, RunningGateway, free_port
from _trt import TrtSim

from oaishim.server.config import ModelRoute, Settings

ROOT = Path(os.environ.get("OAISHIM_CLIENTS") or Path.home() / ".cache" / "oaishim" / "clients")


def installed(*parts: str) -> Path | None:
    """A path under the clients' root, or None when it is not there."""
    path = ROOT.joinpath(*parts)
    return path if path.exists() else None


def missing(what: str) -> NoReturn:
    message = f"{what} is not installed: run scripts/install-clients"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def trt_gateway(state_dir: Path, key: str) -> Iterator[tuple[str, TrtSim]]:
    """The gateway (``trtllm@1.4``, one client key, an SQLite store in ``state_dir``) in front of TrtSim."""
    sim = TrtSim()
    with Replayer() as backend:
        backend.responder = sim
        route = ModelRoute("*", (backend.url,), "trtllm@1.4")
        settings = Settings(
            models=(route,), port=free_port(), api_keys=(key,), state=str(state_dir / "responses.sqlite")
        )
        with RunningGateway(settings) as gateway:
            yield gateway.url, sim
