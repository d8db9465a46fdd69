"""Gateway API keys: several allowed, compared in constant time; no key is ever logged."""

from __future__ import annotations

import hmac
from collections.abc import Sequence


class KeyRing:
    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = [k.encode() for k in keys]

    def allows(self, authorization: bytes | None, api_key: bytes | None = None) -> bool:
        """``Authorization: Bearer KEY`` (or an ``api-key`` header, as Azure-style clients send)."""
        if not self._keys:
            return True
        presented = b""
        if authorization and authorization[:7].lower() == b"bearer ":
            presented = authorization[7:].strip()
        elif api_key:
            presented = api_key.strip()
        # Compare against every key, so the time taken does not tell which (or whether one) matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(presented, key)
        return matched

    def __repr__(self) -> str:
        return f"<KeyRing {len(self._keys)} key(s)>"
