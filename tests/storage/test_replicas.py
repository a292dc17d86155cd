"""replicas.py: a pod's replicas over its storage; a NewTerm that would create a
replica while it is being deleted is refused, or the deletion would take the
new replica's storage with it (found by the managed-cluster simulation: a
DeleteShard still closing the replica when the controller, past the call's
deadline, created the replica anew)."""

from __future__ import annotations

import asyncio

import pytest

from cairn.common.errors import ShardNotFound, Unavailable
from cairn.storage.config import ShardSpec
from cairn.storage.directory import ShardDirectory
from cairn.storage.replicas import Replicas


class SlowToClose:
    def __init__(self, shard_id: int) -> None:
        self.shard_id = shard_id
        self.may_close = asyncio.Event()

    async def close(self) -> None:
        await self.may_close.wait()


class Storage:
    def __init__(self) -> None:
        self.specs: dict[int, ShardSpec] = {}
        self.opened: list[SlowToClose] = []

    def stored(self) -> list[tuple[int, ShardSpec]]:
        return list(self.specs.items())

    def create(self, shard_id: int, spec: ShardSpec) -> None:
        self.specs[shard_id] = spec

    def open(self, shard_id: int, spec: ShardSpec) -> SlowToClose:
        self.opened.append(SlowToClose(shard_id))
        return self.opened[-1]

    def delete(self, shard_id: int) -> None:
        del self.specs[shard_id]


def test_a_replica_is_not_created_anew_while_it_is_being_deleted() -> None:
    asyncio.run(_delete_then_create())


async def _delete_then_create() -> None:
    storage = Storage()
    replicas = Replicas(ShardDirectory(), storage)  # type: ignore[arg-type]
    spec = ShardSpec()
    first = replicas.replica_for(7, spec)
    deleting = asyncio.create_task(replicas.delete(7))
    await asyncio.sleep(0)  # the deletion waits for the replica to close
    with pytest.raises(Unavailable, match="being deleted"):
        replicas.replica_for(7, spec)
    first.may_close.set()  # type: ignore[attr-defined]
    await deleting
    assert storage.specs == {}
    second = replicas.replica_for(7, spec)
    assert second is not first
    assert storage.specs == {7: spec}


def test_reopen_opens_every_stored_replica_and_none_is_made_without_a_spec() -> None:
    storage = Storage()
    storage.specs = {2: ShardSpec(), 1: ShardSpec()}
    directory = ShardDirectory()
    replicas = Replicas(directory, storage)  # type: ignore[arg-type]
    assert replicas.reopen() == 2
    assert [replica.shard_id for replica in storage.opened] == [1, 2]
    with pytest.raises(ShardNotFound):
        replicas.replica_for(3, None)
