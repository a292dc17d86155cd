"""Nothing fenced a stale controller (hole 3 of issue 38): a storage pod now
remembers the highest controller epoch it has seen, durably, and refuses every
call that changes it (NewTerm above all) from an older controller with
FAILED_PRECONDITION / STALE_CONTROLLER_EPOCH, changing nothing. One pod in
process, real gRPC on loopback, real WAL and RocksDB."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.common.hashing import HashRange
from cairn.controller.actions import ActionFailed, Elect
from cairn.controller.executor import Executor
from cairn.controller.fencing import ControllerFenced
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import (
    ClusterStatus,
    NamespaceSpec,
    NodeRecord,
    ShardRecord,
    ShardState,
    default_spec,
)
from cairn.controller.observer import Observer
from cairn.controller.pods import PodClient
from cairn.controller.state.file_store import FileStateStore
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.config import NodeConfig
from cairn.storage.node import NodeServer

SHARD = 0
OLD_EPOCH, NEW_EPOCH = 1, 2
SPEC = rpb.ShardSpec(namespace="default")


async def _refused(call: Callable[[], Awaitable[Any]]) -> str:
    """The ErrorInfo reason of a call that must fail with FAILED_PRECONDITION."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call()
    error = raised.value
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info.reason


async def _status(stub: rpb_grpc.CoordinationStub, shard: int = SHARD) -> rpb.ShardStatus:
    answer = await stub.GetStatus(rpb.GetStatusRequest(shard=shard), timeout=5)
    (status,) = answer.shards
    return status


