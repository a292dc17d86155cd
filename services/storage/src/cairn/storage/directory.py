"""Which shard replicas this process holds, and the shard map clients are given.

The map comes from the data directory's layout (standalone) or from the
controller's pushes (a pod in a cluster). A request for a shard whose leader is
elsewhere is answered NODE_IS_NOT_LEADER with the leader's address as a hint.

A client's first shard map is sent only once it is whole (`first_assignments`):
a pod that has had no push since it started cannot say whether a namespace
exists, and a map naming no leader for a shard is one the Oxia Python client
(which reads only the first message) could never use.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cairn.common.errors import NamespaceNotFound, NotLeader, ShardNotFound
from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.shard import ShardReplica


@dataclass(frozen=True, slots=True)
class ShardPlacement:
    shard_id: int
    hash_range: HashRange
    leader_address: str


# Asking GetShardAssignments for this namespace returns every namespace in one
# message. Oxia's ShardAssignmentsRequest has no such flag (an Oxia server answers
# one namespace, and treats an empty name as "default"), so Cairn reserves a name no
# namespace can take (see config.namespace_name_problem) instead of adding a field
# that released clients would not know.
ALL_NAMESPACES = "*"


@dataclass(frozen=True, slots=True)
class NamespaceLayout:
    name: str
    key_order: KeyOrder
    shards: tuple[ShardPlacement, ...]
    notifications_enabled: bool = True


class ShardDirectory:
    def __init__(self, default_namespace: str = "default", *, pushed_map: bool = False) -> None:
        """`pushed_map`: the map comes from the controller's pushes (a pod in a
        cluster), so none is known until the first one arrives."""
        # What an empty namespace in a request means.
        self.default_namespace = default_namespace
        self._pushed_map = pushed_map
        self._layouts: dict[str, NamespaceLayout] = {}
        self._replicas: dict[int, ShardReplica] = {}
        self._shard_namespace: dict[int, str] = {}
        self._hash_ranges: dict[int, HashRange] = {}
        self._version = 0
        # The version of the last map the controller pushed (pods in a cluster).
        self._pushed_version = -1
        self._closed = False
        self._changed = asyncio.Condition()

    async def set_namespace(
        self, layout: NamespaceLayout, replicas: dict[int, ShardReplica]
    ) -> None:
        for placement in layout.shards:
            owner = self._shard_namespace.get(placement.shard_id, layout.name)
            if owner != layout.name:
                # Requests name only a shard id, so ids must be unique across namespaces.
                raise ValueError(
                    f"shard {placement.shard_id} of namespace {layout.name!r} already "
                    f"belongs to namespace {owner!r}"
                )
        self._layouts[layout.name] = layout
        for placement in layout.shards:
            self._shard_namespace[placement.shard_id] = layout.name
            self._hash_ranges[placement.shard_id] = placement.hash_range
        self._replicas.update(replicas)
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def set_layouts(self, layouts: list[NamespaceLayout], version: int) -> bool:
        """Replace the whole map with a pushed one; False if `version` is not newer
        than the last push (a delayed, older push changes nothing)."""
        if version <= self._pushed_version:
            return False
        self._pushed_version = version
        self._layouts = {layout.name: layout for layout in layouts}
        self._shard_namespace = {
            placement.shard_id: layout.name for layout in layouts for placement in layout.shards
        }
        self._hash_ranges = {
            placement.shard_id: placement.hash_range
            for layout in layouts
            for placement in layout.shards
        }
        async with self._changed:
            self._version += 1
            self._changed.notify_all()
        return True

    def add_replica(self, replica: ShardReplica) -> None:
        self._replicas[replica.shard_id] = replica

    def remove_replica(self, shard_id: int) -> None:
        self._replicas.pop(shard_id, None)

    def replicas(self) -> list[ShardReplica]:
        return list(self._replicas.values())

    def replica(self, shard_id: int) -> ShardReplica:
        """This process's replica of the shard, whatever its role."""
        replica = self._replicas.get(shard_id)
        if replica is None:
            raise ShardNotFound(f"shard {shard_id} has no replica on this node")
        return replica

    def leader_shard(self, shard_id: int) -> ShardReplica:
        """The shard's replica if it leads here; else NotLeader with a hint."""
        replica = self._replicas.get(shard_id)
        if replica is None:
            hint = self._leader_address(shard_id)
            if hint is None:
                raise ShardNotFound(f"shard {shard_id} is not served by this node")
            raise NotLeader(shard_id, hint)
        replica.core.check_leader()
        return replica

    async def serving_shard(self, shard_id: int) -> ShardReplica:
        """`leader_shard`, once the leader serves reads (a new leader first applies
        what it inherited)."""
        replica = self.leader_shard(shard_id)
        if not replica.serving:
            await replica.wait_serving()
        return replica

    def hash_range(self, shard_id: int) -> HashRange | None:
        """The shard's hash range in the map; None before the map names it."""
        return self._hash_ranges.get(shard_id)

    def _leader_address(self, shard_id: int) -> str | None:
        owner = self._shard_namespace.get(shard_id)
        if owner is None:
            return None
        for placement in self._layouts[owner].shards:
            if placement.shard_id == shard_id:
                return placement.leader_address
        return None

    def layout(self, namespace: str) -> NamespaceLayout:
        layout = self._layouts.get(namespace)
        if layout is None:
            raise NamespaceNotFound(f"namespace {namespace!r} does not exist")
        return layout

    def namespaces(self) -> list[str]:
        return list(self._layouts)

    def check_shard_namespace(self, shard_id: int, namespace: str) -> None:
        replica = self._replicas.get(shard_id)
        owner = replica.namespace if replica is not None else self._shard_namespace.get(shard_id)
        if owner is None:
            raise ShardNotFound(f"shard {shard_id} is not served by this node")
        if owner != namespace:
            raise ShardNotFound(f"shard {shard_id} does not belong to namespace {namespace!r}")

    def assignments(self, namespace: str) -> tuple[int, pb.ShardAssignments]:
        """The map version and the shard map of one namespace, or of all of them for
        ALL_NAMESPACES."""
        if namespace == ALL_NAMESPACES:
            # A namespace still being created (no shards placed) is left out: to a
            # client it would be a map that covers no hash.
            layouts = [layout for layout in self._layouts.values() if layout.shards]
        else:
            layout = self._layouts.get(namespace)
            if layout is None:
                raise NamespaceNotFound(f"namespace {namespace!r} does not exist")
            layouts = [layout]
        message = pb.ShardAssignments()
        for layout in layouts:
            _fill_namespace(message.namespaces[layout.name], layout)
        return self._version, message

    async def first_assignments(self, namespace: str) -> tuple[int, pb.ShardAssignments] | None:
        """`assignments`, once this process can give a whole map: after the
        controller's first push (a pod in a cluster), with the namespace's shards
        placed and each led (for ALL_NAMESPACES, every namespace's). NamespaceNotFound
        once a map without the namespace is known; None when the directory closes
        first. The caller bounds the wait (a client's connect timeout)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or self._whole_for(namespace))
            if self._closed:
                return None
        return self.assignments(namespace)

    def _whole_for(self, namespace: str) -> bool:
        if self._pushed_map and self._pushed_version < 0:
            return False
        if namespace == ALL_NAMESPACES:
            layouts = list(self._layouts.values())
        elif namespace in self._layouts:
            layouts = [self._layouts[namespace]]
        else:
            return True  # known not to exist: `assignments` says so
        # Every namespace covers the whole hash space, so one with no shards yet
        # is still being placed.
        return all(
            layout.shards and all(placement.leader_address for placement in layout.shards)
            for layout in layouts
        )

    async def wait_for_assignment_change(self, seen_version: int) -> int | None:
        """The new version once the map changes; None when the directory closes."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or self._version != seen_version)
            return None if self._closed else self._version

    async def close(self) -> None:
        async with self._changed:
            self._closed = True
            self._changed.notify_all()


def _fill_namespace(entry: pb.NamespaceShardsAssignment, layout: NamespaceLayout) -> None:
    entry.shard_key_router = pb.XXHASH3
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
