"""A test driver that plays the controller over the real coordination API:
fences, elects the highest head among a majority, forms ensembles, pushes the
shard map. Synchronous gRPC, for tests.

It plays one controller of epoch `epoch` (1 unless told): every call that
changes a pod carries it, so pods it has reached refuse calls without one (epoch
0) and calls of an older driver, as they would a superseded controller's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from cairn.common.hashing import split_hash_space
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from support.processes import NodeProcess

RPC_TIMEOUT_S = 5.0


def node_message(node: NodeProcess) -> rpb.Node:
    return rpb.Node(public_address=node.address, internal_address=node.internal_address)


@dataclass
class ShardState:
    shard: int
    members: list[NodeProcess]
    term: int = 0
    leader: NodeProcess | None = None
    elections: list[float] = field(default_factory=list)


class Driver:
    def __init__(
        self,
        namespace: str = "default",
        epoch: int = 1,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """`credentials`: mutual TLS (the controller's certificate) for pods whose
        internal port requires it; None: plaintext."""
        self.credentials = credentials
        self.namespace = namespace
        self.epoch = epoch
        self.shards: dict[int, ShardState] = {}
        self._channels: dict[str, grpc.Channel] = {}
        self._map_version = 0

    def stub(self, node: NodeProcess) -> rpb_grpc.CoordinationStub:
        channel = self._channels.get(node.internal_address)
        if channel is None:
            channel = (
                grpc.insecure_channel(node.internal_address)
                if self.credentials is None
                else grpc.secure_channel(node.internal_address, self.credentials)
            )
            self._channels[node.internal_address] = channel
        return rpb_grpc.CoordinationStub(channel)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    # -- elections -------------------------------------------------------------------

    def fence(self, state: ShardState, term: int) -> dict[int, rpb.NewTermResponse]:
        """NewTerm to every member; the answers of those that answered, by index."""
        spec = rpb.ShardSpec(namespace=self.namespace)
        answers: dict[int, rpb.NewTermResponse] = {}
        for index, node in enumerate(state.members):
            try:
                answers[index] = self.stub(node).NewTerm(
                    rpb.NewTermRequest(
                        shard=state.shard, term=term, spec=spec, controller_epoch=self.epoch
                    ),
                    timeout=RPC_TIMEOUT_S,
                )
            except grpc.RpcError:
                continue
        return answers

    def elect(self, shard: int, members: Sequence[NodeProcess] | None = None) -> NodeProcess:
        """Fence a majority, make the one with the highest head leader of the others.
        Retries (with a new term) until a majority answers."""
        state = self.shards.get(shard)
        if state is None:
            assert members is not None
            state = self.shards[shard] = ShardState(shard, list(members))
        elif members is not None:
            state.members = list(members)
        deadline = time.monotonic() + 60
        while True:
            state.term += 1
            answers = self.fence(state, state.term)
            if len(answers) * 2 > len(state.members):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"shard {shard}: no majority answered NewTerm")
            time.sleep(0.2)
        best = max(answers, key=lambda i: (answers[i].head.term, answers[i].head.offset))
        leader = state.members[best]
        followers = [node_message(n) for i, n in enumerate(state.members) if i != best]
        self.stub(leader).BecomeLeader(
            rpb.BecomeLeaderRequest(
                shard=shard,
                term=state.term,
                leader=node_message(leader),
                followers=followers,
                controller_epoch=self.epoch,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        state.leader = leader
        return leader

    def remove_follower(self, shard: int, node: NodeProcess) -> None:
        state = self.shards[shard]
        assert state.leader is not None
        self.stub(state.leader).RemoveFollower(
            rpb.RemoveFollowerRequest(
                shard=shard,
                term=state.term,
                follower_internal_address=node.internal_address,
                controller_epoch=self.epoch,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        state.members.remove(node)

    def add_follower(self, shard: int, node: NodeProcess) -> None:
        """Fence the node at the current term (creating its replica), then tell the
        leader to add it."""
        state = self.shards[shard]
        assert state.leader is not None
        self.stub(node).NewTerm(
            rpb.NewTermRequest(
                shard=shard,
                term=state.term,
                spec=rpb.ShardSpec(namespace=self.namespace),
                controller_epoch=self.epoch,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        self.stub(state.leader).AddFollower(
            rpb.AddFollowerRequest(
                shard=shard,
                term=state.term,
                follower=node_message(node),
                controller_epoch=self.epoch,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        state.members.append(node)

    def push_map(self, nodes: Sequence[NodeProcess]) -> None:
        """Tell every reachable node the shard map (ids in order split the hash space)."""
        self._map_version += 1
        ids = sorted(self.shards)
        assignments = pb.ShardAssignments()
        namespace = assignments.namespaces[self.namespace]
        namespace.shard_key_router = pb.XXHASH3
        for shard, bounds in zip(ids, split_hash_space(len(ids)), strict=True):
            leader = self.shards[shard].leader
            assert leader is not None
            entry = namespace.assignments.add(shard=shard, leader=leader.address)
            entry.int32_hash_range.min_hash_inclusive = bounds.min_inclusive
            entry.int32_hash_range.max_hash_inclusive = bounds.max_inclusive
        for node in nodes:
            try:
                self.stub(node).PushAssignments(
                    rpb.PushAssignmentsRequest(
                        assignments=assignments,
                        version=self._map_version,
                        controller_epoch=self.epoch,
                    ),
                    timeout=RPC_TIMEOUT_S,
                )
            except grpc.RpcError:
                continue

    # -- observing -------------------------------------------------------------------

    def status(self, node: NodeProcess, shard: int) -> rpb.ShardStatus:
        answer = self.stub(node).GetStatus(rpb.GetStatusRequest(shard=shard), timeout=RPC_TIMEOUT_S)
        (status,) = answer.shards
        return status

    def wait_caught_up(self, shard: int, timeout_s: float = 60.0) -> int:
        """Wait until every member has applied the leader's head; returns that offset."""
        state = self.shards[shard]
        assert state.leader is not None
        deadline = time.monotonic() + timeout_s
        while True:
            leader_head = self.status(state.leader, shard).head.offset
            commits = []
            for node in state.members:
                try:
                    commits.append(self.status(node, shard).commit_offset)
                except grpc.RpcError:
                    commits.append(-2)
            if all(commit >= leader_head for commit in commits):
                return leader_head
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"shard {shard}: members at {commits}, leader head {leader_head}"
                )
            time.sleep(0.1)
