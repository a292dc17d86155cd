"""A shard replica holds answers in memory for reads only while it leads: its own
applier keeps them true to the KV, and a new term (fencing) or a failed apply step
empties and stops the cache. Real RocksDB and WAL, in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn.common.errors import WriteOutcomeUnknown
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core import reads
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.replication.replica import Member
from cairn.storage.kv import ColumnChanges, RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.wal import Wal

ME = Member("127.0.0.1:1", "127.0.0.1:2")


async def write(replica: ShardReplica, request: pb.WriteRequest) -> None:
    raw = request.SerializeToString()
    await asyncio.wait_for(await replica.submit(raw, request, has_plain_puts(raw)), 10)


def read(replica: ShardReplica, *keys: str) -> list[tuple[int, bytes]]:
    """As the client API reads: the replica's KV, through its record cache."""
    gets = pb.ReadRequest(gets=[pb.GetRequest(key=key, include_value=True) for key in keys]).gets
    chunks = reads.get_chunks(replica.kv, gets, replica.key_order, 100, replica.read_cache)
    parsed = [pb.ReadResponse.FromString(raw) for raw in chunks]
    return [(answer.status, answer.value) for chunk in parsed for answer in chunk.gets]


def put(key: str, value: bytes) -> pb.WriteRequest:
    return pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=value)])


async def _leads_with_a_cache_true_to_the_kv(path: Path) -> None:
    replica = ShardReplica(0, ShardSpec(), RocksKv(path / "kv"), Wal.open(path / "wal"), Limits())
    try:
        assert not replica.read_cache.enabled
        await lead_alone(replica, ME)
        assert replica.read_cache.enabled
        await write(replica, put("/a", b"1"))
        await write(replica, put("/b", b"2"))
        assert read(replica, "/a", "/b", "/c") == [
            (pb.OK, b"1"),
            (pb.OK, b"2"),
            (pb.KEY_NOT_FOUND, b""),
        ]
        assert len(replica.read_cache) == 3
        await write(replica, put("/a", b"new"))
        await write(replica, put("/c", b"created"))
        await write(replica, pb.WriteRequest(shard=0, deletes=[pb.DeleteRequest(key="/b")]))
        assert read(replica, "/a", "/b", "/c") == [
            (pb.OK, b"new"),
            (pb.KEY_NOT_FOUND, b""),
            (pb.OK, b"created"),
        ]
        # Fenced by a newer term: no longer the leader, the cache empties and stops.
        await replica.new_term(replica.term + 1)
        assert not replica.read_cache.enabled
        assert len(replica.read_cache) == 0
        # Leading again starts it empty.
        await lead_alone(replica, ME)
        assert replica.read_cache.enabled and len(replica.read_cache) == 0
        assert read(replica, "/a", "/b") == [(pb.OK, b"new"), (pb.KEY_NOT_FOUND, b"")]
    finally:
        await replica.close()


def test_a_leader_caches_records_true_to_its_kv_and_stops_when_fenced(tmp_path: Path) -> None:
    asyncio.run(_leads_with_a_cache_true_to_the_kv(tmp_path))


class WritesThenFails(RocksKv):
    """A KV whose next apply batch is written, and then fails."""

    fail_next = False

    def write_unlogged(self, changes: ColumnChanges) -> None:
        super().write_unlogged(changes)
        if self.fail_next:
            raise OSError("the batch was written, then this failed")


async def _a_failed_apply_step_turns_the_cache_off(path: Path) -> None:
    """Also: the writer whose group failed is told its outcome is unknown (it was
    once left waiting: the group was off the pending queue that failing empties)."""
    kv = WritesThenFails(path / "kv")
    replica = ShardReplica(0, ShardSpec(), kv, Wal.open(path / "wal"), Limits())
    try:
        await lead_alone(replica, ME)
        await write(replica, put("/a", b"1"))
        assert read(replica, "/a") == [(pb.OK, b"1")]
        kv.fail_next = True
        with pytest.raises(WriteOutcomeUnknown):
            await write(replica, put("/a", b"2"))
        # The KV holds the new record; the cache never heard of it, and is off.
        assert not replica.read_cache.enabled
        assert read(replica, "/a") == [(pb.OK, b"2")]
    finally:
        await replica.close()


def test_a_failed_apply_step_turns_the_cache_off(tmp_path: Path) -> None:
    asyncio.run(_a_failed_apply_step_turns_the_cache_off(tmp_path))
