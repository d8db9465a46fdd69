"""Ids in the official style, made by the gateway: response ids and tool-call ids.

Its own module, importing nothing of the package, so that the tool-call parsers (which name each
call they find) do not depend on the response context, and the context (which names the response
and plans the repairs) does not depend on them.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from typing import Any

__all__ = ["call_id", "random_id"]

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, size: int = 29) -> str:
    """An id in the official style: ``chatcmpl-`` / ``cmpl-`` / ``call_`` and random letters and digits.

    One ``os.urandom`` call per id, not per character (that was a tenth of a plain request's CPU);
    the slight modulo bias does not matter for an id that only has to be unique."""
    return prefix + "".join(_ALPHABET[b % 62] for b in secrets.token_bytes(size))


def call_id(upstream: Any) -> str:
    """A tool call's id for the client: ``call_…``. A backend id that already has the prefix is
    kept, others are mapped to a stable ``call_`` id (the same upstream id always gives the same
    client id); none gets a random one."""
    if isinstance(upstream, str) and upstream.startswith("call_") and len(upstream) > 5:
        return upstream
    if isinstance(upstream, str) and upstream:
        return "call_" + hashlib.blake2b(upstream.encode(), digest_size=12).hexdigest()
    return random_id("call_", 24)
