"""A shard replica's WAL retention: now and then, the WAL's applied segments
beyond what the retention keeps (core/retention.py decides how far) are deleted.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from cairn.storage.core.retention import WalRetention, trim_target
from cairn.storage.ports import DiskWork, LogStore
from cairn.storage.shard_context import ShardContext

log = logging.getLogger(__name__)

# How often a shard compares its WAL size with the retention.
WAL_RETENTION_CHECK_INTERVAL_S = 1.0


async def keep_wal_trimmed(
    shard: ShardContext, retention: WalRetention | None, maintenance: DiskWork
) -> None:
    """Trim `shard`'s WAL to `retention` (None: keep it whole) until it closes;
    `maintenance` deletes the files, beside (never behind) the shard's fsyncs."""
    if retention is None or retention == WalRetention():
        return
    while not shard.closing:
        await asyncio.sleep(WAL_RETENTION_CHECK_INTERVAL_S)
        if shard.failure is not None or shard.log_busy or shard.storage_lock.locked():
            continue
        wal = shard.wal
        try:
            target = trim_target(
                retention,
                applied_offset=shard.core.applied_offset,
                first_offset=wal.first_offset,
                last_offset=wal.last_offset,
                size_bytes=wal.total_size_bytes(),
                now_ms=shard.clock_ms(),
                timestamp_at=functools.partial(_timestamp_ms, wal),
            )
            if target is None:
                continue
            async with shard.storage_lock:
                # Off the loop and off the sync thread: deleting files and syncing
                # the directory must not hold up group commit.
                first = await maintenance.run(functools.partial(_trim_wal, shard, target))
                shard.core.log.trim_before(first)
        except Exception as error:  # keep serving; the next round retries
            log.warning("shard %d: WAL trimming failed: %r", shard.shard_id, error)


def _trim_wal(shard: ShardContext, before_offset: int) -> int:
    """Delete segments below `before_offset` (applied ones only): once the KV
    is persisted, every applied entry survives power loss in it, and replay
    never needs it again. Returns the WAL's new first offset."""
    shard.kv.persist()
    shard.counters.wal_trims += 1
    return shard.wal.trim_before(before_offset)


def _timestamp_ms(wal: LogStore, offset: int) -> int:
    return wal.get(offset).timestamp_ms
