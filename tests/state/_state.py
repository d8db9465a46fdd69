"""Helpers shared by the response store tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from oaishim.state import StateStore


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    name: str
    make: Callable[..., StateStore]  # make(limits=, secrets=, clock=): a new store on the same database
    dump: Callable[[], list[tuple[Any, ...]]]  # every row as it lies in the database
    made: list[StateStore] = field(default_factory=list)

    def run(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run the test's body in one event loop (a PostgreSQL connection belongs to the loop that
        opened it), closing every store it made before the loop ends."""

        async def main() -> None:
            try:
                await body()
            finally:
                for store in self.made:
                    await store.close()

        asyncio.run(main())
