"""Gateway API keys: several allowed, compared in constant time; no key is ever logged.

A key is a plain one (``api_keys``: every model, no limit) or a virtual key (the config's ``keys``,
``server.config.VirtualKey``): :meth:`KeyRing.identify` says which one a request presents."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from oaishim.server.config import VirtualKey


class KeyRing:
    def __init__(self, keys: Sequence[str], virtual: Sequence[VirtualKey] = ()) -> None:
        self._keys = [k.encode() for k in keys]
        self._virtual = [(v.key.encode(), v) for v in virtual]

    @property
    def enabled(self) -> bool:
        """Keys are configured: a request needs one."""
        return bool(self._keys or self._virtual)

    @staticmethod
    def presented(authorization: bytes | None, api_key: bytes | None = None) -> bytes:
        """The key a request presents: ``Authorization: Bearer KEY``, else an ``api-key`` header."""
        if authorization and authorization[:7].lower() == b"bearer ":
            return authorization[7:].strip()
        return api_key.strip() if api_key else b""

    def identify(self, authorization: bytes | None, api_key: bytes | None = None) -> tuple[bool, VirtualKey | None]:
        """(allowed, the virtual key presented, if one was)."""
        if not self.enabled:
            return True, None
        presented = self.presented(authorization, api_key)
        # Compare against every key, so the time taken does not tell which (or whether one) matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(presented, key)
        found: VirtualKey | None = None
        for key, virtual in self._virtual:
            if hmac.compare_digest(presented, key):
                found = virtual
        return matched or found is not None, found

    def allows(self, authorization: bytes | None, api_key: bytes | None = None) -> bool:
        """``Authorization: Bearer KEY`` (or an ``api-key`` header, as Azure-style clients send)."""
        return self.identify(authorization, api_key)[0]

    def __repr__(self) -> str:
        return f"<KeyRing {len(self._keys) + len(self._virtual)} key(s)>"
