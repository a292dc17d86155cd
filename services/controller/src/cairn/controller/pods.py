"""The controller's calls into storage pods (the Coordination and gRPC Health
services on their internal port). Thin: build a request, call with a deadline,
convert the answer. Errors are grpc.aio.AioRpcError; callers decide. One is
converted here: a pod refusing a call that changes it because it has seen a
newer controller epoch (STALE_CONTROLLER_EPOCH) raises ControllerFenced."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.common.errors import StaleControllerEpoch
from cairn.common.heartbeat import ReplicaReport, replica_report_of
from cairn.common.keyorder import KeyOrder
from cairn.common.tls import ChannelCache, TlsSource
from cairn.controller.fencing import ControllerFenced
from cairn.controller.model import NamespaceSpec
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

# Channels kept open at once (one per pod; far above any cluster we run).
MAX_CHANNELS = 4096
# A pod restarted on its address is dialled again within a second (gRPC's
# default backoff grows to two minutes); keepalives notice a silent peer.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]
_DETAILS_KEY = "grpc-status-details-bin"
T = TypeVar("T")


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo a pod's error carries (an empty one if none)."""
    info = error_details_pb2.ErrorInfo()
    for key, value in error.trailing_metadata() or ():
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return info
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                detail.Unpack(info)
                return info
    return info


async def _changing(call: Awaitable[T]) -> T:
    """A call that changes a pod: a stale epoch is ControllerFenced."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        info = error_info(error)
        if info.reason == StaleControllerEpoch.reason:
            seen = info.metadata.get("epoch", "")
            raise ControllerFenced(
                f"a storage pod says: {error.details()}",
                pod_epoch=int(seen) if seen.isdigit() else None,
            ) from None
        raise


@dataclass(frozen=True)
class Fenced:
    """A replica's answer to NewTerm."""

    head: tuple[int, int]
    # The incarnation of its data (0: a pod that does not report one).
    incarnation: int = 0


@dataclass(frozen=True)
class PodAddress:
    public: str
    internal: str

    def message(self) -> rpb.Node:
        return rpb.Node(public_address=self.public, internal_address=self.internal)


def spec_message(namespace: NamespaceSpec) -> rpb.ShardSpec:
    return rpb.ShardSpec(
        namespace=namespace.name,
        key_sorting=(
            pb.KEY_SORTING_NATURAL
            if namespace.key_order is KeyOrder.NATURAL
            else pb.KEY_SORTING_HIERARCHICAL
        ),
        notifications_disabled=not namespace.notifications,
    )


class PodCalls(Protocol):
    """The calls the executor makes into storage pods (PodClient over gRPC; the
    simulation's over its simulated network). Failures are grpc.aio.AioRpcError,
    and ControllerFenced for a pod that has seen a newer controller epoch."""

    async def new_term(
        self, address: str, shard: int, term: int, namespace: NamespaceSpec | None, epoch: int
    ) -> Fenced: ...

    async def become_leader(
        self,
        leader: PodAddress,
        shard: int,
        term: int,
        followers: Sequence[PodAddress],
        epoch: int,
        incarnations: Mapping[str, int] | None = None,
    ) -> None: ...

    async def add_follower(
        self, leader_address: str, shard: int, term: int, follower: PodAddress, epoch: int
    ) -> None: ...

    async def remove_follower(
        self, leader_address: str, shard: int, term: int, follower_internal: str, epoch: int
    ) -> None: ...

    async def delete_shard(self, address: str, shard: int, term: int, epoch: int) -> None: ...

    async def replica_status(self, address: str, shard: int) -> ReplicaReport: ...

    async def push_assignments(
        self, address: str, assignments: pb.ShardAssignments, version: int, epoch: int
    ) -> None: ...


class Channels(Protocol):
    """A channel to each pod, by address, reused (ChannelCache over the network;
    the simulation's over its simulated one)."""

    def __len__(self) -> int: ...

    def get(self, address: str) -> grpc.aio.Channel: ...

    async def close(self) -> None: ...


