"""Notification retention, in process: a shard with a controlled clock behind the
real gRPC service on an ephemeral port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from cairn.common.hashing import split_hash_space
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.entry_apply import NOTIFICATION_TRIM_EVERY_OFFSETS
from cairn.storage.core.notifications import stored_batches, trimmed_before
from cairn.storage.core.replication.replica import Member
from cairn.storage.directory import NamespaceLayout, ShardDirectory, ShardPlacement
from cairn.storage.kv import RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.rpc.client_api import ClientService, generic_handlers
from cairn.storage.shard import ShardReplica
from cairn.storage.wal import Wal

RETENTION_MS = 1_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


async def _scenario(tmp_path: Path) -> None:
    limits = Limits(notification_retention_ms=RETENTION_MS)
    clock = Clock()
    replica = ShardReplica(
        0, ShardSpec(), RocksKv(tmp_path / "kv"), Wal.open(tmp_path / "wal"), limits, clock_ms=clock
    )
    await lead_alone(replica, Member("127.0.0.1:0", "127.0.0.1:0"))
    directory = ShardDirectory()
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    placement = ShardPlacement(0, split_hash_space(1)[0], address)
    await directory.set_namespace(
        NamespaceLayout("default", KeyOrder.HIERARCHICAL, (placement,)), {0: replica}
    )
    server.add_generic_rpc_handlers(generic_handlers(ClientService(directory, limits)))
    await server.start()
    try:

        async def put(key: str) -> int:
            request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=b"v")])
            response = pb.WriteResponse.FromString(
                await replica.write(request.SerializeToString(), request)
            )
            return response.puts[0].version.version_id

        old = [await put(f"/old/{i}") for i in range(10)]
        # Time passes beyond the retention; writes continue until an entry whose
        # offset triggers trimming.
        clock.now_ms += RETENTION_MS + 1
        await asyncio.gather(
            *(put(f"/new/{i}") for i in range(NOTIFICATION_TRIM_EVERY_OFFSETS - len(old) + 5))
        )
        remaining = [offset for offset, _ in stored_batches(replica.kv, -1, 10_000)]
        assert not set(old) & set(remaining), "expired notifications were kept"
        assert remaining, "recent notifications were trimmed"
        assert trimmed_before(replica.kv) == old[-1] + 1

        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            # Resuming from a trimmed point is refused clearly.
            call = stub.GetNotifications(
                pb.NotificationsRequest(shard=0, start_offset_exclusive=old[2])
            )
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call.read()
            assert raised.value.code() == grpc.StatusCode.OUT_OF_RANGE
            assert "trimmed" in (raised.value.details() or "")
            # Resuming from the first kept point works.
            call = stub.GetNotifications(
                pb.NotificationsRequest(shard=0, start_offset_exclusive=old[-1])
            )
            first = await call.read()
            assert first.offset == remaining[0]
            call.cancel()
    finally:
        await directory.close()
        await server.stop(None)
        await replica.close()


def test_expired_notifications_are_trimmed_and_resuming_there_fails_clearly(
    tmp_path: Path,
) -> None:
    asyncio.run(_scenario(tmp_path))
