"""Network helpers several test folders share."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oaishim.engine.tinymodel import TinyModels


@contextmanager
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener that must receive nothing: it notes every connection and what came on it."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(1)
                try:
                    got.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\nsecret stuff")
                except OSError:
                    got.append(b"")

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], got
    finally:
        server.close()


@contextmanager
def llamacpp_behind_gateway(tiny: TinyModels, alias: str, log: Path) -> Iterator[tuple[str, str]]:
    """A real llama-server on the tiny model (``alias``, its log at ``log``) and a gateway in front of
    it (profile ``llamacpp@b9174``): -> (raw llama-server URL, gateway URL). The caller has
    tests/server on ``sys.path`` (for ``_servers``)."""
    from _servers import RunningGateway, free_port

    from oaishim.engine.llamacpp import LlamaServer
    from oaishim.server.config import ModelRoute, Settings

    with LlamaServer(tiny.gguf, alias=alias, max_tokens=256, log_path=log) as raw:
        route = ModelRoute(name=alias, upstreams=(raw.url,), profile="llamacpp@b9174")
        with RunningGateway(Settings(models=(route,), port=free_port(), special_tokens=tiny.special)) as gateway:
            yield raw.url, gateway.url
