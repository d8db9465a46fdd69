"""The writes of one turn of the event loop: the first goes out at once, the others together at the
turn's end.

Why: each write to a socket whose reader sleeps wakes that reader, and on a machine where the
client or the backend runs beside the gateway a wake-up costs the writer more than the write (the
kernel's wake-up of the other core: in the profile of the gateway under 32 concurrent requests, a
third of its time was in the two ``write`` calls of each request). A turn that answers many
requests wakes each reader once for its first write and once more for the rest, instead of once a
write. The first write of a turn is not held, and no write is while a single request is under
way (the holders check: a lone stream's tokens, a client at a time): those go out as before, and
the turn costs them no callback.

A :class:`Holder` (a client connection of ``server.http``, an upstream one of ``server.h1client``)
keeps what it is handed while its turn is open and writes it, joined, when :meth:`Outbox._end`
calls its ``flush``; it flushes by itself before anything else reaches its transport (a close, an
end of writing, a write past :data:`HOLD_MAX` bytes), so its bytes keep their order and none is
left behind.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

HOLD_MAX = 64 * 1024  # bytes a holder keeps before it writes anyway (the transport's flow control takes over)


class Holder(Protocol):
    def flush(self) -> None: ...


class Outbox:
    """One per event loop and side (the server's connections share one, the upstream pool another)."""

    __slots__ = ("_held", "_open")

    def __init__(self) -> None:
        self._open = False  # a write went out in this turn: the next ones are held
        self._held: list[Holder] = []

    def first(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a write may go out now: the turn's first (the turn then opens, and ends when the
        loop comes back to its callbacks)."""
        if self._open:
            return False
        self._open = True
        loop.call_soon(self._end)
        return True

    def hold(self, holder: Holder) -> None:
        """``holder`` has bytes to write at the turn's end."""
        self._held.append(holder)

    def _end(self) -> None:
        self._open = False
        held = self._held
        if held:
            self._held = []
            for holder in held:
                holder.flush()
