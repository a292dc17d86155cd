"""What the parts of one shard replica's driver share (shard.py composes them):
its core, its storage, the leader role it plays now, whether it failed or is
closing, and the wake-ups between its tasks.

The KV and WAL are read from here at each use: installing a snapshot replaces
both (shard_roles.py). Only the replica's role changes set `leader`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from cairn.common.errors import Unavailable
from cairn.storage.apply_step import ApplyStep
from cairn.storage.config import ReplicationSettings
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.kv import KvStore
from cairn.storage.ports import DiskWork, LeaderRole, LogStore
from cairn.storage.shard_counters import ShardCounters


class ShardContext:
    def __init__(
        self,
        shard_id: int,
        core: ShardCore[asyncio.Future[Any]],
        kv: KvStore,
        wal: LogStore,
        apply_step: ApplyStep[asyncio.Future[Any]],
        disk: DiskWork,
        replication: ReplicationSettings,
        clock_ms: Callable[[], int],
    ) -> None:
        self.shard_id = shard_id
        self.core = core
        self.kv = kv
        self.wal = wal
        self.apply_step = apply_step
        self.disk = disk
        self.replication = replication
        self.clock_ms = clock_ms
        self.loop = asyncio.get_running_loop()
        self.counters = ShardCounters()
        self.leader: LeaderRole | None = None
        self.failure: BaseException | None = None
        self.closing = False
        self.streams_ending = False
        # Held by every change of role, term or log other than appends (fencing,
        # leading, truncating, installing a snapshot, trimming), so that none of them
        # sees another half done. Replicated appends check `log_busy` instead.
        self.storage_lock = asyncio.Lock()
        # Set while the log is cut or replaced: replicated appends must wait for a
        # new stream then.
        self.log_busy = False
        # Set for the syncer: entries were appended.
        self.wake_syncer = asyncio.Event()
        # Set for the applier: more may be appliable (committed, durable, or the
        # apply limit lifted).
        self.wake_applier = asyncio.Event()
        # Set whenever entries leave the write buffer, for writers held back by it.
        self.space_freed = asyncio.Event()

    @property
    def durable_offset(self) -> int:
        """Every entry up to here is in the log on disk."""
        return min(self.wal.synced_offset, self.core.log.last_offset)

    @property
    def ending(self) -> bool:
        """True once open-ended streams (notifications, sequence updates) should end."""
        return self.closing or self.streams_ending

    def check_writable(self) -> None:
        if self.failure is not None:
            raise Unavailable(f"shard {self.shard_id} has failed: {self.failure}")
        if self.closing:
            raise Unavailable(f"shard {self.shard_id} is shutting down")
