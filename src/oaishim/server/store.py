"""The gateway's side of the response store: which store, the key that seals ``encrypted_content``,
whose records a request may read, and the periodic purge.

The store (``oaishim.state``) is made at startup from ``--state`` and closed at shutdown; none of
its kinds touches the disk or the network before the first request that needs it, so a gateway
that never serves ``/v1/responses`` never creates a file in the user's state folder.

The sealing key (``--state-secret``): when none is given, a random one is made once and kept in a
0600 file beside an SQLite store (``responses.sqlite.key``), so a restart still opens what the
previous process sealed. Several processes may start together: the key is written to a temporary
file and linked into place, so exactly one key wins and every process reads that one. A memory
store gets a fresh key per process (it loses its records with the process anyway); a PostgreSQL
store without a secret is refused (``server.config``): replicas must share the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
from pathlib import Path

from oaishim.server.config import ConfigError, Settings, default_state_path, is_postgres
from oaishim.state import Limits, StateStore, open_store
from oaishim.state.sqlite import SQLiteStore

log = logging.getLogger("oaishim.state")
PURGE_EVERY = 600.0  # seconds between purges of expired records (puts also purge on their way)


def _key_file(path: Path) -> bytes:
    """The key kept beside an SQLite store, made on first use."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    temp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)  # fails if another process linked its key first: that key is the one
    except FileExistsError:
        pass
    finally:
        temp.unlink()
    return path.read_bytes().strip()


class ResponseStore:
    """One gateway's store handle. ``store`` is None before startup."""

    def __init__(self, settings: Settings, secret_values: tuple[str | None, ...] = ()) -> None:
        self.settings = settings
        self.target = settings.state or str(default_state_path())
        if is_postgres(self.target) and settings.state_secret is None:
            raise ConfigError(
                "state: a PostgreSQL store needs --state-secret (OAISHIM_STATE_SECRET), shared by replicas"
            )
        self.secret_values = secret_values
        self.store: StateStore | None = None
        self.used = False  # a request reached the store (the purge has something to do)
        self._key: bytes | None = settings.state_secret.encode() if settings.state_secret else None
        self._purger: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        limits = Limits(max_age=self.settings.state_max_age, max_bytes=self.settings.state_max_bytes)
        try:
            self.store = open_store(self.target, limits=limits, secrets=self.secret_values)
        except ValueError as exc:
            raise ConfigError(f"state: {exc}") from None
        self._purger = asyncio.ensure_future(self._purge_loop())

    async def shutdown(self) -> None:
        purger, self._purger = self._purger, None
        if purger is not None and not purger.done():
            purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purger
        store, self.store = self.store, None
        if store is not None:
            await store.close()

    async def _purge_loop(self) -> None:
        while True:
            await asyncio.sleep(PURGE_EVERY)
            if self.store is None or not self.used:
                continue
            try:
                gone = await self.store.purge()
            except Exception:  # a store down now may be up at the next round; the log says why
                log.exception("purging the response store %s failed", self.target)
            else:
                if gone:
                    log.info("purged %d expired stored responses", gone)

    def open(self) -> StateStore:
        """The store, for a request."""
        if self.store is None:
            raise RuntimeError("the response store is used before the gateway started")
        self.used = True
        return self.store

    def key(self) -> bytes:
        """The key that seals ``encrypted_content`` (made or read on first use)."""
        if self._key is None:
            store = self.store
            if isinstance(store, SQLiteStore):
                self._key = _key_file(store.path.with_name(store.path.name + ".key"))
            else:
                self._key = secrets.token_bytes(32)
        return self._key


def tenant(presented: bytes, keys_enabled: bool) -> str:
    """Whose records a request reads: a hash of the client's API key ("" when the gateway has no
    keys: every client is one tenant). The store hashes it again, so no key reaches a database."""
    if not keys_enabled:
        return ""
    return hashlib.sha256(b"oaishim-tenant\x00" + presented).hexdigest()
