"""Fixtures of the real-client tests: the simulated backend and the routes to it (gateway or direct)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _clients import VIAS, embedded_gateway
from _reasoner import Reasoner
from _servers import Replayer


@pytest.fixture(scope="module")
def reasoner(backend: Replayer) -> Iterator[Reasoner]:
    sim = Reasoner()
    backend.responder = sim
    yield sim
    backend.responder = None


@pytest.fixture(scope="module")
def base_url(reasoner: Reasoner, backend: Replayer, gateways: Any) -> Callable[[str], str]:
    """The Chat Completions base URL for a route: through the gateway with a profile, or straight at the backend."""

    def url(via: str) -> str:
        return (backend.url if via == "direct" else gateways(VIAS[via])) + "/v1"

    return url


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``oaishim serve`` on the embedded engine, one per module: (its /v1 base URL, its log)."""
    with embedded_gateway(tmp_path_factory.mktemp("embedded")) as served:
        yield served