async def _scenario(tmp_path: Path) -> None:
    node = NodeServer(NodeConfig(data_dir=tmp_path / "pod"))
    me = await node.start()
    pod = rpb.Node(public_address=me.public_address, internal_address=me.internal_address)
    try:
        async with grpc.aio.insecure_channel(me.internal_address) as channel:
            stub = rpb_grpc.CoordinationStub(channel)
            # The newer controller fences the replica at term 7.
            await stub.NewTerm(
                rpb.NewTermRequest(shard=SHARD, term=7, spec=SPEC, controller_epoch=NEW_EPOCH),
                timeout=5,
            )
            before = await _status(stub)
            assert (before.term, before.role) == (7, rpb.FENCED)

            # The paused old controller comes back with its own, newer-looking term.
            for epoch in (OLD_EPOCH, 0):
                reason = await _refused(
                    lambda epoch=epoch: stub.NewTerm(
                        rpb.NewTermRequest(shard=SHARD, term=8, controller_epoch=epoch), timeout=5
                    )
                )
                assert reason == "STALE_CONTROLLER_EPOCH"
            after = await _status(stub)
            assert (after.term, after.role, after.head) == (7, rpb.FENCED, before.head)

            # Nor can it create a replica, make a leader, or move the shard map.
            reason = await _refused(
                lambda: stub.NewTerm(
                    rpb.NewTermRequest(shard=9, term=1, spec=SPEC, controller_epoch=OLD_EPOCH),
                    timeout=5,
                )
            )
            assert reason == "STALE_CONTROLLER_EPOCH"
            assert [r.shard_id for r in node.directory.replicas()] == [SHARD]
            reason = await _refused(
                lambda: stub.BecomeLeader(
                    rpb.BecomeLeaderRequest(
                        shard=SHARD, term=7, leader=pod, controller_epoch=OLD_EPOCH
                    ),
                    timeout=5,
                )
            )
            assert reason == "STALE_CONTROLLER_EPOCH"
            assert (await _status(stub)).role == rpb.FENCED
            assignments = pb.ShardAssignments()
            assignments.namespaces["default"].assignments.add(shard=SHARD, leader="elsewhere:1")
            reason = await _refused(
                lambda: stub.PushAssignments(
                    rpb.PushAssignmentsRequest(
                        assignments=assignments, version=99, controller_epoch=OLD_EPOCH
                    ),
                    timeout=5,
                )
            )
            assert reason == "STALE_CONTROLLER_EPOCH"

            # The newer controller makes it leader; the old one can neither change
            # its ensemble nor delete it.
            await stub.BecomeLeader(
                rpb.BecomeLeaderRequest(
                    shard=SHARD, term=7, leader=pod, controller_epoch=NEW_EPOCH
                ),
                timeout=5,
            )
            follower = rpb.Node(public_address="127.0.0.1:1", internal_address="127.0.0.1:2")
            for call in (
                lambda: stub.AddFollower(
                    rpb.AddFollowerRequest(
                        shard=SHARD, term=7, follower=follower, controller_epoch=OLD_EPOCH
                    ),
                    timeout=5,
                ),
                lambda: stub.RemoveFollower(
                    rpb.RemoveFollowerRequest(
                        shard=SHARD,
                        term=7,
                        follower_internal_address="127.0.0.1:2",
                        controller_epoch=OLD_EPOCH,
                    ),
                    timeout=5,
                ),
                lambda: stub.DeleteShard(
                    rpb.DeleteShardRequest(shard=SHARD, term=7, controller_epoch=OLD_EPOCH),
                    timeout=5,
                ),
            ):
                assert await _refused(call) == "STALE_CONTROLLER_EPOCH"
            leading = await _status(stub)
            assert (leading.term, leading.role, list(leading.followers)) == (7, rpb.LEADER, [])
    finally:
        await node.stop(grace_s=0.5)

    # The pod remembers the epoch across a restart: the old controller is still
    # refused, the newer one (and a newer still) is taken.
    node = NodeServer(NodeConfig(data_dir=tmp_path / "pod"))
    me = await node.start()
    try:
        async with grpc.aio.insecure_channel(me.internal_address) as channel:
            stub = rpb_grpc.CoordinationStub(channel)
            reason = await _refused(
                lambda: stub.NewTerm(
                    rpb.NewTermRequest(shard=SHARD, term=8, controller_epoch=OLD_EPOCH), timeout=5
                )
            )
            assert reason == "STALE_CONTROLLER_EPOCH"
            assert (await _status(stub)).term == 7
            await stub.NewTerm(
                rpb.NewTermRequest(shard=SHARD, term=8, controller_epoch=NEW_EPOCH), timeout=5
            )
            await stub.NewTerm(
                rpb.NewTermRequest(shard=SHARD, term=9, controller_epoch=NEW_EPOCH + 1), timeout=5
            )
            reason = await _refused(
                lambda: stub.NewTerm(
                    rpb.NewTermRequest(shard=SHARD, term=10, controller_epoch=NEW_EPOCH),
                    timeout=5,
                )
            )
            assert reason == "STALE_CONTROLLER_EPOCH"
            assert (await _status(stub)).term == 9
    finally:
        await node.stop(grace_s=0.5)


def test_a_pod_refuses_coordination_calls_of_a_stale_controller_and_changes_nothing(
    tmp_path: Path,
) -> None:
    asyncio.run(_scenario(tmp_path))


async def _legacy(tmp_path: Path) -> None:
    """A pod no controller with an epoch has reached takes calls without one (the
    test drivers and benchmarks that play the controller)."""
    node = NodeServer(NodeConfig(data_dir=tmp_path / "pod"))
    me = await node.start()
    try:
        async with grpc.aio.insecure_channel(me.internal_address) as channel:
            stub = rpb_grpc.CoordinationStub(channel)
            await stub.NewTerm(rpb.NewTermRequest(shard=SHARD, term=1, spec=SPEC), timeout=5)
            assert (await _status(stub)).term == 1
            assert not (tmp_path / "pod" / "controller-epoch").exists()
    finally:
        await node.stop(grace_s=0.5)


def test_a_pod_no_controller_epoch_reached_takes_calls_without_one(tmp_path: Path) -> None:
    asyncio.run(_legacy(tmp_path))


