"""Ids in the official style, made by the gateway: response ids and tool-call ids.

Its own module, importing nothing of the package, so that the tool-call parsers (which name each
call they find) do not depend on the response context, and the context (which names the response
and plans the repairs) does not depend on them.
"""

from __future__ import annotations

import hashlib
import os
import string
from collections.abc import Callable
from typing import Any, Final

__all__ = ["call_id", "random_bytes", "random_hex", "random_id"]

_ALPHABET = string.ascii_letters + string.digits
# Each random byte below 248 (4 × 62) is one character, evenly; the 8 bytes above are dropped, so no
# character is likelier than another. A whole draw is translated at once (``_id_chars``), so an id
# is a slice of characters ready made (an id's own translate, with the table of bytes to drop it
# builds on each call, was half an id's cost).
_TABLE: Final = bytes(ord(_ALPHABET[b % 62]) for b in range(256))
_DROPPED: Final = bytes(range(248, 256))
DRAW: Final = 4096  # bytes drawn from the system at a time (a module constant: compiled, a class's is not readable)
SLOT: Final = 64  # the most bytes a take gets from a draw (an id takes at most 37)


def _id_chars(size: int) -> bytes:
    """At least ``size`` random id characters, about 97 % as many as random bytes drawn."""
    chars = os.urandom(size).translate(_TABLE, _DROPPED)
    while len(chars) < size:  # (a draw the size of a short id may lose more than its margin)
        chars += os.urandom(size).translate(_TABLE, _DROPPED)
    return chars


class _Pool:
    """Random bytes (or id characters) drawn from the system's source 4 KiB at a time: one system
    call for sixty ids instead of one an id (a request makes two or more).

    Without a lock (whose acquire and release were most of an id's cost): a draw is cut into slots
    of ``SLOT`` bytes, whose offsets are popped from a list, and a pop is one step no other thread
    can split. So two threads never get the same slot, and a thread that finds the slots spent
    draws anew (two that do so at once each draw their own; the slots of the first draw still
    unused are left unused). A take longer than a slot draws its own bytes."""

    def __init__(self, draw: Callable[[int], bytes]) -> None:
        self.draw = draw  # at least as many bytes as asked
        self.forget()

    def forget(self) -> None:
        """In a forked child: bytes of its own, never the ones its parent (or a sibling) hands out."""
        self.slots: tuple[bytes, list[int]] = (b"", [])

    def take(self, size: int) -> bytes:
        if size > SLOT:
            return self.draw(size)[:size]
        while True:
            data, free = self.slots  # (one read: the bytes and their offsets belong together)
            try:
                start = free.pop()
            except IndexError:
                data = self.draw(DRAW)
                self.slots = (data, list(range(len(data) // SLOT * SLOT - SLOT, -1, -SLOT)))
                continue
            return data[start : start + size]


_POOL: Final = _Pool(os.urandom)
_CHARS: Final = _Pool(_id_chars)
os.register_at_fork(after_in_child=_POOL.forget)
os.register_at_fork(after_in_child=_CHARS.forget)


def random_bytes(size: int) -> bytes:
    """``size`` bytes from the operating system's random source (``os.urandom``), drawn ahead."""
    return _POOL.take(size)


def random_hex(size: int) -> str:
    """``2 * size`` random hex digits (as ``secrets.token_hex(size)``)."""
    return random_bytes(size).hex()


def random_id(prefix: str, size: int = 29) -> str:
    """An id in the official style: ``chatcmpl-`` / ``cmpl-`` / ``call_`` and random letters and digits."""
    return prefix + _CHARS.take(size).decode()


def call_id(upstream: Any) -> str:
    """A tool call's id for the client: ``call_…``. A backend id that already has the prefix is
    kept, others are mapped to a stable ``call_`` id (the same upstream id always gives the same
    client id); none gets a random one."""
    if isinstance(upstream, str) and upstream.startswith("call_") and len(upstream) > 5:
        return upstream
    if isinstance(upstream, str) and upstream:
        return "call_" + hashlib.blake2b(upstream.encode(), digest_size=12).hexdigest()
    return random_id("call_", 24)
