"""The response store's contract: what a record holds, the bounds it lives under, the errors a backend
raises, and the serialising step every backend shares (redaction, size check, tenant key).

A record is self-contained: its ``history`` is the whole chat-format conversation up to and including
this turn's output, so continuing from it (``previous_response_id``) reads one row, and deleting or
expiring an ancestor never breaks a descendant.

Bounds (:class:`Limits`):

* ``max_age`` — retention in seconds from the record's ``created_at``. An older record is never
  returned (whether or not it was purged yet); expired rows are deleted by :meth:`StateStore.purge`
  and, opportunistically, by a ``put`` at most once every ``purge_every`` seconds.
* ``max_bytes`` — the serialised size of one record (response + input items + history, after
  redaction). A larger one is refused with :class:`RecordTooLarge`, an OpenAI 400.
* ``max_records`` — a row-window bound with oldest-first eviction: a record is evicted once
  ``max_records`` newer records have been written. Counted by the insert sequence rather than a
  ``COUNT(*)`` so that the bound costs one index look-up per put; deleted or expired rows leave gaps,
  so the store may hold fewer rows than the bound, never more. The disk a store can take is hence at
  most ``max_records * max_bytes`` plus the database's overhead.

Tenancy: a record is visible only to the tenant that wrote it (the gateway passes its client's key
identity). The store keeps only a SHA-256 of the tenant string, so an API key used as the tenant
never lands in the database.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from oaishim.capture.redact import MASK, MIN_SECRET, scrub_bytes, secret_needles
from oaishim.wire.errors import OpenAIError, bad_request, internal_error

__all__ = [
    "Codec",
    "Limits",
    "Record",
    "RecordConflict",
    "RecordTooLarge",
    "Row",
    "StateStore",
    "StoreError",
    "StoreUnavailable",
    "tenant_key",
]

DAY = 86400.0
NO_CUTOFF = -(2**63)


@dataclass(frozen=True, slots=True)
class Record:
    id: str  # resp_…
    tenant: str  # the client's key identity or a tenant name; only the same tenant reads it back
    created_at: int  # unix seconds, the Response's created_at
    model: str
    response: dict[str, Any]  # the full Response object
    input_items: list[Any]  # as GET /v1/responses/{id}/input_items lists them
    history: list[Any]  # chat-format messages of all prior turns plus this turn's output
    previous_response_id: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    max_age: float | None = 30 * DAY  # OpenAI keeps stored responses 30 days
    max_bytes: int = 8 * 1024 * 1024
    max_records: int | None = 100_000
    purge_every: float = 60.0  # seconds between the purges a put runs on its way

    def cutoff(self, now: float) -> int:
        """The oldest ``created_at`` still visible at ``now`` (an integer, so that it binds as the
        column's type and the created_at index serves the comparison)."""
        return NO_CUTOFF if self.max_age is None else math.ceil(now - self.max_age)


class StoreError(Exception):
    """Anything the store refuses or fails at; :meth:`openai` is what the client is told."""

    def openai(self) -> OpenAIError:
        return internal_error("The server had an error while storing the response.")


class RecordTooLarge(StoreError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the response and its conversation take {size} bytes; the store keeps at most {limit}")
        self.size, self.limit = size, limit

    def openai(self) -> OpenAIError:
        return bad_request(
            f"The response cannot be stored: with its conversation it takes {self.size} bytes, more than the "
            f"limit of {self.limit}. Send the request with store set to false, or start a new conversation.",
            param="store",
        )


class StoreUnavailable(StoreError):
    """The database cannot be reached, opened or written (down, corrupt, full, no permission). The
    message names the cause for the operator's log; the client gets a plain 500."""

    def openai(self) -> OpenAIError:
        return internal_error("The response store is unavailable; please retry.")


class RecordConflict(StoreError):
    """A put with an id another tenant already holds (ids are random, so this is a gateway bug)."""


class StateStore(Protocol):
    async def put(self, record: Record) -> None:
        """Store (or replace, same id and tenant) a record; committed when this returns."""

    async def get(self, id: str, tenant: str) -> Record | None:
        """The record, or None when it is unknown, expired or another tenant's."""

    async def delete(self, id: str, tenant: str) -> bool:
        """Delete the record; whether it existed (for this tenant, unexpired)."""

    async def history(self, id: str, tenant: str) -> list[Any] | None:
        """The conversation to continue from ``id`` (the record's ``history``), or None."""

    async def purge(self) -> int:
        """Delete expired records now; how many went."""

    async def close(self) -> None: ...


def tenant_key(tenant: str) -> str:
    return hashlib.sha256(tenant.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Row:
    """A record as a backend writes it: JSON text, redacted, sized, with the tenant's key."""

    id: str
    tenant: str  # tenant_key(record.tenant)
    created_at: int
    model: str
    previous_response_id: str | None
    response: str
    input_items: str
    history: str
    size: int

    def values(self) -> tuple[Any, ...]:
        """The columns in the order both backends' upsert takes them."""
        return (
            self.id,
            self.tenant,
            self.created_at,
            self.model,
            self.previous_response_id,
            self.response,
            self.input_items,
            self.history,
            self.size,
        )


def _scrub_value(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, list):
        return [_scrub_value(item, secrets) for item in value]
    if isinstance(value, dict):
        return {_scrub_value(k, secrets): _scrub_value(v, secrets) for k, v in value.items()}
    return value


class Codec:
    """Turns records into rows and back; the part of every backend that is not SQL."""

    def __init__(self, limits: Limits, secrets: Iterable[str | None] = ()) -> None:
        self.limits = limits
        # Longest first, as secret_needles orders them, so "Bearer k…" goes before "k…".
        self._secrets = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True))
        self._needles = secret_needles(self._secrets, raw=False)

    def _json(self, value: Any) -> bytes:
        data = orjson.dumps(value)
        scrubbed = scrub_bytes(data, self._needles)
        if scrubbed is not data:
            # A needle can match from the middle of an escape ("\n" + a secret starting with "n"),
            # which leaves "\[REDACTED]": never valid JSON, so a failed parse catches every such
            # case, and the decoded strings are scrubbed one by one instead.
            try:
                orjson.loads(scrubbed)
            except orjson.JSONDecodeError:
                scrubbed = orjson.dumps(_scrub_value(value, self._secrets))
        return scrubbed

    def _text(self, text: str | None) -> str | None:
        # A NUL cannot go into a PostgreSQL text column; the Response JSON keeps the exact value.
        return None if text is None else str(_scrub_value(text, self._secrets)).replace("\x00", "\ufffd")

    def row(self, record: Record) -> Row:
        response, items, history = (
            self._json(record.response),
            self._json(record.input_items),
            self._json(record.history),
        )
        size = len(response) + len(items) + len(history)
        if size > self.limits.max_bytes:
            raise RecordTooLarge(size, self.limits.max_bytes)
        return Row(
            record.id,
            tenant_key(record.tenant),
            int(record.created_at),
            self._text(record.model) or "",
            self._text(record.previous_response_id),
            response.decode(),
            items.decode(),
            history.decode(),
            size,
        )

    @staticmethod
    def record(
        tenant: str,
        id: str,
        created_at: int,
        model: str,
        previous_response_id: str | None,
        response: str,
        input_items: str,
        history: str,
    ) -> Record:
        return Record(
            id,
            tenant,
            int(created_at),
            model,
            orjson.loads(response),
            orjson.loads(input_items),
            orjson.loads(history),
            previous_response_id,
        )
