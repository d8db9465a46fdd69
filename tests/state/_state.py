"""Helpers shared by the response store tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from oaishim.state import Record, StateStore

SECRET = "sk-live-0123456789abcdef"


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


def record(n: int = 1, *, tenant: str = "key-a", created_at: int = 1_700_000_000, text: str = "") -> Record:
    prev = f"resp_{n - 1:04d}" if n > 1 else None
    rid = f"resp_{n:04d}"
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": f"answer {n} {text}"}],
    }
    return Record(
        id=rid,
        tenant=tenant,
        created_at=created_at,
        model="tiny-model",
        response={"id": rid, "object": "response", "created_at": created_at, "status": "completed", "output": [answer]},
        input_items=[
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"q{n} {text}"}],
            }
        ],
        history=[{"role": "user", "content": f"q{i}"} for i in range(1, n + 1)]
        + [{"role": "assistant", "content": f"answer {n}"}],
        previous_response_id=prev,
    )
