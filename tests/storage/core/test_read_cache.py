"""The leader's read cache: reads answered from it are the KV's answers, whatever
the applier changed since, and it stays within its bounds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import reads
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.kv import Column, MemoryKv
from support.memory_shard import ORDER, Shard, put


class CountingKv(MemoryKv):
    """A MemoryKv that counts the keys asked of it by get_many."""

    def __init__(self) -> None:
        super().__init__()
        self.keys_read = 0

    def get_many(self, column: Column, keys: Sequence[bytes]) -> list[bytes | None]:
        self.keys_read += len(keys)
        return super().get_many(column, keys)


def read(shard: Shard, *keys: str) -> list[tuple[int, bytes]]:
    """(status, value) of an exact get of each key, through the shard's cache."""
    gets = pb.ReadRequest(gets=[pb.GetRequest(key=key, include_value=True) for key in keys]).gets
    chunks = reads.get_chunks(shard.kv, gets, ORDER, 100, shard.read_cache)
    parsed = [pb.ReadResponse.FromString(raw) for raw in chunks]
    return [(answer.status, answer.value) for chunk in parsed for answer in chunk.gets]


def cached_shard(max_entries: int = 1000, max_bytes: int = 1 << 20) -> tuple[Shard, CountingKv]:
    kv = CountingKv()
    cache = ReadCache(max_entries, max_bytes)
    cache.enable(kv)
    return Shard(kv, cache), kv


def recounted_bytes(cache: ReadCache) -> int:
    # What the bound is about, counted from scratch (the cache keeps a running count).
    return sum(len(answer) for answer in cache._answers.values() if answer is not None)


def test_a_record_read_once_is_answered_from_memory_after() -> None:
    shard, kv = cached_shard()
    shard.write(put("/a", b"1"))
    shard.write(put("/b", b"2"))
    assert read(shard, "/a", "/b", "/absent") == [
        (pb.OK, b"1"),
        (pb.OK, b"2"),
        (pb.KEY_NOT_FOUND, b""),
    ]
    assert kv.keys_read == 3
    # All three held, the absent key as absent: no KV read this time.
    assert read(shard, "/absent", "/b", "/a") == [
        (pb.KEY_NOT_FOUND, b""),
        (pb.OK, b"2"),
        (pb.OK, b"1"),
    ]
    assert kv.keys_read == 3


def test_what_the_applier_changes_while_held_is_answered_from_memory_as_changed() -> None:
    shard, kv = cached_shard()
    session = shard.create_session()
    shard.write(put("/a", b"1"))
    shard.write(put("/b", b"2"))
    shard.write(put("/e", b"3", session_id=session, client_identity="c"))
    assert read(shard, "/a", "/b", "/c", "/e") == [
        (pb.OK, b"1"),
        (pb.OK, b"2"),
        (pb.KEY_NOT_FOUND, b""),
        (pb.OK, b"3"),
    ]
    shard.write(put("/a", b"new"))
    shard.write(put("/c", b"created"))
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/b")]))
    before = kv.keys_read
    changed = read(shard, "/a", "/b", "/c", "/e")
    assert changed == [
        (pb.OK, b"new"),
        (pb.KEY_NOT_FOUND, b""),
        (pb.OK, b"created"),
        (pb.OK, b"3"),
    ]
    assert kv.keys_read == before  # all four answered from memory
    # ... and as the KV answers, version included.
    for key in ("/a", "/b", "/c"):
        request = pb.GetRequest(key=key, include_value=True)
        cached_chunk = b"".join(reads.get_chunks(kv, [request], ORDER, 100, shard.read_cache))
        uncached_chunk = b"".join(reads.get_chunks(kv, [request], ORDER, 100, None))
        assert cached_chunk == uncached_chunk
    # Closing the session deletes its ephemeral record through the applier too.
    before = kv.keys_read
    assert shard.close_session(session)
    assert read(shard, "/e") == [(pb.KEY_NOT_FOUND, b"")]
    assert kv.keys_read == before


def test_writes_alone_admit_nothing() -> None:
    """A record enters only when read: a load of writes keeps the cache empty."""
    shard, kv = cached_shard()
    for number in range(50):
        shard.write(put(f"/w/{number}", b"v"))
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/w/3")]))
    assert shard.read_cache is not None and len(shard.read_cache) == 0
    assert shard.read_cache.held_bytes == 0
    assert read(shard, "/w/7") == [(pb.OK, b"v")]
    assert kv.keys_read == 1


