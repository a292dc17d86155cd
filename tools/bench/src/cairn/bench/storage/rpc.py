"""gRPC plumbing shared by the load loops: method names, channels, shard discovery.

Requests go out as raw bytes through method handles without serializers, so
the method names are spelled out here rather than taken from generated stubs.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from cairn.bench.storage import security
from cairn.common.hashing import key_hash
from cairn.proto import oxia_client_pb2 as pb

SERVICE_NAME = "io.oxia.proto.v1.OxiaClient"
_SERVICE = f"/{SERVICE_NAME}/"
METHOD_ASSIGNMENTS = _SERVICE + "GetShardAssignments"
METHOD_WRITE = _SERVICE + "Write"
METHOD_WRITE_STREAM = _SERVICE + "WriteStream"
METHOD_READ = _SERVICE + "Read"
METHOD_NOTIFICATIONS = _SERVICE + "GetNotifications"
METHOD_CREATE_SESSION = _SERVICE + "CreateSession"
METHOD_KEEP_ALIVE = _SERVICE + "KeepAlive"
METHOD_CLOSE_SESSION = _SERVICE + "CloseSession"
NAMESPACE = "default"
STATUS_OK = 0
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Separate TCP connections per channel, so `--channels` means what it says.
    ("grpc.use_local_subchannel_pool", 1),
)


@dataclass(frozen=True, slots=True)
class ShardInfo:
    shard_id: int
    leader: str
    min_hash: int
    max_hash: int


class Router:
    """Key -> shard by the inclusive 32-bit hash ranges of the assignments."""

    def __init__(self, shards: Sequence[ShardInfo]) -> None:
        if not shards:
            raise ValueError("no shards to route to")
        self.shards = sorted(shards, key=lambda s: s.min_hash)
        self._mins = [s.min_hash for s in self.shards]

    def shard_of(self, key: str) -> ShardInfo:
        value = key_hash(key)
        index = bisect.bisect_right(self._mins, value) - 1
        if index < 0 or value > self.shards[index].max_hash:
            raise LookupError(f"no shard covers hash {value:#010x} of key {key!r}")
        return self.shards[index]


def describe(error: BaseException) -> str:
    """A one-line account of an error: the gRPC status and details when it is an RPC's."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


async def fetch_shards(address: str, timeout_s: float) -> list[ShardInfo]:
    """The first ShardAssignments message of namespace `default` (then cancels the stream)."""
    async with security.channel(address, CHANNEL_OPTIONS) as channel:
        method = channel.unary_stream(
            METHOD_ASSIGNMENTS,
            request_serializer=pb.ShardAssignmentsRequest.SerializeToString,
            response_deserializer=pb.ShardAssignments.FromString,
        )
        call = method(pb.ShardAssignmentsRequest(namespace=NAMESPACE), timeout=timeout_s)
        try:
            message = await call.read()
        except grpc.aio.AioRpcError as error:
            raise RuntimeError(f"{address}: GetShardAssignments: {describe(error)}") from None
        finally:
            call.cancel()
    if message is grpc.aio.EOF:
        raise RuntimeError(f"{address}: shard assignment stream ended without a message")
    if NAMESPACE not in message.namespaces:
        raise RuntimeError(f"{address}: no assignments for namespace {NAMESPACE!r}")
    shards = []
    for assignment in message.namespaces[NAMESPACE].assignments:
        hash_range = assignment.int32_hash_range
        shards.append(
            ShardInfo(
                shard_id=int(assignment.shard),
                leader=str(assignment.leader),
                min_hash=int(hash_range.min_hash_inclusive),
                max_hash=int(hash_range.max_hash_inclusive),
            )
        )
    if not shards:
        raise RuntimeError(f"{address}: namespace {NAMESPACE!r} has no shards")
    return shards


class Channels:
    """`count` channels per leader address, handed out round-robin."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._next = 0

    def get(self, address: str) -> grpc.aio.Channel:
        channels = self._channels.get(address)
        if channels is None:
            channels = [security.channel(address, CHANNEL_OPTIONS) for _ in range(self._count)]
            self._channels[address] = channels
        self._next += 1
        return channels[self._next % len(channels)]

    async def ready(self, timeout_s: float) -> None:
        for address, channels in self._channels.items():
            for channel in channels:
                try:
                    await asyncio.wait_for(channel.channel_ready(), timeout_s)
                except TimeoutError:
                    raise RuntimeError(f"could not connect to {address} in {timeout_s} s") from None

    async def close(self) -> None:
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()
