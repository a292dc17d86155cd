"""Writes sent to a shard their first key's XXH3 hash does not route to."""

from __future__ import annotations

from cairn.common.hashing import HashRange, KeyHash, split_hash_space
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.routing_check import misrouted, routing_key_of_write

RANGES = split_hash_space(3)


def shard_by(hash_function: KeyHash, key: str) -> HashRange:
    return next(r for r in RANGES if r.contains(hash_function(key)))


def test_a_write_routed_by_xxh3_is_not_misrouted_and_one_routed_by_xxh64_may_be() -> None:
    keys = [f"/k{i}" for i in range(30)]
    moved = [k for k in keys if shard_by(KeyHash.XXH3, k) != shard_by(KeyHash.XXH64, k)]
    assert moved, "about two thirds of keys hash to another of three shards"
    for key in keys:
        assert not misrouted(key, shard_by(KeyHash.XXH3, key))
        assert misrouted(key, shard_by(KeyHash.XXH64, key)) == (key in moved)


def test_the_routing_key_is_the_first_operations_partition_key_or_key() -> None:
    put = pb.WriteRequest(
        puts=[pb.PutRequest(key="/a", partition_key="p"), pb.PutRequest(key="/b")]
    )
    assert routing_key_of_write(put) == "p"
    delete = pb.WriteRequest(deletes=[pb.DeleteRequest(key="/d")])
    assert routing_key_of_write(delete) == "/d"
    ranges_only = pb.WriteRequest(delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/a")])
    assert routing_key_of_write(ranges_only) is None
    assert not misrouted(None, RANGES[0])
    assert not misrouted("/a", None)
