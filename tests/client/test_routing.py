"""The client's shard map: built from assignment messages, routes every key to the
one shard whose hash range holds its routing hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.client.routing import ShardMap, ShardMapError
from cairn.common.hashing import HashRange, find_range, key_hash, split_hash_space
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb


def assignments(
    namespace: str, ranges: list[HashRange], ids: list[int] | None = None, natural: bool = False
) -> pb.ShardAssignments:
    message = pb.ShardAssignments()
    ns = message.namespaces[namespace]
    ns.shard_key_router = pb.XXHASH3
    ns.key_sorting = pb.KEY_SORTING_NATURAL if natural else pb.KEY_SORTING_HIERARCHICAL
    for index, hash_range in enumerate(ranges):
        shard = ns.assignments.add(shard=(ids[index] if ids else index), leader=f"pod-{index}:6648")
        shard.int32_hash_range.min_hash_inclusive = hash_range.min_inclusive
        shard.int32_hash_range.max_hash_inclusive = hash_range.max_inclusive
    return message


@given(
    shard_count=st.integers(1, 64),
    keys=st.lists(st.text(max_size=20), max_size=50),
    partition=st.none() | st.text(max_size=10),
)
def test_every_key_goes_to_the_shard_whose_range_holds_its_routing_hash(
    shard_count: int, keys: list[str], partition: str | None
) -> None:
    ranges = split_hash_space(shard_count)
    # Listed out of order: the map sorts by range.
    message = assignments("default", list(reversed(ranges)), ids=list(range(shard_count))[::-1])
    shard_map = ShardMap.from_proto("default", message)
    for key in keys:
        routing_hash = key_hash(key if partition is None else partition)
        expected = find_range(ranges, routing_hash)
        assert shard_map.shard_for(key, partition) == expected
        assert shard_map.shards[expected].hash_range.contains(routing_hash)


def test_a_partition_key_sends_different_keys_to_one_shard() -> None:
    shard_map = ShardMap.from_proto("default", assignments("default", split_hash_space(16)))
    shards = {shard_map.shard_for(f"/key/{i}", "tenant-7") for i in range(100)}
    assert shards == {shard_map.shard_for("anything", "tenant-7")}
    assert len({shard_map.shard_for(f"/key/{i}") for i in range(100)}) > 1


def test_the_map_knows_leaders_and_key_order() -> None:
    message = assignments("ns", split_hash_space(2), natural=True)
    shard_map = ShardMap.from_proto("ns", message)
    assert shard_map.key_order is KeyOrder.NATURAL
    assert shard_map.leader(1) == "pod-1:6648"
    assert shard_map.leaders() == {"pod-0:6648", "pod-1:6648"}
    assert shard_map.shard_ids() == [0, 1]
    with pytest.raises(KeyError):
        shard_map.leader(7)


@pytest.mark.parametrize(
    ("ranges", "problem"),
    [
        ([HashRange(0, 10), HashRange(12, 0xFFFFFFFF)], "gap"),
        ([HashRange(0, 10), HashRange(10, 0xFFFFFFFF)], "overlap"),
        ([HashRange(0, 0xFFFF)], "end early"),
        ([HashRange(1, 0xFFFFFFFF)], "gap"),
    ],
)
def test_a_map_that_does_not_cover_the_hash_space_once_is_refused(
    ranges: list[HashRange], problem: str
) -> None:
    with pytest.raises(ShardMapError, match=problem.split()[0]):
        ShardMap.from_proto("default", assignments("default", ranges))


def test_a_map_without_the_namespace_or_with_a_duplicate_shard_is_refused() -> None:
    with pytest.raises(ShardMapError, match="does not list"):
        ShardMap.from_proto("other", assignments("default", split_hash_space(2)))
    with pytest.raises(ShardMapError, match="twice"):
        ShardMap.from_proto("default", assignments("default", split_hash_space(2), ids=[3, 3]))
