"""The gateway's own ids: the official prefixes, letters and digits, every character equally likely."""

from __future__ import annotations

import collections
import os
import string
import threading

from _switching import run_switching
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


def test_random_bytes_are_fresh_across_draws_and_any_size() -> None:
    """Drawn ahead in blocks: a take that crosses a block's end, or is larger than one, still gets
    as many bytes as asked, none handed out twice."""
    taken = [ids.random_bytes(24) for _ in range(3 * ids.DRAW // 24 + 5)]
    assert all(len(t) == 24 for t in taken)
    assert len(set(taken)) == len(taken)
    big = ids.random_bytes(3 * ids.DRAW + 1)
    assert len(big) == 3 * ids.DRAW + 1
    assert ids.random_bytes(24) not in big
    assert len(ids.random_hex(16)) == 32 and int(ids.random_hex(16), 16) >= 0


def test_a_forked_child_makes_ids_of_its_own() -> None:
    """``oaishim serve --workers N`` forks: a child must not hand out the bytes its parent drew ahead
    (the same ids in two workers)."""
    ids.random_bytes(8)  # the parent holds a block, most of it not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, ids.random_hex(16).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parent = ids.random_hex(16)
    assert len(child) == len(parent) == 32
    assert child != parent


def test_threads_never_get_the_same_bytes() -> None:
    made: list[list[bytes]] = [[] for _ in range(4)]

    def work(out: list[bytes]) -> None:
        out.extend(ids.random_bytes(8) for _ in range(5000))

    threads = [threading.Thread(target=work, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [b for out in made for b in out]
    assert len(set(every)) == len(every) == 20000


def test_a_responses_item_id_is_the_response_digits_and_a_4_digit_hex_counter() -> None:
    """Each item id of a response carries its 48 digits, then the item's number in 4 (or, past
    0xffff, more) hex digits; any of them leads back to the response."""
    from oaishim.transform.responses._info import item_ids, new_id, response_of_item

    response_id = new_id("resp")
    digits = response_id.removeprefix("resp_")
    make = item_ids(response_id)
    made = [make("msg" if n % 2 else "fc") for n in range(70_000)]
    for n in (0, 1, 15, 16, 255, 256, 4095, 4096, 65535, 65536, 69_999):
        assert made[n] == ("msg" if n % 2 else "fc") + "_" + digits + format(n, "04x")
        assert response_of_item(made[n]) == (response_id if n < 65536 else None)  # (its id pattern: 4 digits)
    assert len(set(made)) == len(made)
    assert item_ids(response_id)("rs") == f"rs_{digits}0000"  # each factory counts from 0


def test_threads_taking_at_once_never_get_the_same_bytes() -> None:
    """No lock: each draw's slots are handed out by a counter. Eight threads taking at once, across
    many draws (a switch between them every few bytecodes), get bytes no other take got."""
    taken: list[list[bytes]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def work(mine: list[bytes]) -> None:
        start.wait()
        for _ in range(1500):
            mine.append(ids.random_bytes(24))
            mine.append(ids.random_id("", 29).encode())

    run_switching([threading.Thread(target=work, args=(mine,)) for mine in taken])
    everything = [one for mine in taken for one in mine]
    assert len(everything) == 8 * 3000
    assert len(set(everything)) == len(everything)
