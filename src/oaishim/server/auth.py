"""Gateway API keys: several allowed, compared in constant time; no key is ever logged."""

from __future__ import annotations

import hmac
from collections.abc import Sequence


class KeyRing:
    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = [k.encode() for k in keys]

    @property
    def enabled(self) -> bool:
        """Keys are configured: a request needs one."""
        return bool(self._keys)

    @staticmethod
    def presented(authorization: bytes | None, api_key: bytes | None = None) -> bytes:
        """The key a request presents: ``Authorization: Bearer KEY``, else an ``api-key`` header."""
        if authorization and authorization[:7].lower() == b"bearer ":
            return authorization[7:].strip()
        return api_key.strip() if api_key else b""

    def allows(self, authorization: bytes | None, api_key: bytes | None = None) -> bool:
        """``Authorization: Bearer KEY`` (or an ``api-key`` header, as Azure-style clients send)."""
        if not self._keys:
            return True
        presented = self.presented(authorization, api_key)
        # Compare against every key, so the time taken does not tell which (or whether one) matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(presented, key)
        return matched

    def __repr__(self) -> str:
        return f"<KeyRing {len(self._keys)} key(s)>"