async def _controller_side(tmp_path: Path) -> None:
    """The controller's pod client reports a pod's refusal as ControllerFenced
    (the controller then stops acting), and sends its epoch with each call."""
    node = NodeServer(NodeConfig(data_dir=tmp_path / "pod"))
    me = await node.start()
    pods = PodClient(rpc_timeout_s=5)
    namespace = NamespaceSpec("default", shards=1, replication_factor=1)
    try:
        fenced = await pods.new_term(me.internal_address, SHARD, 3, namespace, NEW_EPOCH)
        assert fenced.head == (-1, -1)
        assert node.epochs.highest == NEW_EPOCH
        with pytest.raises(ControllerFenced) as fenced:
            await pods.new_term(me.internal_address, SHARD, 4, None, OLD_EPOCH)
        assert fenced.value.pod_epoch == NEW_EPOCH
        with pytest.raises(ControllerFenced):
            await pods.push_assignments(me.internal_address, pb.ShardAssignments(), 1, OLD_EPOCH)
        with pytest.raises(ControllerFenced):
            await pods.delete_shard(me.internal_address, SHARD, 3, OLD_EPOCH)
        (report,) = await pods.status(me.internal_address)
        assert report.term == 3
        # Other refusals stay gRPC errors for the executor to judge.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pods.new_term(me.internal_address, SHARD, 2, None, NEW_EPOCH)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await pods.close()
        await node.stop(grace_s=0.5)


def test_the_controller_learns_from_a_pod_that_it_was_fenced(tmp_path: Path) -> None:
    asyncio.run(_controller_side(tmp_path))


async def _state_recreated(tmp_path: Path) -> None:
    """The cluster state is recreated (its epochs start again at 1) while a pod
    keeps its data and its epoch 5: the controller's first call is refused, and
    since the state still holds the controller's own epoch it takes one past
    the pod's and its next try goes through, instead of stopping for good."""
    node = NodeServer(NodeConfig(data_dir=tmp_path / "pod"))
    me = await node.start()
    pods = PodClient(rpc_timeout_s=5)
    name = "cairn-storage-0"
    store = FileStateStore(tmp_path / "state")
    try:
        await pods.new_term(me.internal_address, SHARD, 3, NamespaceSpec("default", 1, 1), 5)
        created = await store.create(default_spec(shards=1, replication_factor=1, storage_pods=1))
        record = ShardRecord(
            "default", SHARD, HashRange(0, 0xFFFFFFFF), 3, ShardState.STEADY, name, (name,)
        )
        status = ClusterStatus(
            shards=(record,),
            nodes=(NodeRecord(name, me.public_address, me.internal_address),),
            next_shard_id=1,
        )
        keeper = StateKeeper(store, await store.write_status(status, created.version))
        assert await keeper.take_epoch() == 1
        observer = Observer(pods)
        executor = Executor(keeper, pods, observer)
        with pytest.raises(ActionFailed, match="retrying with epoch 6"):
            await executor.run(Elect(SHARD, "test"))
        assert keeper.epoch == 6
        assert not keeper.fenced.is_set()
        # The retry fences the replica (no live leader is known to this
        # observer, so the election itself goes no further).
        with pytest.raises(ActionFailed, match="no safe live leader"):
            await executor.run(Elect(SHARD, "test"))
        assert node.epochs.highest == 6
        recorded = keeper.state.status.shard(SHARD)
        assert recorded is not None
        (report,) = await pods.status(me.internal_address)
        assert report.term == recorded.term == 5
        await executor.close()
        await observer.close()
    finally:
        await store.close()
        await pods.close()
        await node.stop(grace_s=0.5)


def test_a_controller_outruns_a_pod_epoch_its_recreated_state_never_held(
    tmp_path: Path,
) -> None:
    asyncio.run(_state_recreated(tmp_path))
