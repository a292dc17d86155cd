"""The controller's calls into a storage pod: fencing, leadership, ensemble
changes, status, deletion, and the shard map to serve to clients.

Every call that changes the pod first passes the controller epoch fence (see
cairn.storage.core.controller_epoch): a call from a controller older than one
already seen is refused before anything else is looked at, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import grpc

from cairn.common.errors import CairnError, InvalidRequest
from cairn.common.hashing import HashRange
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import ShardSpec
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member
from cairn.storage.directory import NamespaceLayout, ShardDirectory, ShardPlacement
from cairn.storage.ports import Peers
from cairn.storage.replication.leader import ReplicatingLeader
from cairn.storage.replication.wire import (
    entry_id_message,
    key_order_of,
    member_of,
    node_message,
    spec_of,
)
from cairn.storage.rpc.status import abort
from cairn.storage.shard import ShardReplica
from cairn.storage.shard_status import shard_status


class ReplicaHost(Protocol):
    """What the service needs of the pod (node.py)."""

    me: Member
    directory: ShardDirectory

    @property
    def peers(self) -> Peers: ...

    @property
    def clock_ms(self) -> Callable[[], int]:
        """The pod's monotonic clock (its leaders' leases run on it)."""
        ...

    def admit_controller(self, epoch: int) -> None:
        """Raise StaleControllerEpoch for a call of a superseded controller."""
        ...

    def replica_for(self, shard_id: int, spec: ShardSpec | None) -> ShardReplica: ...

    async def delete_replica(self, shard_id: int) -> None: ...


def layouts_of(assignments: pb.ShardAssignments) -> list[NamespaceLayout]:
    layouts = []
    for name, namespace in assignments.namespaces.items():
        order = key_order_of(namespace.key_sorting)
        placements = []
        for assignment in namespace.assignments:
            hash_range = assignment.int32_hash_range
            try:
                bounds = HashRange(hash_range.min_hash_inclusive, hash_range.max_hash_inclusive)
            except ValueError as error:
                raise InvalidRequest(f"namespace {name!r}: {error}") from None
            placements.append(ShardPlacement(assignment.shard, bounds, assignment.leader))
        layouts.append(NamespaceLayout(name, order, tuple(placements)))
    return layouts


class CoordinationService:
    def __init__(self, host: ReplicaHost) -> None:
        self.host = host

    async def new_term(
        self, request: rpb.NewTermRequest, context: grpc.aio.ServicerContext
    ) -> rpb.NewTermResponse:
        try:
            self.host.admit_controller(request.controller_epoch)
            spec = spec_of(request.spec) if request.HasField("spec") else None
            replica = self.host.replica_for(request.shard, spec)
            head, commit_offset = await replica.new_term(request.term)
        except CairnError as error:
            await abort(context, error)
        return rpb.NewTermResponse(
            head=entry_id_message(head),
            commit_offset=commit_offset,
            incarnation=replica.incarnation,
        )

    async def become_leader(
        self, request: rpb.BecomeLeaderRequest, context: grpc.aio.ServicerContext
    ) -> rpb.BecomeLeaderResponse:
        host = self.host
        try:
            host.admit_controller(request.controller_epoch)
            replica = host.directory.replica(request.shard)
            followers = [member_of(node) for node in request.followers]
            incarnations = {
                address: incarnation
                for address, incarnation in request.follower_incarnations.items()
                if incarnation
            }
            term = request.term

            def make_leader(shard: ShardReplica, core: LeaderCore) -> ReplicatingLeader:
                return ReplicatingLeader(
                    shard, core, host.peers, shard.replication, clock_ms=host.clock_ms
                )

            term_start = await replica.become_leader(
                term, host.me, make_leader, followers, incarnations
            )
        except (CairnError, ValueError) as error:
            await abort(context, _as_cairn_error(error))
        return rpb.BecomeLeaderResponse(term_start=entry_id_message(term_start))

    async def add_follower(
        self, request: rpb.AddFollowerRequest, context: grpc.aio.ServicerContext
    ) -> rpb.AddFollowerResponse:
        try:
            self.host.admit_controller(request.controller_epoch)
            leader = self._leading(request.shard, request.term)
            leader.add_follower(member_of(request.follower))
        except (CairnError, ValueError) as error:
            await abort(context, _as_cairn_error(error))
        return rpb.AddFollowerResponse()

    async def remove_follower(
        self, request: rpb.RemoveFollowerRequest, context: grpc.aio.ServicerContext
    ) -> rpb.RemoveFollowerResponse:
        try:
            self.host.admit_controller(request.controller_epoch)
            leader = self._leading(request.shard, request.term)
            await leader.remove_follower(request.follower_internal_address)
        except (CairnError, ValueError) as error:
            await abort(context, _as_cairn_error(error))
        return rpb.RemoveFollowerResponse()

    def _leading(self, shard_id: int, term: int) -> ReplicatingLeader:
        replica = self.host.directory.replica(shard_id)
        replica.core.check_leading(term)
        leader = replica.leader_role
        assert isinstance(leader, ReplicatingLeader)
        return leader

    async def get_status(
        self, request: rpb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> rpb.GetStatusResponse:
        try:
            if request.HasField("shard"):
                replicas = [self.host.directory.replica(request.shard)]
            else:
                replicas = sorted(self.host.directory.replicas(), key=lambda r: r.shard_id)
        except CairnError as error:
            await abort(context, error)
        return rpb.GetStatusResponse(
            shards=[shard_status(replica) for replica in replicas], node=node_message(self.host.me)
        )

    async def get_state_digest(
        self, request: rpb.GetStateDigestRequest, context: grpc.aio.ServicerContext
    ) -> rpb.GetStateDigestResponse:
        if request.timeout_ms <= 0:
            await abort(context, InvalidRequest("timeout_ms must be positive"))
        try:
            replica = self.host.directory.replica(request.shard)
            digest = await replica.state_digest_at(request.offset, request.timeout_ms / 1000)
        except CairnError as error:
            await abort(context, error)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"shard {request.shard} did not apply up to {request.offset} in time",
            )
        return rpb.GetStateDigestResponse(
            shard=request.shard,
            offset=request.offset,
            records=digest.records,
            sha256=digest.sha256,
            node=node_message(self.host.me),
        )

    async def delete_shard(
        self, request: rpb.DeleteShardRequest, context: grpc.aio.ServicerContext
    ) -> rpb.DeleteShardResponse:
        try:
            self.host.admit_controller(request.controller_epoch)
            self.host.directory.replica(request.shard).core.check_not_older(request.term)
            await self.host.delete_replica(request.shard)
        except CairnError as error:
            await abort(context, error)
        return rpb.DeleteShardResponse()

    async def push_assignments(
        self, request: rpb.PushAssignmentsRequest, context: grpc.aio.ServicerContext
    ) -> rpb.PushAssignmentsResponse:
        try:
            self.host.admit_controller(request.controller_epoch)
            layouts = layouts_of(request.assignments)
            await self.host.directory.set_layouts(layouts, request.version)
        except CairnError as error:
            await abort(context, error)
        return rpb.PushAssignmentsResponse()


def _as_cairn_error(error: Exception) -> CairnError:
    if isinstance(error, CairnError):
        return error
    return InvalidRequest(str(error))


def coordination_handlers(service: CoordinationService) -> grpc.GenericRpcHandler:
    def unary(behavior: object, request_type: type, response_type: type) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=request_type.FromString,  # type: ignore[attr-defined]
            response_serializer=response_type.SerializeToString,  # type: ignore[attr-defined]
        )

    methods = {
        "NewTerm": unary(service.new_term, rpb.NewTermRequest, rpb.NewTermResponse),
        "BecomeLeader": unary(
            service.become_leader, rpb.BecomeLeaderRequest, rpb.BecomeLeaderResponse
        ),
        "AddFollower": unary(service.add_follower, rpb.AddFollowerRequest, rpb.AddFollowerResponse),
        "RemoveFollower": unary(
            service.remove_follower, rpb.RemoveFollowerRequest, rpb.RemoveFollowerResponse
        ),
        "GetStatus": unary(service.get_status, rpb.GetStatusRequest, rpb.GetStatusResponse),
        "DeleteShard": unary(service.delete_shard, rpb.DeleteShardRequest, rpb.DeleteShardResponse),
        "PushAssignments": unary(
            service.push_assignments, rpb.PushAssignmentsRequest, rpb.PushAssignmentsResponse
        ),
        "GetStateDigest": unary(
            service.get_state_digest, rpb.GetStateDigestRequest, rpb.GetStateDigestResponse
        ),
    }
    return grpc.method_handlers_generic_handler("cairn.replication.v1.Coordination", methods)
