"""The client's shard-map stream is followed again after a failure it did not
foresee (here the change callback raising): the next map still arrives. A
follower task that ended there would leave the client routing by a stale map
for good, with nothing to say so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from cairn.client.assignments import ShardMapFollower
from cairn.client.channels import ChannelPool
from cairn.common.hashing import HashRange
from cairn.proto import oxia_client_pb2 as pb
from support.polling import eventually

FULL = HashRange(0, 0xFFFFFFFF)


def one_shard_map(leader: str) -> pb.ShardAssignments:
    message = pb.ShardAssignments()
    namespace = message.namespaces["default"]
    namespace.shard_key_router = pb.XXHASH3
    shard = namespace.assignments.add(shard=0, leader=leader)
    shard.int32_hash_range.min_hash_inclusive = FULL.min_inclusive
    shard.int32_hash_range.max_hash_inclusive = FULL.max_inclusive
    return message


class OneMapPerStream:
    """Each GetShardAssignments stream sends one map (leader pod-N for the Nth
    stream) and ends."""

    def __init__(self) -> None:
        self.streams = 0

    def stubs(self, address: str) -> Any:
        return self

    def get_shard_assignments(self, request: pb.ShardAssignmentsRequest) -> AsyncIterator[Any]:
        self.streams += 1
        return self._stream(self.streams)

    async def _stream(self, number: int) -> AsyncIterator[pb.ShardAssignments]:
        yield one_shard_map(f"pod-{number}:6648")


async def _followed_again() -> None:
    pool = OneMapPerStream()
    changes = 0

    def on_change() -> None:
        nonlocal changes
        changes += 1
        if changes == 1:
            raise RuntimeError("a failure nobody planned for")

    follower = ShardMapFollower(
        cast(ChannelPool, pool), ["seed:6648"], "default", 0.01, 0.05, on_change
    )
    try:
        await follower.start(timeout_s=10)
        await eventually(lambda: follower.leader(0) not in (None, "pod-1:6648"))
        assert follower.leader(0) not in (None, "pod-1:6648"), pool.streams
        assert changes >= 2
    finally:
        await follower.close()


def test_the_shard_map_is_followed_again_after_an_unforeseen_failure() -> None:
    asyncio.run(_followed_again())
