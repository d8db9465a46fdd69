"""Ids in the official style, made by the gateway: response ids and tool-call ids.

Its own module, importing nothing of the package, so that the tool-call parsers (which name each
call they find) do not depend on the response context, and the context (which names the response
and plans the repairs) does not depend on them.
"""

from __future__ import annotations

import hashlib
import os
import string
from typing import Any, Final

__all__ = ["call_id", "random_bytes", "random_hex", "random_id"]

_ALPHABET = string.ascii_letters + string.digits
# Each random byte below 248 (4 × 62) is one character, evenly; the 8 bytes above are dropped, so no
# character is likelier than another. Two C calls an id (a generator over the bytes was a tenth of
# the Python calls of a plain request).
_TABLE: Final = bytes(ord(_ALPHABET[b % 62]) for b in range(256))
_DROPPED: Final = bytes(range(248, 256))
DRAW: Final = 4096  # bytes drawn from the system at a time (a module constant: compiled, a class's is not readable)
SLOT: Final = 40  # the most bytes a take gets from a draw (an id takes at most 37: the slots waste little)


class _Pool:
    """Random bytes drawn from the system's source 4 KiB at a time: one system call for a hundred
    ids instead of one an id (a request makes two or more).

    Without a lock (whose acquire and release were most of an id's cost): a draw is cut into slots
    of ``SLOT`` bytes, whose offsets are popped from a list, and a pop is one step no other thread
    can split. So two threads never get the same slot, and a thread that finds the slots spent
    draws anew (two that do so at once each draw their own; the slots of the first draw still
    unused are left unused). A take longer than a slot draws its own bytes."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """In a forked child: bytes of its own, never the ones its parent (or a sibling) hands out."""
        self.slots: tuple[bytes, list[int]] = (b"", [])

    def take(self, size: int) -> bytes:
        if size > SLOT:
            return os.urandom(size)
        while True:
            data, free = self.slots  # (one read: the bytes and their offsets belong together)
            try:
                start = free.pop()
            except IndexError:
                data = os.urandom(DRAW)
                self.slots = (data, list(range(len(data) // SLOT * SLOT - SLOT, -1, -SLOT)))
                continue
            return data[start : start + size]


_POOL: Final = _Pool()
os.register_at_fork(after_in_child=_POOL.forget)


def random_bytes(size: int) -> bytes:
    """``size`` bytes from the operating system's random source (``os.urandom``), drawn ahead."""
    return _POOL.take(size)


def random_hex(size: int) -> str:
    """``2 * size`` random hex digits (as ``secrets.token_hex(size)``)."""
    return random_bytes(size).hex()


def random_id(prefix: str, size: int = 29) -> str:
    """An id in the official style: ``chatcmpl-`` / ``cmpl-`` / ``call_`` and random letters and digits."""
    text = random_bytes(size + 8).translate(_TABLE, _DROPPED)
    while len(text) < size:  # more than 8 of size + 8 bytes dropped: about one id in 10^7 at size 29
        text += random_bytes(size).translate(_TABLE, _DROPPED)
    return prefix + text[:size].decode()


def call_id(upstream: Any) -> str:
    """A tool call's id for the client: ``call_…``. A backend id that already has the prefix is
    kept, others are mapped to a stable ``call_`` id (the same upstream id always gives the same
    client id); none gets a random one."""
    if isinstance(upstream, str) and upstream.startswith("call_") and len(upstream) > 5:
        return upstream
    if isinstance(upstream, str) and upstream:
        return "call_" + hashlib.blake2b(upstream.encode(), digest_size=12).hexdigest()
    return random_id("call_", 24)
