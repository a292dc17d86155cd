"""The storage pod's own driver (shard.py) on the simulated disk and the virtual
loop: the first part of the simulation that runs the shipped runtime rather
than a copy of it (issue 45).

A leader alone takes client writes while its disk syncs with random latency,
and loses power at a random moment, over and over: every write it acknowledged
must be in its state once it leads again, whatever was lost of the WAL's
unsynced tail and of the KV's writes not yet flushed.
"""

from __future__ import annotations

import random

import pytest

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.replication.replica import Member
from cairn.storage.kv.store import Column
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.shard_context import ShardContext
from simulation.disk import SimKv, SimWal, VirtualDiskWork, ignore_lost_power
from simulation.virtual_loop import VirtualLoop

ME = Member("me:6648", "me:6649")
POWER_LOSSES = 8


class Process:
    """One run of the storage pod's shard over the disk, until power is lost."""

    def __init__(self, wal: SimWal, kv: SimKv, rng: random.Random) -> None:
        self.loop = VirtualLoop()
        self.loop.set_exception_handler(ignore_lost_power)
        clock = self.loop.clock

        async def start() -> ShardReplica:
            replica = ShardReplica(
                0,
                ShardSpec(),
                kv.reopen(),
                wal.reopen(),
                Limits(),
                disk=VirtualDiskWork(wal, lambda: rng.uniform(0.1, 3.0)),
                clock_ms=lambda: clock.now_ms,
                session_clock_ms=lambda: clock.now_ms,
                incarnation_source=lambda: 1,
            )
            await lead_alone(replica, ME)
            return replica

        try:
            self.replica = self.loop.run(start())
        except BaseException:
            self.loop.close()
            raise

    def lose_power(self, wal: SimWal, kv: SimKv) -> None:
        wal.lose_power()
        kv.lose_power()
        self.loop.close()  # its tasks never run again


def _put(key: str) -> tuple[bytes, pb.WriteRequest]:
    request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=key.encode())])
    return request.SerializeToString(), request


def _run_until_power_loss(
    process: Process, rng: random.Random, next_key: int, acknowledged: set[str]
) -> int:
    """Clients write while time passes; power goes at a random moment.
    Returns the next key to write."""
    replica, loop = process.replica, process.loop

    async def client(key: str) -> None:
        await replica.write(*_put(key))
        acknowledged.add(key)

    for _ in range(rng.randint(1, 30)):
        for _ in range(rng.randint(0, 4)):
            loop.create_task(client(f"/k/{next_key}"))
            next_key += 1
        loop.advance(rng.uniform(0, 2))
    return next_key


def _power_losses(seed: int) -> int:
    """One history; returns how many writes were acknowledged."""
    rng = random.Random(seed)
    wal, kv = SimWal(), SimKv()
    acknowledged: set[str] = set()
    next_key = 0
    for power_loss in range(POWER_LOSSES + 1):
        process = Process(wal, kv, rng)
        try:
            stored = _stored_keys(kv)
            assert acknowledged <= stored, f"lost {sorted(acknowledged - stored)[:5]}"
            if power_loss < POWER_LOSSES:
                next_key = _run_until_power_loss(process, rng, next_key, acknowledged)
        finally:
            process.lose_power(wal, kv)
    return len(acknowledged)


def _histories(seeds: range) -> None:
    for seed in seeds:
        _power_losses(seed)


@pytest.mark.parametrize("seed", range(6))
def test_a_leader_keeps_every_acknowledged_write_through_power_losses(seed: int) -> None:
    assert _power_losses(seed) > POWER_LOSSES  # the history did acknowledge writes


def test_the_check_catches_a_leader_that_counts_unsynced_entries_as_durable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unsynced = property(lambda shard: shard.core.log.last_offset)
    monkeypatch.setattr(ShardContext, "durable_offset", unsynced)
    with pytest.raises(AssertionError, match="lost"):
        _histories(range(6))


def _stored_keys(kv: SimKv) -> set[str]:
    order = KeyOrder.HIERARCHICAL
    return {order.decode(key) for key, _ in kv.scan(Column.RECORDS, b"", None)}
