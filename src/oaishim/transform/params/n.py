"""``n``: several choices from one request, on backends that give one (or refuse more).

Where the profile says the backend does not honour ``n`` (``n_choices = "fan_out"``), the request
is sent as ``n`` copies asking one choice each, and the answers are merged (``transform.fanin``).

Seed policy. With a ``seed``, the official API's n choices are reproducible (the same request gives
the same n texts) and yet distinct from one another: n copies under the client's one seed would give
n identical texts, so each copy gets its own seed. Copy 0 keeps the client's seed (its choice is the
one an ``n: 1`` request with that seed gives); copy k > 0 gets a seed derived from (seed, k) by a hash,
in 0 … 2**31 - 1. Not ``seed + k``: backends keep seeds in different ranges (llama.cpp a uint32 where
4294967295 means "random", Go and Python int64), and a sum could leave one or land on that value;
31 bits fit every backend. Without a seed, none is sent: each copy samples on its own, as the
official API's choices do.
"""

from __future__ import annotations

import hashlib
from typing import Any

from oaishim.profiles._base import Profile


def plan(body: dict[str, Any], client: dict[str, Any], profile: Profile, endpoint: str) -> int:
    """How many copies the request goes out as (1: as it is). For a fan-out, ``n`` is removed from
    ``body`` (each copy asks one choice; a backend that refuses ``n > 1`` must not see it)."""
    n = client.get("n")
    if endpoint not in ("chat", "completions") or not isinstance(n, int) or n <= 1:
        return 1
    if profile.n_choices != "fan_out":
        return 1
    body.pop("n", None)
    return n


def copy_seed(seed: int, copy: int) -> int:
    """What copy ``copy`` is sent as its seed: the client's for copy 0, a derived one for the others."""
    if copy == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}:{copy}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def copy_bodies(body: dict[str, Any], copies: int, first: int = 0) -> list[dict[str, Any]]:
    """The bodies of copies ``first`` … ``first + copies - 1``: one choice each, each with its own seed."""
    out: list[dict[str, Any]] = []
    for copy in range(first, first + copies):
        one = {k: v for k, v in body.items() if k != "n"}
        seed = body.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            one["seed"] = copy_seed(seed, copy)
        out.append(one)
    return out
