"""Serving an ASGI app on ``server.http``'s connections: listening, lifespan, signals, a graceful stop.

:class:`Server` is what ``oaishim serve`` runs in each worker (and the capture proxy and the mock
in theirs): it runs the app's ``lifespan`` startup before the first connection is taken (an app
whose startup fails is not served: :attr:`Server.started` stays False), keeps the ``date`` header
current (one update a second, shared by every response), and stops on SIGTERM or SIGINT (in the
main thread) or :meth:`Server.stop` (from any thread): it stops listening, closes the idle
connections, lets each request in progress finish its answer (a second signal cancels them), then
runs the lifespan shutdown. A stop while the startup has not completed cancels it, and the server
does not start. Once started, what the startup made is frozen out of the cyclic collector's passes
(``gc.freeze``); a request makes no reference cycles (tests/server/test_no_cycles.py), so what it
made is freed as it ends and the collector has little to walk.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from oaishim.server.http import HttpLimits, ServerState, protocol_factory
from oaishim.server.idle_poll import POLL

log = logging.getLogger("oaishim.server")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
BACKLOG = 2048
GC_YOUNG = 10_000  # allocations between two passes of the cyclic collector over the youngest objects


def event_loop_factory(loop: str = "uvloop") -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where it is installed and asked for, else asyncio's."""
    if loop == "uvloop":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.new_event_loop
    return asyncio.new_event_loop


class Lifespan:
    """The app's ``lifespan`` scope, driven from the server: startup, then (later) shutdown."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._answers: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ended = self._failed = False

    async def startup(self) -> bool:
        """True once the app reports its startup complete (or takes no lifespan at all)."""
        self._task = asyncio.get_running_loop().create_task(self._main())
        answer = await self._ask("lifespan.startup")
        if answer is not None and answer["type"] == "lifespan.startup.failed":
            log.error("the application's startup failed: %s", answer.get("message", ""))
            return False
        return answer is not None or not self._failed

    async def shutdown(self) -> None:
        if self._ended:
            return
        answer = await self._ask("lifespan.shutdown")
        if answer is not None and answer["type"] == "lifespan.shutdown.failed":
            log.error("the application's shutdown failed: %s", answer.get("message", ""))
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def cancel(self) -> None:
        """The app's lifespan cancelled where it is (its startup never completed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _ask(self, kind: str) -> dict[str, Any] | None:
        await self._inbox.put({"type": kind})
        return await self._answers.get()  # None: the app returned or raised instead of answering

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        try:
            await self.app(scope, self._inbox.get, self._answers.put)
        except Exception:
            self._failed = True
            log.exception("the application's lifespan failed")
        finally:
            self._ended = True
            await self._answers.put(None)


class Server:
    """An ASGI app served over HTTP/1.1 on ``host:port`` (or on sockets given to :meth:`serve`)."""

    def __init__(
        self, app: Any, host: str, port: int, limits: HttpLimits | None = None, *, date_header: bool = True
    ) -> None:
        self.app, self.host, self.port = app, host, port
        self.date_header = date_header
        self.started = False
        self.should_exit = self.force_exit = False
        self.state = ServerState(app, limits or HttpLimits())
        # an app that records asks (``notes_reads``) for the read that carried a whole request (server.http)
        self.state.note_reads = bool(getattr(app, "notes_reads", False))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    def run(self, sockets: list[socket.socket] | None = None, loop: str = "uvloop") -> bool:
        """Serve until stopped; whether the server started at all (its app's startup passed)."""
        with asyncio.Runner(loop_factory=event_loop_factory(loop)) as runner:
            runner.run(self.serve(sockets))
        return self.started

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        handled = self._take_signals(loop)
        try:
            lifespan = Lifespan(self.app)
            if not await self._started(lifespan):
                return
            factory = protocol_factory(self.state, loop)
            try:
                if sockets:
                    listening = [await loop.create_server(factory, sock=s, backlog=BACKLOG) for s in sockets]
                else:
                    listening = [await loop.create_server(factory, self.host, self.port, backlog=BACKLOG)]
            except OSError as exc:
                log.error("cannot listen on %s:%d: %s", self.host, self.port, exc.strerror or exc)
                await lifespan.shutdown()
                return
            # What start-up made (modules, the spec's schemas, the profiles) lives as long as the
            # process: kept out of the collector's passes, which then look at requests' objects only.
            gc.collect()
            gc.freeze()
            # and, with no cycles left to find in a request's objects, its first generation looked
            # at every 10,000 allocations instead of 700 (each pass walks the requests under way)
            gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
            # Started only now: whoever waits on it (a supervisor, a test's thread) finds the
            # start-up's collection over, not still running beside its first requests.
            self.started = True
            bound = [s.getsockname() for server in listening for s in server.sockets]
            log.info("serving on %s", ", ".join(f"http://{a[0]}:{a[1]}" for a in bound))
            self._tick()
            if self.state.limits.idle_poll_us > 0:  # (one per process: one that does not poll leaves it be)
                POLL.start(loop, self.state.limits.idle_poll_us)
            while not self.should_exit:
                await self._wake.wait()
                self._wake.clear()
            POLL.stop(loop)  # (a draining server sleeps between reads; a no-op unless this loop polls)
            await self._drain(listening)
            if not self.force_exit:
                await lifespan.shutdown()
        finally:
            POLL.stop(loop)  # (a no-op unless this loop polls)
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def _started(self, lifespan: Lifespan) -> bool:
        """The app's startup, unless a stop comes first: a signal while the startup hangs (a store
        or a backend that never answers) ends the process instead of waiting on it."""
        assert self._wake is not None
        startup = asyncio.ensure_future(lifespan.startup())
        stop = asyncio.ensure_future(self._wake.wait())
        await asyncio.wait((startup, stop), return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if startup.done():  # (a stop that came with it is taken once serving: _drain, then shutdown)
            return startup.result()
        log.warning("stopped before the application's startup was complete")
        await lifespan.cancel()
        startup.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await startup
        return False

    def stop(self, force: bool = False) -> None:
        """Stop serving (from any thread); ``force``: without waiting for the answers under way."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.should_exit = True
            return
        with contextlib.suppress(RuntimeError):  # the loop has just ended
            loop.call_soon_threadsafe(self._signalled if not force else self._forced)

    # -- inside the loop -----------------------------------------------------------------------
    def _take_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            return []
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._signalled)
        return list(STOP_SIGNALS)

    def _signalled(self) -> None:
        if self.should_exit:
            self._forced()
            return
        self.should_exit = True
        if self._wake is not None:
            self._wake.set()

    def _forced(self) -> None:
        self.should_exit = self.force_exit = True
        self._cancel_all()
        if self._wake is not None:
            self._wake.set()

    def _cancel_all(self) -> None:
        for task in list(self.state.tasks):
            task.cancel()
        for conn in list(self.state.connections):
            conn.transport.abort()

    def _tick(self) -> None:
        """The ``date`` header for the coming second, and the next tick."""
        if self.date_header:
            self.state.date = b"date: %s\r\n" % formatdate(usegmt=True).encode()
        if not self.should_exit and self._loop is not None:
            self._loop.call_at(self._loop.time() + 1.0 - time.time() % 1.0, self._tick)

    async def _drain(self, listening: list[asyncio.Server]) -> None:
        self.state.stopping = True
        for server in listening:
            server.close()
        for conn in list(self.state.connections):
            conn.shutdown()
        # as long as the answers under way take (a second signal cancels them: _forced)
        while (self.state.connections or self.state.tasks) and not self.force_exit:
            await asyncio.sleep(0.005)
        for server in listening:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
