"""A small synchronous client over the generated stubs, for tests."""

from __future__ import annotations

import grpc

from cairn.common.hashing import HashRange, find_range, key_hash
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc


def first_assignments(
    stub: pb_grpc.OxiaClientStub, namespace: str = "default", timeout_s: float = 10.0
) -> list[tuple[int, HashRange, str]]:
    """(shard, hash range, leader) from the first message of the assignment stream."""
    call = stub.GetShardAssignments(
        pb.ShardAssignmentsRequest(namespace=namespace), timeout=timeout_s
    )
    try:
        message = next(call)
    finally:
        call.cancel()
    shards = [
        (
            a.shard,
            HashRange(a.int32_hash_range.min_hash_inclusive, a.int32_hash_range.max_hash_inclusive),
            a.leader,
        )
        for a in message.namespaces[namespace].assignments
    ]
    return sorted(shards, key=lambda s: s[1].min_inclusive)


class Router:
    def __init__(self, channel: grpc.Channel) -> None:
        self.stub = pb_grpc.OxiaClientStub(channel)
        self.shards = first_assignments(self.stub)

    def shard_for(self, key: str) -> int:
        ranges = [hash_range for _, hash_range, _ in self.shards]
        return self.shards[find_range(ranges, key_hash(key))][0]

    def all_shards(self) -> list[int]:
        return [shard for shard, _, _ in self.shards]
