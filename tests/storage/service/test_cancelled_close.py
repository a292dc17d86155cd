"""A replica's close that its caller cancels (a DeleteShard whose call went
away) still ends at once: the applier, which ends once the syncer has, is
woken when close cancels a syncer stuck in an fsync. Found by a campaign of
the simulation (even-learners seed 632): the applier slept until close's
30 s limit, and the pod refused to re-create the replica all that time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.replication.replica import Member
from cairn.storage.kv import RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.wal import Wal

T = TypeVar("T")
ME = Member("127.0.0.1:1", "127.0.0.1:2")


class HeldDisk:
    """Disk work that waits, while `held`, until released: an fsync that hangs."""

    def __init__(self) -> None:
        self.held = False
        self.waiting = 0
        self._released = asyncio.Event()

    async def run(self, work: Callable[[], T]) -> T:
        if self.held:
            self.waiting += 1
            await self._released.wait()
        return work()

    def close(self) -> None:
        pass


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def _cancelled_close(path: Path) -> None:
    disk = HeldDisk()
    replica = ShardReplica(
        0, ShardSpec(), RocksKv(path / "kv"), Wal.open(path / "wal"), Limits(), disk=disk
    )
    await lead_alone(replica, ME)
    disk.held = True
    request = pb.WriteRequest(puts=[pb.PutRequest(key="/a", value=b"v")])
    await replica.submit(request.SerializeToString(), request)
    await _until(lambda: disk.waiting == 1)  # the syncer is in its fsync
    closing = asyncio.create_task(replica.close())
    # Close cancels the background loops first, then waits for the syncer.
    await _until(lambda: all(task.done() for task in replica._background))
    await asyncio.sleep(0)
    closing.cancel()
    # Waited for without cancelling it again (close finishes what it started).
    done, _ = await asyncio.wait({closing}, timeout=10)
    assert closing in done, "close still waits for an applier nobody woke"
    assert all(task.done() for task in (*replica._background, *replica._pipeline.tasks))


def test_a_cancelled_close_ends_at_once(tmp_path: Path) -> None:
    asyncio.run(_cancelled_close(tmp_path))
