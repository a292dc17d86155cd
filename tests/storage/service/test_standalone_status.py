"""The standalone server's read-only Coordination.GetStatus and the per-shard request
counters it reports: a batch of N operations is one request of N operations, and
nothing but GetStatus of the Coordination service is served there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.config import Limits, NamespaceConfig, StandaloneConfig
from cairn.storage.standalone import StandaloneServer

BATCH_PUTS = 25
SHARDS = 2


def _counters(status: rpb.ShardStatus) -> tuple[int, int, int, int]:
    return (
        status.write_requests,
        status.write_operations,
        status.read_requests,
        status.read_gets,
    )


async def _with_server(
    tmp_path: Path, scenario: Callable[[grpc.aio.Channel], Awaitable[None]]
) -> None:
    config = StandaloneConfig(
        data_dir=tmp_path / "data",
        namespaces=(NamespaceConfig(initial_shard_count=SHARDS),),
    )
    server = StandaloneServer(config)
    address = await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            await scenario(channel)
    finally:
        await server.stop(grace_s=1.0)


async def _status(channel: grpc.aio.Channel, shard: int) -> rpb.ShardStatus:
    stub = rpb_grpc.CoordinationStub(channel)
    response = await stub.GetStatus(rpb.GetStatusRequest(shard=shard))
    assert [s.shard for s in response.shards] == [shard]
    return response.shards[0]


async def _counting_scenario(channel: grpc.aio.Channel) -> None:
    client = pb_grpc.OxiaClientStub(channel)
    coordination = rpb_grpc.CoordinationStub(channel)

    everything = await coordination.GetStatus(rpb.GetStatusRequest())
    assert [s.shard for s in everything.shards] == list(range(SHARDS))
    assert everything.node.public_address
    for status in everything.shards:
        assert status.role == rpb.LEADER
        assert _counters(status) == (0, 0, 0, 0)

    # One unary Write with BATCH_PUTS puts: one request, BATCH_PUTS operations.
    puts = [pb.PutRequest(key=f"/k/{i}", value=b"v") for i in range(BATCH_PUTS)]
    response = await client.Write(pb.WriteRequest(shard=0, puts=puts))
    assert len(response.puts) == BATCH_PUTS
    assert _counters(await _status(channel, 0)) == (1, BATCH_PUTS, 0, 0)

    # A streamed request mixing deletes and a delete range counts the same way;
    # puts with options other than (key, value, expected version) take the general
    # path on the server and still count one operation each.
    async def one_request() -> AsyncIterator[pb.WriteRequest]:
        yield pb.WriteRequest(
            shard=0,
            puts=[pb.PutRequest(key="/k/p", value=b"v", partition_key="p")],
            deletes=[pb.DeleteRequest(key="/k/0"), pb.DeleteRequest(key="/k/1")],
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/z/", end_exclusive="/z//")],
        )

    stream = client.WriteStream(one_request(), metadata=(("shard-id", "0"),))
    answers = [answer async for answer in stream]
    assert len(answers) == 1
    assert _counters(await _status(channel, 0)) == (2, BATCH_PUTS + 4, 0, 0)

    # One Read with several gets: one request, that many gets.
    gets = [pb.GetRequest(key=f"/k/{i}") for i in range(7)]
    chunks = [chunk async for chunk in client.Read(pb.ReadRequest(shard=0, gets=gets))]
    assert sum(len(chunk.gets) for chunk in chunks) == 7
    assert _counters(await _status(channel, 0)) == (2, BATCH_PUTS + 4, 1, 7)

    # A refused request is not counted.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.Write(
            pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="k" * (Limits().max_key_bytes + 1))])
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _counters(await _status(channel, 0)) == (2, BATCH_PUTS + 4, 1, 7)

    # The other shard saw nothing.
    assert _counters(await _status(channel, 1)) == (0, 0, 0, 0)

    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await coordination.GetStatus(rpb.GetStatusRequest(shard=99))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_get_status_counts_a_batch_as_one_request_of_n_operations(tmp_path: Path) -> None:
    asyncio.run(_with_server(tmp_path, _counting_scenario))


async def _control_refused_scenario(channel: grpc.aio.Channel) -> None:
    coordination = rpb_grpc.CoordinationStub(channel)
    calls = [
        coordination.NewTerm(rpb.NewTermRequest(shard=0, term=100)),
        coordination.BecomeLeader(rpb.BecomeLeaderRequest(shard=0, term=100)),
        coordination.AddFollower(rpb.AddFollowerRequest(shard=0, term=100)),
        coordination.RemoveFollower(rpb.RemoveFollowerRequest(shard=0, term=100)),
        coordination.DeleteShard(rpb.DeleteShardRequest(shard=0, term=100)),
        coordination.PushAssignments(rpb.PushAssignmentsRequest(version=100)),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # Nothing changed: the shard still leads its first term and takes writes.
    status = await _status(channel, 0)
    assert status.role == rpb.LEADER
    assert status.term < 100
    await pb_grpc.OxiaClientStub(channel).Write(
        pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="/after", value=b"v")])
    )


def test_standalone_refuses_every_coordination_call_but_get_status(tmp_path: Path) -> None:
    asyncio.run(_with_server(tmp_path, _control_refused_scenario))