def test_entries_and_bytes_stay_within_the_bounds_oldest_going_first() -> None:
    shard, _ = cached_shard(max_entries=64, max_bytes=10_000)
    cache = shard.read_cache
    assert cache is not None
    for number in range(200):
        shard.write(put(f"/k/{number}", bytes(40)))
    for number in range(200):
        read(shard, f"/k/{number}")
        assert len(cache) <= 64
        assert cache.held_bytes == recounted_bytes(cache) <= 10_000
    # The newest admissions stay, the first went.
    assert read(shard, "/k/199") == [(pb.OK, bytes(40))]
    assert ORDER.encode("/k/0") not in cache._answers
    # A record larger than the whole byte bound is answered, not kept.
    shard.write(put("/big", bytes(20_000)))
    assert read(shard, "/big") == [(pb.OK, bytes(20_000))]
    assert cache.held_bytes == recounted_bytes(cache) <= 10_000


def test_disabled_or_for_another_kv_it_holds_nothing() -> None:
    kv = CountingKv()
    cache = ReadCache(1000, 1 << 20)
    shard = Shard(kv, cache)
    shard.write(put("/a", b"1"))
    assert read(shard, "/a") == [(pb.OK, b"1")]
    assert len(cache) == 0  # never enabled
    cache.enable(MemoryKv())  # a store other than the one read
    assert read(shard, "/a") == [(pb.OK, b"1")]
    assert len(cache) == 0
    cache.enable(kv)
    read(shard, "/a")
    assert len(cache) == 1
    cache.disable()
    assert len(cache) == 0 and cache.held_bytes == 0
    read(shard, "/a")
    assert len(cache) == 0
    off = ReadCache(0, 1 << 20)
    off.enable(kv)
    assert not off.enabled
    with pytest.raises(ValueError, match="negative"):
        ReadCache(-1, 10)


def test_an_answer_without_its_value_keeps_a_long_version_whole() -> None:
    """A version longer than a one-byte length (a long client identity) is cut
    from a held answer whole when the get does not ask for the value."""
    shard, _ = cached_shard()
    session = shard.create_session()
    shard.write(put("/e", b"value", session_id=session, client_identity="i" * 300))
    get = pb.GetRequest(key="/e", include_value=False)
    expected = reads.get(shard.kv, get, ORDER)
    assert expected.version.client_identity == "i" * 300 and not expected.HasField("value")
    for _ in range(2):  # read from the KV, then from the cache
        raw = list(reads.get_chunks(shard.kv, [get], ORDER, 100, shard.read_cache))
        assert [pb.ReadResponse.FromString(chunk).gets[0] for chunk in raw] == [expected]
    assert shard.read_cache is not None and len(shard.read_cache) == 1


keys = st.sampled_from(["/a", "/a/b", "/b", "/b/a", "/c", "/z"])
operation = st.one_of(
    st.tuples(st.just("put"), keys, st.integers(0, 120)),
    st.tuples(st.just("ephemeral"), keys, st.integers(0, 120)),
    st.tuples(st.just("delete"), keys, st.just(0)),
    st.tuples(st.just("delete_range"), keys, st.just(0)),
    st.tuples(st.just("close_session"), keys, st.just(0)),
    st.tuples(st.just("read"), keys, st.integers(1, 4)),
)


@settings(max_examples=150, deadline=None)
@given(
    operations=st.lists(operation, max_size=40),
    max_entries=st.integers(1, 6),
    max_bytes=st.integers(1, 600),
)
def test_reads_through_the_cache_are_always_the_kvs_answers(
    operations: list[tuple[str, str, int]], max_entries: int, max_bytes: int
) -> None:
    """Any mix of writes, deletes, ranges deleted, sessions closed and reads, under
    bounds small enough to evict all the time: every read answers what the KV
    holds at that moment, and the count of bytes held is exact and bounded."""
    shard, _ = cached_shard(max_entries, max_bytes)
    cache = shard.read_cache
    assert cache is not None
    session = shard.create_session()
    for number, (kind, key, size) in enumerate(operations):
        if kind == "put":
            shard.write(put(key, bytes([number % 256]) * size))
        elif kind == "ephemeral":
            shard.write(put(key, b"e" * size, session_id=session, client_identity="c"))
        elif kind == "delete":
            shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key=key)]))
        elif kind == "delete_range":
            shard.write(
                pb.WriteRequest(
                    delete_ranges=[pb.DeleteRangeRequest(start_inclusive=key, end_exclusive="/c")]
                )
            )
        elif kind == "close_session":
            shard.close_session(session)
            session = shard.create_session()
        else:
            asked = [key] * size  # the same key more than once in a Read, too
            uncached = [
                (answer.status, answer.value)
                for answer in (
                    reads.get(shard.kv, pb.GetRequest(key=k, include_value=True), ORDER)
                    for k in asked
                )
            ]
            assert read(shard, *asked) == uncached
            assert read(shard, *asked) == uncached
        assert len(cache) <= max_entries
        assert cache.held_bytes == recounted_bytes(cache) <= max_bytes
