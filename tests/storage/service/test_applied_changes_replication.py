"""Followers write their leader's applied changes instead of applying entries
themselves (core/replication/applied_changes.py): two storage nodes in process (real
gRPC on loopback, real RocksDB and WALs), a leader and a follower, client writes
of every kind the apply step handles differently. The follower must end with the
leader's KV byte for byte, whether it used the leader's changes or, when they do
not fit its log (another term at the group's end) or cannot be read, its own
apply step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.config import NodeConfig
from cairn.storage.core.meta import LOCAL_META_KEYS
from cairn.storage.core.replication.applied_changes import KeptChanges
from cairn.storage.kv import Column
from cairn.storage.node import NodeServer
from cairn.storage.shard import ShardReplica
from support.polling import eventually

SHARD = 0
TERM = 1


def _node(address: tuple[str, str]) -> rpb.Node:
    return rpb.Node(public_address=address[0], internal_address=address[1])


def _kv_contents(replica: ShardReplica) -> dict[Column, list[tuple[bytes, bytes]]]:
    """The shard's state: both columns, without what names the replica itself
    (its incarnation)."""
    return {
        column: [
            (key, value)
            for key, value in replica.kv.scan(column, b"", None)
            if column is not Column.META or key not in LOCAL_META_KEYS
        ]
        for column in Column
    }


def _plain_writes() -> list[pb.WriteRequest]:
    """Plain puts, sent together so that the leader folds them."""
    return [
        pb.WriteRequest(
            shard=SHARD,
            puts=[pb.PutRequest(key=f"/a/{i}/{j}", value=b"v%d" % i) for j in range(20)],
        )
        for i in range(30)
    ]


def _other_writes() -> list[pb.WriteRequest]:
    """Then one at a time: an overwrite, a conditional put that fails, a delete, a
    delete range, and puts that take the general path (a partition key, a
    sequence key)."""
    return [
        pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/a/0/0", value=b"again")]),
        pb.WriteRequest(
            shard=SHARD,
            puts=[pb.PutRequest(key="/a/1/0", value=b"no", expected_version_id=-1)],
        ),
        pb.WriteRequest(shard=SHARD, deletes=[pb.DeleteRequest(key="/a/2/3")]),
        pb.WriteRequest(
            shard=SHARD,
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/a/3/", end_exclusive="/a/4/")],
        ),
        pb.WriteRequest(
            shard=SHARD,
            puts=[pb.PutRequest(key="/p/x", value=b"p", partition_key="group")],
        ),
        pb.WriteRequest(
            shard=SHARD,
            puts=[
                pb.PutRequest(key="/seq", value=b"s", partition_key="seq", sequence_key_delta=[1])
            ],
        ),
    ]


async def _replicate_and_compare(tmp_path: Path) -> tuple[ShardReplica, ShardReplica]:
    nodes = [NodeServer(NodeConfig(data_dir=tmp_path / name)) for name in ("leader", "follower")]
    members = [await node.start() for node in nodes]
    addresses = [(member.public_address, member.internal_address) for member in members]
    try:
        spec = rpb.ShardSpec(namespace="default")
        for member in members:
            async with grpc.aio.insecure_channel(member.internal_address) as channel:
                await rpb_grpc.CoordinationStub(channel).NewTerm(
                    rpb.NewTermRequest(shard=SHARD, term=TERM, spec=spec), timeout=10
                )
        async with grpc.aio.insecure_channel(members[0].internal_address) as channel:
            await rpb_grpc.CoordinationStub(channel).BecomeLeader(
                rpb.BecomeLeaderRequest(
                    shard=SHARD,
                    term=TERM,
                    leader=_node(addresses[0]),
                    followers=[_node(addresses[1])],
                ),
                timeout=10,
            )
        leader = nodes[0].directory.replica(SHARD)
        follower = nodes[1].directory.replica(SHARD)
        await leader.wait_serving(10)
        async with grpc.aio.insecure_channel(members[0].public_address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            answers = await asyncio.gather(
                *(stub.Write(request, timeout=30) for request in _plain_writes())
            )
            for request in _other_writes():
                answers.append(await stub.Write(request, timeout=30))
        statuses = {put.status for answer in answers for put in answer.puts}
        assert statuses == {pb.OK, pb.UNEXPECTED_VERSION_ID}
        caught_up = await eventually(
            lambda: follower.applied_offset == leader.applied_offset == leader.commit_offset,
            timeout_s=30,
        )
        assert caught_up, (
            f"follower applied {follower.applied_offset}, leader {leader.applied_offset}"
        )
        assert _kv_contents(follower) == _kv_contents(leader)
        # What the follower's stream carried, the leader no longer keeps.
        assert await eventually(lambda: len(leader.changes_for_followers) == 0, timeout_s=10)
        return leader, follower
    finally:
        for node in nodes:
            await node.stop(grace_s=0.5)


def test_a_follower_writes_the_leaders_changes_and_ends_with_its_kv(tmp_path: Path) -> None:
    _, follower = asyncio.run(_replicate_and_compare(tmp_path))
    # The changes were used (all but the entries applied before they could be).
    assert follower.entries_applied_from_leader_changes > 0


@pytest.mark.parametrize("damage", ["another term", "cut short"])
def test_changes_that_do_not_fit_the_followers_log_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """The leader's changes, marked with another term at their last entry (as
    changes made for other entries would be) or cut short: the follower applies
    its entries itself and still ends with the leader's KV."""
    real_record = KeptChanges.record

    def damaged(self: KeptChanges, first: int, last: int, term: int, changes: bytes) -> None:
        if damage == "another term":
            real_record(self, first, last, term + 1, changes)
        else:
            real_record(self, first, last, term, changes[:-1])

    monkeypatch.setattr(KeptChanges, "record", damaged)
    _, follower = asyncio.run(_replicate_and_compare(tmp_path))
    assert follower.entries_applied_from_leader_changes == 0
