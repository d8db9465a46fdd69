"""The response store's rules, the same on every backend (memory, SQLite, a real PostgreSQL):
round trip, tenancy, delete, retention, size bound, eviction, redaction."""

from __future__ import annotations

import orjson
import pytest
from _state import SECRET, Backend, Clock, record
from hypothesis import given
from hypothesis import strategies as st

from _props import examples
from oaishim.state import Limits, Record, RecordConflict, RecordTooLarge
from oaishim.state.base import Codec


def test_round_trip(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make()
        first, second = record(1), record(2, text='ünïcode \u2028 "quoted" \\ \n')
        await store.put(first)
        await store.put(second)
        assert await store.get(first.id, "key-a") == first
        assert await store.get(second.id, "key-a") == second
        assert await store.history(second.id, "key-a") == second.history
        assert await store.get("resp_unknown", "key-a") is None
        assert await store.history("resp_unknown", "key-a") is None

    backend.run(body)


def test_a_put_with_the_same_id_replaces_the_record(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make()
        queued = record(1)
        done = Record(**{**{f: getattr(queued, f) for f in Record.__slots__}, "response": {"status": "completed"}})
        await store.put(queued)
        await store.put(done)
        assert await store.get(queued.id, "key-a") == done
        assert len(backend.dump()) == 1

    backend.run(body)


def test_tenants_see_only_their_own_records(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make()
        mine = record(1, tenant=SECRET)
        await store.put(mine)
        assert await store.get(mine.id, "someone-else") is None
        assert await store.history(mine.id, "someone-else") is None
        assert await store.delete(mine.id, "someone-else") is False
        assert await store.get(mine.id, SECRET) == mine
        # The same id from another tenant must not overwrite it.
        with pytest.raises(RecordConflict):
            await store.put(record(1, tenant="someone-else", text="overwrite"))
        assert await store.get(mine.id, SECRET) == mine
        # The tenant (here an API key) is kept only as a hash.
        assert SECRET not in repr(backend.dump())

    backend.run(body)


def test_delete(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make()
        await store.put(record(1))
        await store.put(record(2))
        assert await store.delete("resp_0001", "key-a") is True
        assert await store.get("resp_0001", "key-a") is None
        assert await store.delete("resp_0001", "key-a") is False
        # Each record holds its whole conversation: deleting the parent leaves the child usable.
        assert await store.history("resp_0002", "key-a") == record(2).history
        assert len(backend.dump()) == 1

    backend.run(body)


def test_retention_hides_then_purges_old_records(backend: Backend) -> None:
    async def body() -> None:
        clock = Clock(10_000)
        store = backend.make(limits=Limits(max_age=100, purge_every=3600), clock=clock)
        await store.put(record(1, created_at=10_000))
        await store.put(record(2, created_at=10_050))
        clock.now = 10_100  # record 1 is exactly max_age old: still visible
        assert await store.get("resp_0001", "key-a") is not None
        clock.now = 10_101
        assert await store.get("resp_0001", "key-a") is None
        assert await store.history("resp_0001", "key-a") is None
        assert await store.delete("resp_0001", "key-a") is False
        assert await store.get("resp_0002", "key-a") is not None
        assert len(backend.dump()) == 2  # hidden, not yet deleted
        assert await store.purge() == 1
        assert len(backend.dump()) == 1

    backend.run(body)


def test_a_put_purges_expired_records_on_its_way(backend: Backend) -> None:
    async def body() -> None:
        clock = Clock(10_000)
        store = backend.make(limits=Limits(max_age=100, purge_every=60), clock=clock)
        await store.put(record(1, created_at=10_000))
        clock.now = 10_030
        await store.put(record(2, created_at=10_030))  # a purge ran at 10_000: none due yet
        clock.now = 10_200
        assert len(backend.dump()) == 2
        await store.put(record(3, created_at=10_200))
        assert sorted(row[0] if backend.name == "memory" else row[1] for row in backend.dump()) == ["resp_0003"]

    backend.run(body)


def test_a_record_over_max_bytes_is_refused_with_a_400(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make(limits=Limits(max_bytes=2000))
        await store.put(record(1, text="x" * 100))
        with pytest.raises(RecordTooLarge) as caught:
            await store.put(record(2, text="x" * 2000))
        error = caught.value.openai()
        assert error.status == 400
        assert error.body()["error"]["type"] == "invalid_request_error"
        assert str(caught.value.limit) in error.message
        assert await store.get("resp_0002", "key-a") is None
        assert len(backend.dump()) == 1

    backend.run(body)


def test_the_oldest_records_are_evicted_past_max_records(backend: Backend) -> None:
    async def body() -> None:
        store = backend.make(limits=Limits(max_records=3))
        for n in range(1, 6):
            await store.put(record(n))
        present = [n for n in range(1, 6) if await store.get(f"resp_{n:04d}", "key-a") is not None]
        assert present == [3, 4, 5]
        assert len(backend.dump()) == 3

    backend.run(body)


def test_known_secrets_never_reach_the_database(backend: Backend) -> None:
    secrets = [SECRET, "nightly-token-42", None, "short"]
    pasted = f"a short word, my key is {SECRET}, also\nnightly-token-42 and {orjson.dumps(SECRET).decode()}"

    async def body() -> None:
        store = backend.make(secrets=secrets)
        original = record(1, text=pasted)
        await store.put(original)
        got = await store.get(original.id, "key-a")
        assert got is not None
        text = orjson.dumps([got.response, got.input_items, got.history]).decode()
        assert SECRET not in text
        assert "nightly-token-42" not in text
        assert "also\n[REDACTED] and" in got.response["output"][0]["content"][0]["text"]
        raw = repr(backend.dump())
        assert SECRET not in raw
        assert "nightly-token-42" not in raw
        # A value under the minimum length is not a secret worth wrecking a record for.
        assert "a short word" in text

    backend.run(body)


def test_a_secret_lookalike_inside_an_escape_is_left_intact(backend: Backend) -> None:
    # A newline then "ightly-token-42": serialised as JSON, the escape "\n" + "ightly…" contains the
    # needle "nightly-token-42" though the text holds no secret. Replacing it there would leave "\[REDACTED]",
    # which is not JSON: the record must come back exactly as it was put.
    async def body() -> None:
        store = backend.make(secrets=["nightly-token-42"])
        original = record(1, text="tab\there\nightly-token-42 \u00e9")
        await store.put(original)
        assert await store.get(original.id, "key-a") == original
        assert await store.history(original.id, "key-a") == original.history

    backend.run(body)


_PIECES = ["\n", "\\", '"', "n", "u", "x", "é", "\u2028", "\x00", "ightly-token-42", "nightly-token-42", "sk-live-0"]


@examples(150)
@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_redaction_is_a_replacement_in_the_text_whatever_surrounds_it(text: str) -> None:
    """Stored and read back, every string is the original with each secret masked: no escape
    around or inside a secret corrupts the record or leaks the secret."""
    secrets = ["nightly-token-42", SECRET]
    codec = Codec(Limits(), secrets)
    original = record(1, text=text)
    row = codec.row(original)
    back = Codec.record(
        original.tenant,
        row.id,
        row.created_at,
        row.model,
        row.previous_response_id,
        row.response,
        row.input_items,
        row.history,
    )
    expected = text
    for secret in secrets:
        expected = expected.replace(secret, "[REDACTED]")
    assert back.response["output"][0]["content"][0]["text"] == f"answer 1 {expected}"
    assert back.input_items[0]["content"][0]["text"] == f"q1 {expected}"
