"""A replica's incarnation: drawn when its storage is created empty, kept on disk
across restarts, new after the disk is lost, reported where the leader and the
controller read it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from cairn.storage.config import Limits, ShardSpec
from cairn.storage.kv import RocksKv
from cairn.storage.shard import ShardReplica
from cairn.storage.shard_status import shard_status
from cairn.storage.wal import Wal


def open_replica(path: Path, incarnation: int) -> ShardReplica:
    return ShardReplica(
        0,
        ShardSpec(),
        RocksKv(path / "kv"),
        Wal.open(path / "wal"),
        Limits(),
        incarnation_source=lambda: incarnation,
    )


async def _lifecycle(tmp_path: Path) -> None:
    replica = open_replica(tmp_path, 0x1111)
    try:
        assert replica.incarnation == 0x1111
        await replica.new_term(1)
        assert shard_status(replica).incarnation == 0x1111
    finally:
        await replica.close()
    # Restarted with its disk: the same data, the same incarnation.
    replica = open_replica(tmp_path, 0x2222)
    try:
        assert replica.incarnation == 0x1111
    finally:
        await replica.close()
    # The disk is lost: created empty again, a new incarnation.
    shutil.rmtree(tmp_path / "kv")
    shutil.rmtree(tmp_path / "wal")
    replica = open_replica(tmp_path, 0x3333)
    try:
        assert replica.incarnation == 0x3333
    finally:
        await replica.close()


def test_an_incarnation_lives_as_long_as_the_replicas_storage(tmp_path: Path) -> None:
    asyncio.run(_lifecycle(tmp_path))
