"""A Read's gets answered in order, in chunks of a bounded number of answers."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.errors import InvalidRequest
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import reads
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.kv import RocksKv
from support.memory_shard import ORDER, Shard, put


def chunks_of(
    shard: Shard, gets: Sequence[pb.GetRequest], per_chunk: int, cache: ReadCache | None = None
) -> list[pb.ReadResponse]:
    """The Read's answer chunks, parsed; each serialized exactly as the protobuf
    library would serialize the parsed message (field order, presence)."""
    chunks = []
    for raw in reads.get_chunks(shard.kv, gets, ORDER, per_chunk, cache):
        chunk = pb.ReadResponse.FromString(raw)
        assert chunk.SerializeToString() == raw
        chunks.append(chunk)
    return chunks


def shard_with(keys: list[str]) -> Shard:
    shard = Shard()
    for key in keys:
        shard.write(put(key, key.encode()))
    return shard


def test_answers_come_in_order_in_bounded_chunks_as_single_gets_would() -> None:
    shard = shard_with(["/a", "/b", "/c", "/d"])
    gets = pb.ReadRequest(
        gets=[
            pb.GetRequest(key="/b", include_value=True),
            pb.GetRequest(key="/x", include_value=True),  # absent
            pb.GetRequest(key="/bb", comparison_type=pb.FLOOR, include_value=True),
            pb.GetRequest(key="/c", include_value=False),
            pb.GetRequest(key="/a", comparison_type=pb.HIGHER, include_value=True),
            pb.GetRequest(key="/d", comparison_type=pb.HIGHER),  # nothing above
            pb.GetRequest(key="/d", include_value=True),
        ]
    ).gets
    chunks = chunks_of(shard, gets, 3)
    assert [len(chunk.gets) for chunk in chunks] == [3, 3, 1]
    answers = [answer for chunk in chunks for answer in chunk.gets]
    assert answers == [reads.get(shard.kv, get, ORDER) for get in gets]
    assert [(a.status, a.key, a.value) for a in answers] == [
        (pb.OK, "/b", b"/b"),
        (pb.KEY_NOT_FOUND, "", b""),
        (pb.OK, "/b", b"/b"),
        (pb.OK, "/c", b""),
        (pb.OK, "/b", b"/b"),
        (pb.KEY_NOT_FOUND, "", b""),
        (pb.OK, "/d", b"/d"),
    ]


def test_no_gets_get_one_empty_chunk_and_a_full_last_chunk_no_empty_one() -> None:
    shard = shard_with(["/a"])
    assert chunks_of(shard, pb.ReadRequest().gets, 3) == [pb.ReadResponse()]
    two = pb.ReadRequest(gets=[pb.GetRequest(key="/a"), pb.GetRequest(key="/a")]).gets
    assert [len(chunk.gets) for chunk in chunks_of(shard, two, 2)] == [2]


def test_an_unknown_comparison_ends_the_answers_with_an_error() -> None:
    shard = shard_with(["/a"])
    gets = pb.ReadRequest(
        gets=[pb.GetRequest(key="/a"), pb.GetRequest(key="/a", comparison_type=99)]  # type: ignore[arg-type]
    ).gets
    chunks = reads.get_chunks(shard.kv, gets, ORDER, 1)
    assert len(pb.ReadResponse.FromString(next(chunks)).gets) == 1
    with pytest.raises(InvalidRequest):
        next(chunks)


keys = st.sampled_from(["/a", "/a/b", "/a/c", "/b", "/b/a", "/c", "/z"])
comparisons = st.sampled_from([pb.EQUAL, pb.FLOOR, pb.LOWER, pb.CEILING, pb.HIGHER])


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(st.tuples(keys, st.sampled_from(["put", "ephemeral", "delete"])), max_size=12),
    gets=st.lists(st.tuples(keys, comparisons, st.booleans()), max_size=12),
    per_chunk=st.integers(min_value=1, max_value=5),
    rocksdb=st.booleans(),
    cached=st.booleans(),
)
def test_chunked_answers_are_the_single_gets_answers_on_either_store(
    writes: list[tuple[str, str]],
    gets: list[tuple[str, int, bool]],
    per_chunk: int,
    rocksdb: bool,
    cached: bool,
) -> None:
    """Exact-key gets are read together (KvReader.get_many, or a read cache), the
    others one by one; interleaved, on RocksDB as in memory, the answers are those of
    single gets, serialized as the protobuf library would."""
    with tempfile.TemporaryDirectory() as directory:
        shard = Shard(RocksKv(Path(directory) / "kv") if rocksdb else None)
        try:
            session = shard.create_session()
            for number, (key, kind) in enumerate(writes):
                if kind == "delete":
                    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key=key)]))
                elif kind == "ephemeral":
                    shard.write(put(key, b"e%d" % number, session_id=session, client_identity="c"))
                else:
                    shard.write(put(key, b"p%d" % number))
            requests = pb.ReadRequest(
                gets=[
                    pb.GetRequest(key=key, comparison_type=comparison, include_value=value)  # type: ignore[arg-type]
                    for key, comparison, value in gets
                ]
            ).gets
            cache = None
            if cached:
                cache = ReadCache(100, 1 << 20)
                cache.enable(shard.kv)
            chunks = chunks_of(shard, requests, per_chunk, cache)
            # A second time, the exact-key answers come from the cache if there is one.
            assert chunks_of(shard, requests, per_chunk, cache) == chunks
            expected_sizes = [min(per_chunk, len(gets) - i) for i in range(0, len(gets), per_chunk)]
            assert [len(chunk.gets) for chunk in chunks] == (expected_sizes or [0])
            answers = [answer for chunk in chunks for answer in chunk.gets]
            assert answers == [reads.get(shard.kv, get, ORDER) for get in requests]
        finally:
            shard.kv.close()
