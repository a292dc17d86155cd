"""The shard replicas a pod in a cluster hosts, over where it stores them.

A replica is created by the controller's first NewTerm for it (which carries
the shard's spec, durable before the replica exists: a restart reopens it) and
removed by DeleteShard; after a restart every stored replica comes back
fenced, to be given a role again by the controller.

A deletion takes a while (the replica closes first): until its storage is
gone, a NewTerm that would create the replica anew is refused, or the
deletion would take the new replica's storage with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from cairn.common.errors import ShardNotFound, Unavailable
from cairn.storage.config import ShardSpec
from cairn.storage.directory import ShardDirectory
from cairn.storage.shard import ShardReplica

log = logging.getLogger(__name__)


class ShardStorage(Protocol):
    """Where a pod keeps its replicas (files under its data directory; the
    simulation's disks)."""

    def stored(self) -> Iterable[tuple[int, ShardSpec]]:
        """The replicas stored, with their specs."""
        ...

    def create(self, shard_id: int, spec: ShardSpec) -> None:
        """Make room for a new replica, its spec durable."""
        ...

    def open(self, shard_id: int, spec: ShardSpec) -> ShardReplica: ...

    def delete(self, shard_id: int) -> None:
        """Remove a closed replica's storage: the spec first, so that a crash
        part way leaves nothing to reopen."""
        ...


class Replicas:
    def __init__(self, directory: ShardDirectory, storage: ShardStorage) -> None:
        self.directory = directory
        self.storage = storage
        self._deleting: set[int] = set()

    def reopen(self) -> int:
        """Every stored replica, opened (fenced); how many."""
        count = 0
        for shard_id, spec in sorted(self.storage.stored(), key=lambda stored: stored[0]):
            self.directory.add_replica(self.storage.open(shard_id, spec))
            count += 1
        return count

    def replica_for(self, shard_id: int, spec: ShardSpec | None) -> ShardReplica:
        """The shard's replica here, created (empty) if there is none and `spec` is
        given."""
        try:
            return self.directory.replica(shard_id)
        except ShardNotFound:
            if spec is None:
                raise
        if shard_id in self._deleting:
            raise Unavailable(f"shard {shard_id}: the replica here is being deleted")
        self.storage.create(shard_id, spec)
        replica = self.storage.open(shard_id, spec)
        self.directory.add_replica(replica)
        log.info("shard %d: replica created for namespace %r", shard_id, spec.namespace)
        return replica

    async def delete(self, shard_id: int) -> None:
        replica = self.directory.replica(shard_id)
        self.directory.remove_replica(shard_id)
        self._deleting.add(shard_id)
        try:
            await replica.close()
            self.storage.delete(shard_id)
        finally:
            self._deleting.discard(shard_id)
        log.info("shard %d: replica deleted", shard_id)
