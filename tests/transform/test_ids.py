"""The gateway's own ids: the official prefixes, letters and digits, every character equally likely."""

from __future__ import annotations

import collections
import string

from oaishim.transform import ids


def test_an_id_is_the_prefix_and_size_letters_or_digits() -> None:
    made = {ids.random_id("chatcmpl-") for _ in range(2000)}
    assert len(made) == 2000  # none repeats
    for one in made:
        assert one.startswith("chatcmpl-") and len(one) == len("chatcmpl-") + 29
        assert set(one.removeprefix("chatcmpl-")) <= set(string.ascii_letters + string.digits)
    assert len(ids.random_id("call_", 24)) == 5 + 24


def test_each_kept_byte_gives_each_character_equally_often_and_the_rest_are_dropped() -> None:
    """Deterministic: the mapping from random bytes, not a sample of it."""
    kept = bytes(range(256)).translate(ids._TABLE, ids._DROPPED)
    assert len(kept) == 248
    counts = collections.Counter(kept.decode())
    assert set(counts) == set(string.ascii_letters + string.digits)
    assert set(counts.values()) == {4}