class PodClient:
    """`tls`: the controller's certificate directory; pods' internal ports are
    mutual TLS and accept coordination only from the controller's identity.
    None: plaintext (a cluster run with --insecure). `channels` replaces the
    channels made from `tls`."""

    def __init__(
        self,
        rpc_timeout_s: float = 5.0,
        tls: TlsSource | None = None,
        channels: Channels | None = None,
    ) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self._channels = channels if channels is not None else ChannelCache(tls, CHANNEL_OPTIONS)

    def _channel(self, address: str) -> grpc.aio.Channel:
        if len(self._channels) >= MAX_CHANNELS:
            raise RuntimeError(f"more than {MAX_CHANNELS} pod channels")
        return self._channels.get(address)

    def _coordination(self, address: str) -> rpb_grpc.CoordinationStub:
        return rpb_grpc.CoordinationStub(self._channel(address))

    # Calls that change a pod carry the controller's `epoch` (its fencing token).

    async def new_term(
        self, address: str, shard: int, term: int, namespace: NamespaceSpec | None, epoch: int
    ) -> Fenced:
        """Fence the replica; its durable head and incarnation. With `namespace`,
        a missing replica is created; without, a pod that lacks it answers
        NOT_FOUND."""
        request = rpb.NewTermRequest(shard=shard, term=term, controller_epoch=epoch)
        if namespace is not None:
            request.spec.CopyFrom(spec_message(namespace))
        answer = await _changing(
            self._coordination(address).NewTerm(request, timeout=self.rpc_timeout_s)
        )
        return Fenced((answer.head.term, answer.head.offset), answer.incarnation)

    async def become_leader(
        self,
        leader: PodAddress,
        shard: int,
        term: int,
        followers: Sequence[PodAddress],
        epoch: int,
        incarnations: Mapping[str, int] | None = None,
    ) -> None:
        """`incarnations`: the recorded incarnation of followers' data, by
        internal address."""
        await _changing(
            self._coordination(leader.internal).BecomeLeader(
                rpb.BecomeLeaderRequest(
                    shard=shard,
                    term=term,
                    leader=leader.message(),
                    followers=[follower.message() for follower in followers],
                    controller_epoch=epoch,
                    follower_incarnations=dict(incarnations or {}),
                ),
                timeout=self.rpc_timeout_s,
            )
        )

    async def add_follower(
        self, leader_address: str, shard: int, term: int, follower: PodAddress, epoch: int
    ) -> None:
        await _changing(
            self._coordination(leader_address).AddFollower(
                rpb.AddFollowerRequest(
                    shard=shard, term=term, follower=follower.message(), controller_epoch=epoch
                ),
                timeout=self.rpc_timeout_s,
            )
        )

    async def remove_follower(
        self, leader_address: str, shard: int, term: int, follower_internal: str, epoch: int
    ) -> None:
        await _changing(
            self._coordination(leader_address).RemoveFollower(
                rpb.RemoveFollowerRequest(
                    shard=shard,
                    term=term,
                    follower_internal_address=follower_internal,
                    controller_epoch=epoch,
                ),
                timeout=self.rpc_timeout_s,
            )
        )

    async def delete_shard(self, address: str, shard: int, term: int, epoch: int) -> None:
        await _changing(
            self._coordination(address).DeleteShard(
                rpb.DeleteShardRequest(shard=shard, term=term, controller_epoch=epoch),
                timeout=self.rpc_timeout_s,
            )
        )

    async def status(self, address: str, timeout_s: float | None = None) -> list[ReplicaReport]:
        answer = await self._coordination(address).GetStatus(
            rpb.GetStatusRequest(), timeout=timeout_s or self.rpc_timeout_s
        )
        return [replica_report_of(shard) for shard in answer.shards]

    async def replica_status(self, address: str, shard: int) -> ReplicaReport:
        answer = await self._coordination(address).GetStatus(
            rpb.GetStatusRequest(shard=shard), timeout=self.rpc_timeout_s
        )
        return replica_report_of(answer.shards[0])

    async def push_assignments(
        self, address: str, assignments: pb.ShardAssignments, version: int, epoch: int
    ) -> None:
        await _changing(
            self._coordination(address).PushAssignments(
                rpb.PushAssignmentsRequest(
                    assignments=assignments, version=version, controller_epoch=epoch
                ),
                timeout=self.rpc_timeout_s,
            )
        )

    async def watch_health(self, address: str) -> AsyncIterator[bool]:
        """Whether the pod serves, at each change; ends (or raises) when the
        connection breaks, which is how a crash shows at once."""
        stub = health_pb2_grpc.HealthStub(self._channel(address))
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        try:
            async for answer in call:
                yield answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            call.cancel()

    async def close(self) -> None:
        await self._channels.close()
