from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _fake import FakeUpstream, inprocess_gateways
from _servers import Replayer, RunningGateway, free_port

from oaishim.server.config import ModelRoute, Settings


def _in_process(request: pytest.FixtureRequest) -> bool:
    """A module with ``IN_PROCESS = True`` tests gateway logic: no sockets (``_fake``)."""
    return bool(getattr(request.module, "IN_PROCESS", False))


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> Iterator[Replayer | FakeUpstream]:
    if _in_process(request):
        yield FakeUpstream()
        return
    with Replayer() as replayer:
        yield replayer


@pytest.fixture(autouse=True)
def _fresh_backend(request: pytest.FixtureRequest) -> None:
    if "backend" in request.fixturenames:
        replayer: Replayer | FakeUpstream = request.getfixturevalue("backend")
        replayer.reset()


GatewayFactory = Callable[..., RunningGateway]


@pytest.fixture(scope="module")
def gateways(request: pytest.FixtureRequest, backend: Replayer | FakeUpstream) -> Iterator[Callable[..., str]]:
    """Start gateways in front of the replaying backend, one per distinct configuration, kept for the module."""
    if isinstance(backend, FakeUpstream):
        yield from inprocess_gateways(backend)
        return
    running: dict[tuple[object, ...], RunningGateway] = {}

    def start(profile: str = "openai", *, name: str = "*", api_keys: tuple[str, ...] = (), **settings: object) -> str:
        key = (profile, name, api_keys, tuple(sorted(settings.items())))
        if key not in running:
            route = ModelRoute(name=name, upstreams=(backend.url,), profile=profile)
            gw = RunningGateway(Settings(models=(route,), port=free_port(), api_keys=api_keys, **settings))  # type: ignore[arg-type]
            running[key] = gw.__enter__()
        return running[key].url

    yield start
    for gw in running.values():
        gw.__exit__(None, None, None)


@pytest.fixture
def capture_socket(tmp_path: Path) -> socket.socket:
    """The capture process's end of a worker's link: a Unix socket listening at
    ``tmp_path / "capture.sock"``, for a ``RemoteWriter`` to connect to."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "capture.sock"))
    server.listen(4)
    return server
