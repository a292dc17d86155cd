"""The shard map of one namespace, and which shard a key belongs to. Pure.

The routing key is the partition key when one is given, else the record key;
its XXH3 hash (low 32 bits, as Oxia's reference clients compute it) falls in
exactly one shard's inclusive hash range. A map made with `KeyHash.XXH64` routes
as the `oxia` 0.2.1 Python client does instead (see cairn.common.hashing).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.common.hashing import HASH_SPACE_MAX, HashRange, KeyHash
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb


class ShardMapError(ValueError):
    """A shard-assignments message that cannot be routed by."""


@dataclass(frozen=True, slots=True)
class ShardInfo:
    shard: int
    hash_range: HashRange
    leader: str  # host:port; empty while the shard has no leader


@dataclass(frozen=True)
class ShardMap:
    """One namespace's shards, in hash order, covering the hash space once."""

    namespace: str
    shards: tuple[ShardInfo, ...]
    key_order: KeyOrder = KeyOrder.HIERARCHICAL
    key_hash: KeyHash = KeyHash.XXH3
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _by_id: Mapping[int, ShardInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.shards:
            raise ShardMapError(f"namespace {self.namespace!r} has no shards")
        expected_start = 0
        for info in self.shards:
            if info.hash_range.min_inclusive != expected_start:
                raise ShardMapError(
                    f"namespace {self.namespace!r}: hash ranges leave a gap or overlap "
                    f"at {expected_start:#010x}"
                )
            expected_start = info.hash_range.max_inclusive + 1
        if expected_start != HASH_SPACE_MAX + 1:
            raise ShardMapError(f"namespace {self.namespace!r}: hash ranges end early")
        object.__setattr__(self, "_starts", tuple(s.hash_range.min_inclusive for s in self.shards))
        by_id = {info.shard: info for info in self.shards}
        if len(by_id) != len(self.shards):
            raise ShardMapError(f"namespace {self.namespace!r}: a shard id appears twice")
        object.__setattr__(self, "_by_id", by_id)

    @classmethod
    def from_proto(
        cls, namespace: str, message: pb.ShardAssignments, key_hash: KeyHash = KeyHash.XXH3
    ) -> ShardMap:
        if namespace not in message.namespaces:
            raise ShardMapError(f"the shard map does not list namespace {namespace!r}")
        assignment = message.namespaces[namespace]
        if assignment.shard_key_router not in (pb.XXHASH3, pb.UNKNOWN):
            raise ShardMapError(f"unsupported shard key router {assignment.shard_key_router}")
        shards = []
        for shard in assignment.assignments:
            if not shard.HasField("int32_hash_range"):
                raise ShardMapError(f"shard {shard.shard} has no hash range")
            bounds = shard.int32_hash_range
            try:
                hash_range = HashRange(bounds.min_hash_inclusive, bounds.max_hash_inclusive)
            except ValueError as error:
                raise ShardMapError(str(error)) from None
            shards.append(ShardInfo(shard.shard, hash_range, shard.leader))
        shards.sort(key=lambda info: info.hash_range.min_inclusive)
        order = (
            KeyOrder.NATURAL
            if assignment.key_sorting == pb.KEY_SORTING_NATURAL
            else KeyOrder.HIERARCHICAL
        )
        return cls(namespace, tuple(shards), order, key_hash)

    def shard_for(self, key: str, partition_key: str | None = None) -> int:
        """The shard holding `key` (or every key of `partition_key`)."""
        routing_hash = self.key_hash(key if partition_key is None else partition_key)
        index = bisect.bisect_right(self._starts, routing_hash) - 1
        return self.shards[index].shard

    def shard_ids(self) -> list[int]:
        return [info.shard for info in self.shards]

    def leader(self, shard: int) -> str:
        """The shard's leader address ('' if none is known); KeyError if no such shard."""
        return self._by_id[shard].leader

    def has_shard(self, shard: int) -> bool:
        return shard in self._by_id

    def leaders(self) -> set[str]:
        return {info.leader for info in self.shards if info.leader}
