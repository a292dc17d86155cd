"""Replication to a follower outlives a failure nobody planned for: two storage
nodes in process (real gRPC on loopback, real RocksDB and WALs), a leader and a
follower, and the leader's first read of its log for that follower failing
with an error the sender does not expect. The sender must start its session
over, not end silently while the leader's status still calls the follower
streaming (which is how a follower once stayed empty for good, and the
replication factor change waiting for it never finished)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.config import NodeConfig
from cairn.storage.core.replication.replica import Member
from cairn.storage.node import NodeServer
from cairn.storage.wal import WalCorruptionError
from support.polling import eventually

SHARD = 0
TERM = 1
WRITES = 20


def _node(member: Member) -> rpb.Node:
    return rpb.Node(public_address=member.public_address, internal_address=member.internal_address)


def _put(key: str) -> tuple[bytes, pb.WriteRequest]:
    request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key=key, value=b"v")])
    return request.SerializeToString(), request


async def _follower_of(stub: rpb_grpc.CoordinationStub) -> rpb.FollowerStatus:
    answer = await stub.GetStatus(rpb.GetStatusRequest(shard=SHARD), timeout=5)
    (follower,) = answer.shards[0].followers
    return follower


async def _caught_up_after_a_failed_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [NodeServer(NodeConfig(data_dir=tmp_path / name)) for name in ("leader", "follower")]
    leader_member, follower_member = [await node.start() for node in nodes]
    channel = grpc.aio.insecure_channel(leader_member.internal_address)
    try:
        spec = rpb.ShardSpec(namespace="default")
        for member in (leader_member, follower_member):
            async with grpc.aio.insecure_channel(member.internal_address) as each:
                await rpb_grpc.CoordinationStub(each).NewTerm(
                    rpb.NewTermRequest(shard=SHARD, term=TERM, spec=spec), timeout=10
                )
        leader = nodes[0].directory.replica(SHARD)
        follower = nodes[1].directory.replica(SHARD)
        failures: list[int] = []
        real_entries = leader.entries

        def failing_once(first_offset: int, last_offset: int, max_bytes: int) -> object:
            if not failures:
                failures.append(first_offset)
                raise WalCorruptionError("injected: a read of the log failed")
            return real_entries(first_offset, last_offset, max_bytes)

        monkeypatch.setattr(leader, "entries", failing_once)
        stub = rpb_grpc.CoordinationStub(channel)
        await stub.BecomeLeader(
            rpb.BecomeLeaderRequest(
                shard=SHARD,
                term=TERM,
                leader=_node(leader_member),
                followers=[_node(follower_member)],
            ),
            timeout=10,
        )
        for index in range(WRITES):
            await asyncio.wait_for(leader.write(*_put(f"/k/{index}")), 30)
        # Every write committed with the follower's acknowledgement after the
        # failed read: the session started over and streamed.
        assert failures
        caught_up = await eventually(
            lambda: follower.applied_offset >= leader.applied_offset, timeout_s=30
        )
        assert caught_up, (
            f"follower applied {follower.applied_offset}, leader {leader.applied_offset}"
        )
        status = await _follower_of(stub)
        assert status.state == "streaming"
        assert status.voting
        assert status.acked_offset >= leader.log.last_offset
    finally:
        await channel.close()
        for node in nodes:
            await node.stop(grace_s=0.5)


def test_a_failed_read_of_the_log_restarts_the_session_and_the_follower_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_caught_up_after_a_failed_read(tmp_path, monkeypatch))
