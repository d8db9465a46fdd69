"""What the serving processes of one gateway share (``serve --workers N``, ``--capture``).

The serving parent builds a :class:`Cluster` before it forks anything; every worker inherits it:

* ``run_dir``, a private (0700) folder for the sockets below, removed when the parent exits;
* the capture process's socket, when ``--capture`` is on (``server.capture_process``);
* the virtual keys' shared buckets, when a key has a limit and no Redis is configured
  (``server.shared_limits``);
* with several workers, one Unix socket per worker that answers its own metrics page: ``GET
  /metrics``, on whichever worker it lands, reads its siblings' pages and answers their sum
  (counters, gauges and histogram buckets add up; a ``_created`` sample is the earliest). Nothing of
  this is on the request path; a worker that does not answer within ``PEER_TIMEOUT`` is left out
  of that scrape (and logged). A worker's counts go with it when it dies, as a restarted process's
  would (Prometheus reads the drop as a counter reset).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from oaishim.server.capture_feed import RemoteRecording
from oaishim.server.shared_limits import SharedBuckets

log = logging.getLogger("oaishim.server")
PEER_TIMEOUT = 2.0  # seconds a sibling has to hand over its metrics page
WORKER_HEADER = b"x-oaishim-worker"  # on /health, with several workers: which process answered


@dataclass
class Cluster:
    run_dir: Path
    workers: int = 1
    capture: Path | None = None  # the capture process's socket
    capture_backlog: int = 0  # the bound of the capture process's backlog, which the workers share
    buckets: SharedBuckets | None = None
    _server: asyncio.AbstractServer | None = field(default=None, repr=False)

    def recording(self) -> RemoteRecording | None:
        if self.capture is None:
            return None
        return RemoteRecording(self.capture, self.capture_backlog, self.workers)

    def health_headers(self) -> list[tuple[bytes, bytes]]:
        return [(WORKER_HEADER, str(os.getpid()).encode())] if self.workers > 1 else []

    # -- the metrics of every worker -----------------------------------------------------------------
    def _socket(self, pid: int) -> Path:
        return self.run_dir / f"metrics-{pid}.sock"

    async def start(self, render: Callable[[], bytes]) -> None:
        """Answer siblings' scrapes with ``render()`` (this worker's own page)."""
        if self.workers <= 1:
            return

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(render())
                await writer.drain()
            finally:
                writer.close()

        path = self._socket(os.getpid())
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a pid reused after a worker that died
        self._server = await asyncio.start_unix_server(answer, path=str(path))

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self._socket(os.getpid()).unlink()

    async def metrics_page(self, own: bytes) -> bytes:
        """The whole server's page: ``own`` plus every sibling's."""
        if self.workers <= 1:
            return own
        mine = self._socket(os.getpid())
        peers = [p for p in self.run_dir.glob("metrics-*.sock") if p != mine]
        pages = await asyncio.gather(*(self._read(p) for p in peers))
        return merge([own, *(page for page in pages if page is not None)])

    async def _read(self, path: Path) -> bytes | None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), PEER_TIMEOUT)
            try:
                return await asyncio.wait_for(reader.read(), PEER_TIMEOUT)
            finally:
                writer.close()
        except ConnectionRefusedError:  # nobody listens there: a worker killed outright, since replaced
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None
        except (TimeoutError, OSError) as exc:
            log.warning("metrics: worker socket %s did not answer (%s)", path.name, type(exc).__name__)
            return None


class _Merged(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def merge(pages: list[bytes]) -> bytes:
    """The sum of several Prometheus text pages of the same metrics, as one page."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for page in pages:
        for family in text_string_to_metric_families(page.decode()):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            seen = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = seen.get(key)
                if before is None:
                    seen[key] = sample.value
                elif sample.name.endswith("_created"):
                    seen[key] = min(before, sample.value)
                else:
                    seen[key] = before + sample.value
    out = []
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    return generate_latest(_Merged(out))
