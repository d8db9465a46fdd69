"""The in-process store, for tests and throwaway runs only: nothing survives the process and one
gateway replica cannot see another's records. Same rules as the databases (it goes through the same
:class:`Codec`, the same retention and the same row window)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from oaishim.state.base import Codec, Limits, Record, RecordConflict, Row, tenant_key


class MemoryStore:
    def __init__(
        self,
        *,
        limits: Limits | None = None,
        secrets: Iterable[str | None] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits or Limits()
        self._codec = Codec(self.limits, secrets)
        self._clock = clock
        self._rows: dict[str, tuple[int, Row]] = {}  # id -> (insert sequence, row)
        self._seq = 0
        self._last_purge = float("-inf")

    def _visible(self, id: str, tenant: str) -> Row | None:
        entry = self._rows.get(id)
        if entry is None:
            return None
        row = entry[1]
        if row.tenant != tenant_key(tenant) or row.created_at < self.limits.cutoff(self._clock()):
            return None
        return row

    async def put(self, record: Record) -> None:
        row = self._codec.row(record)
        held = self._rows.get(row.id)
        if held is not None:
            if held[1].tenant != row.tenant:
                raise RecordConflict(f"response id {row.id} is held by another tenant")
            self._rows[row.id] = (held[0], row)
        else:
            self._seq += 1
            self._rows[row.id] = (self._seq, row)
        if self.limits.max_records is not None:
            floor = self._seq - self.limits.max_records
            for id in [id for id, (seq, _) in self._rows.items() if seq <= floor]:
                del self._rows[id]
        now = self._clock()
        if now - self._last_purge >= self.limits.purge_every:
            await self.purge()

    async def get(self, id: str, tenant: str) -> Record | None:
        row = self._visible(id, tenant)
        if row is None:
            return None
        return Codec.record(
            tenant,
            row.id,
            row.created_at,
            row.model,
            row.previous_response_id,
            row.response,
            row.input_items,
            row.history,
        )

    async def delete(self, id: str, tenant: str) -> bool:
        if self._visible(id, tenant) is None:
            return False
        del self._rows[id]
        return True

    async def history(self, id: str, tenant: str) -> list[Any] | None:
        record = await self.get(id, tenant)
        return None if record is None else record.history

    async def purge(self) -> int:
        now = self._clock()
        self._last_purge = now
        cutoff = self.limits.cutoff(now)
        expired = [id for id, (_, row) in self._rows.items() if row.created_at < cutoff]
        for id in expired:
            del self._rows[id]
        return len(expired)

    async def close(self) -> None:
        self._rows.clear()
