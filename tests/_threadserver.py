"""The gateway's HTTP server (``server.serving``) in a thread of the test process, stopped as soon
as the test is done with it.

The server runs on asyncio's own loop unless told (uvloop's is what ``oaishim serve`` uses; both
run the same protocol). :meth:`ThreadServer.stop` takes the same graceful steps a signal does: no more
connections, the answers under way finished, the app's lifespan shutdown. What the product does
when it is stopped by a signal is tested on real ``oaishim serve`` processes.
"""

from __future__ import annotations

import threading
import time

from oaishim.server.serving import Server


class ThreadServer:
    def __init__(self, server: Server, loop: str = "asyncio") -> None:
        self.server = server
        self._thread = threading.Thread(target=lambda: server.run(loop=loop), daemon=True)

    @property
    def started(self) -> bool:
        return self.server.started

    def start(self, what: str = "the server") -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.002)

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(timeout=10)
