"""A follower holds in memory only the run of entries that fits its write buffer
and reads the rest back from its WAL when it applies them (ShardCore.
keeps_in_memory). Elected with such a gap, the new leader logs its term's first
entry after entries it never held: every inherited entry must still be applied,
in order, before that one (ShardCore.hold lets the held run go rather than hold
an entry that does not continue it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage.service.test_folding import records

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.entries import CLIENT_WRITE, LogEntry, encode_entry
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import TermHistory, TermStart
from cairn.storage.kv import RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.shard_status import shard_status
from cairn.storage.wal import Wal

ME = Member("me:6648", "me:6649")
OLD_LEADER = Member("old:6648", "old:6649")
INHERITED = 6


def _write(offset: int) -> LogEntry:
    request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=f"/k/{offset}", value=b"v")])
    return LogEntry(
        1, offset, 1_000 + offset, encode_entry(CLIENT_WRITE, request.SerializeToString())
    )


async def _elected_with_a_gap(tmp_path: Path) -> None:
    limits = Limits(max_pending_entries_per_shard=2)
    replica = ShardReplica(
        0, ShardSpec(), RocksKv(tmp_path / "kv"), Wal.open(tmp_path / "wal"), limits
    )
    try:
        await replica.new_term(1)
        leader_log = TermHistory([TermStart(1, 0)], INHERITED - 1)
        await replica.truncate(1, OLD_LEADER, leader_log)
        # Nothing committed yet: the follower holds the first two, not the rest.
        await replica.append_replicated(1, [_write(offset) for offset in range(INHERITED)], -1)
        assert [pending.offset for pending in replica.core.pending] == [0, 1]

        await lead_alone(replica, ME)

        # The term's first entry follows the inherited ones, all applied.
        assert replica.applied_offset == INHERITED
        keys = {KeyOrder.HIERARCHICAL.encode(f"/k/{offset}") for offset in range(INHERITED)}
        assert keys <= records(replica.kv).keys()
        # Its commit offset is at its own term's first entry (what the controller
        # reads to know the term committed: ShardStatus.commit_term).
        status = shard_status(replica)
        assert (status.term, status.commit_offset, status.commit_term) == (2, INHERITED, 2)
    finally:
        await replica.close()


def test_a_leader_elected_holding_part_of_its_log_applies_every_inherited_entry(
    tmp_path: Path,
) -> None:
    asyncio.run(_elected_with_a_gap(tmp_path))
