"""uvicorn in a thread of the test process, stopped as soon as the test is done with it.

``uvicorn.Server`` is made for a process that runs until a signal: it looks at ``should_exit``
every 0.1 s, then waits a fixed 0.1 s for the open connections to close, so each stop costs about
0.2 s, and the tests start and stop hundreds of servers. ``ThreadServer`` wakes on the stop at
once and waits only as long as connections and tasks are still open (the same graceful steps, the
same limit, polled finely); the app's lifespan shutdown runs as under ``oaishim serve``. What the
product does when it is stopped by a signal is tested on real ``oaishim serve`` processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import uvicorn


class ThreadServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), daemon=True)

    def start(self, what: str = "the server") -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.002)

    def stop(self) -> None:
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(wake.set)
        self._thread.join(timeout=10)

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):  # a tick every 0.1 s keeps the date header fresh
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        limit = self.config.timeout_graceful_shutdown
        deadline = None if limit is None else time.monotonic() + limit
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
            if deadline is not None and time.monotonic() > deadline:
                for task in self.server_state.tasks:
                    task.cancel()
                break
            await asyncio.sleep(0.002)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()
