"""Which shards this process serves, and the shard map clients are given."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cairn.common.errors import NamespaceNotFound, ShardNotFound
from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.shard import ShardReplica


@dataclass(frozen=True, slots=True)
class ShardPlacement:
    shard_id: int
    hash_range: HashRange
    leader_address: str


@dataclass(frozen=True, slots=True)
class NamespaceLayout:
    name: str
    key_order: KeyOrder
    shards: tuple[ShardPlacement, ...]


class ShardDirectory:
    def __init__(self, default_namespace: str = "default") -> None:
        self.default_namespace = default_namespace
        self._layouts: dict[str, NamespaceLayout] = {}
        self._replicas: dict[int, ShardReplica] = {}
        self._shard_namespace: dict[int, str] = {}
        self._version = 0
        self._closed = False
        self._changed = asyncio.Condition()

    async def set_namespace(
        self, layout: NamespaceLayout, replicas: dict[int, ShardReplica]
    ) -> None:
        self._layouts[layout.name] = layout
        for placement in layout.shards:
            self._shard_namespace[placement.shard_id] = layout.name
        self._replicas.update(replicas)
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    def replicas(self) -> list[ShardReplica]:
        return list(self._replicas.values())

    def leader_shard(self, shard_id: int) -> ShardReplica:
        replica = self._replicas.get(shard_id)
        if replica is None:
            raise ShardNotFound(f"shard {shard_id} is not served by this node")
        return replica

    def check_shard_namespace(self, shard_id: int, namespace: str) -> None:
        owner = self._shard_namespace.get(shard_id)
        if owner is None:
            raise ShardNotFound(f"shard {shard_id} is not served by this node")
        if owner != namespace:
            raise ShardNotFound(f"shard {shard_id} does not belong to namespace {namespace!r}")

    def assignments(self, namespace: str) -> tuple[int, pb.ShardAssignments]:
        layout = self._layouts.get(namespace)
        if layout is None:
            raise NamespaceNotFound(f"namespace {namespace!r} does not exist")
        entry = pb.NamespaceShardsAssignment(shard_key_router=pb.XXHASH3)
        if layout.key_order is KeyOrder.NATURAL:
            entry.key_sorting = pb.KEY_SORTING_NATURAL
        # Hierarchical: key_sorting stays unset, which released clients read as the
        # segment-wise order they all merge with (see cairn.common.keyorder).
        for placement in layout.shards:
            assignment = entry.assignments.add(
                shard=placement.shard_id, leader=placement.leader_address
            )
            assignment.int32_hash_range.min_hash_inclusive = placement.hash_range.min_inclusive
            assignment.int32_hash_range.max_hash_inclusive = placement.hash_range.max_inclusive
        message = pb.ShardAssignments()
        message.namespaces[namespace].CopyFrom(entry)
        return self._version, message

    async def wait_for_assignment_change(self, seen_version: int) -> int | None:
        """The new version once the map changes; None when the directory closes."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or self._version != seen_version)
            return None if self._closed else self._version

    async def close(self) -> None:
        async with self._changed:
            self._closed = True
            self._changed.notify_all()
