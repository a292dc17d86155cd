"""One shard replica: WAL + KV + the asyncio pipeline that drives them.

Every decision is the shard core's (`core/shard_core.py`, over `core.replication`):
who may lead or follow in which term, where a follower's log stops agreeing, what
is committed, how far to apply, when a leader serves, whether writes fold, how
much may wait. The rest of this package is its driver: it does the I/O the core
calls for, in this order: persist, then send, then apply, over the ports of
`ports.py`. `ShardReplica` composes the driver's parts and is what the servers
hold:

    shard_writes.py    (leader) a client write or session event becomes a log
                       entry (WAL append, no fsync); writes fold; backpressure
    shard_pipeline.py  the syncer (group commit: one fdatasync covers every entry
                       appended so far) and the applier (entries up to
                       min(commit offset, durable offset), a group at a time, as
                       ONE atomic KV batch; then the clients' answers)
    shard_roles.py     fencing, leading, following, truncating, entries and
                       snapshots from the leader
    shard_takeover.py  when a new leader starts to serve
    replication/       (leader) senders stream entries to each follower; their
                       acknowledgements advance the commit offset

So an answer is only sent for an entry that a majority holds durably and this
replica has applied. A replica never applies past the commit offset it was told,
so a follower never exposes an entry that a new leader could drop. After a
restart a replica is FENCED: it re-applies nothing beyond its KV until a leader
(itself, once elected, or another) tells it what is committed.

Entries are client writes, session lifecycle events and term starts: all state
changes go through the log, so replicas that apply it are identical. Beside the
parts: the apply step and the caches over the KV (`apply_step.py`), sessions
(`shard_sessions.py`), opening (`shard_recovery.py`), WAL retention, counters
and status.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cairn.common.errors import Unavailable, WriteOutcomeUnknown
from cairn.common.keyorder import KeyOrder
from cairn.storage.apply_step import ApplyStep
from cairn.storage.clock import monotonic_ms, wall_clock_ms
from cairn.storage.config import (
    DEFAULT_WAL_SPARE_SEGMENTS,
    DEFAULT_WAL_ZERO_FILL_BYTES,
    Limits,
    ReplicationSettings,
    ShardSpec,
)
from cairn.storage.core.entry_apply import ShardRules
from cairn.storage.core.events import Closing
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.core.replication.applied_changes import KeptChanges
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member, Role
from cairn.storage.core.replication.terms import EntryId, TermHistory
from cairn.storage.core.retention import WalRetention
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.kv import KvStore
from cairn.storage.ports import DiskWork, LeaderRole, LogStore, ReplicaFiles, ThreadDiskWork
from cairn.storage.shard_context import ShardContext
from cairn.storage.shard_counters import ShardCounters
from cairn.storage.shard_files import ShardFiles
from cairn.storage.shard_pipeline import ShardPipeline
from cairn.storage.shard_recovery import recover
from cairn.storage.shard_retention import keep_wal_trimmed
from cairn.storage.shard_roles import RoleChanges
from cairn.storage.shard_sessions import ShardSessions
from cairn.storage.shard_takeover import LeaderTakeover
from cairn.storage.shard_writes import LeaderWrites
from cairn.storage.wal import WalOptions

# WAL trimming for every shard of the process, beside (never behind) their fsyncs.
_MAINTENANCE = ThreadDiskWork("wal-trim", threads=2)


def new_incarnation() -> int:
    """A random identity for a replica's data: 63 bits (it fits a signed 64-bit
    field anywhere it is copied), never 0 (which the protocol reads as "not
    reported")."""
    return secrets.randbits(63) or 1


class ShardReplica:
    def __init__(
        self,
        shard_id: int,
        spec: ShardSpec,
        kv: KvStore,
        wal: LogStore,
        limits: Limits,
        *,
        disk: DiskWork | None = None,
        maintenance: DiskWork = _MAINTENANCE,
        replication: ReplicationSettings | None = None,
        files: ReplicaFiles | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        session_clock_ms: Callable[[], int] = monotonic_ms,
        wal_retention: WalRetention | None = None,
        incarnation_source: Callable[[], int] = new_incarnation,
    ) -> None:
        """`wal_retention` None keeps the whole WAL. `files` (where `kv` and `wal`
        were opened from) is needed to install snapshots. `incarnation_source` draws the
        incarnation of a replica whose KV has none (created empty). `disk` runs this
        shard's syncs and cuts (a worker thread of its own by default), `maintenance`
        its WAL trims (shared by the process's shards)."""
        self.shard_id = shard_id
        self.spec = spec
        self.limits = limits
        self.replication = replication or ReplicationSettings()
        rules = ShardRules(
            shard_id,
            spec.key_order,
            spec.notifications_enabled,
            limits.notification_retention_ms,
            limits.max_notification_batches_trimmed_per_entry,
        )
        self.core: ShardCore[asyncio.Future[Any]]
        self.core, self.incarnation = recover(
            shard_id, kv, wal, limits.pipeline(), incarnation_source
        )
        self._apply_step = ApplyStep(self.core, kv, rules, limits, self.replication)
        self._shard = shard = ShardContext(
            shard_id,
            self.core,
            kv,
            wal,
            self._apply_step,
            disk if disk is not None else ThreadDiskWork(f"wal-sync-{shard_id}"),
            self.replication,
            clock_ms,
        )
        self.counters: ShardCounters = shard.counters
        self.sessions = ShardSessions(self, session_clock_ms)
        self._takeover = LeaderTakeover(shard, self.sessions.rearm)
        self._writes = LeaderWrites(shard, self._takeover)
        self._pipeline = ShardPipeline(shard, self._writes, self._takeover)
        self._roles = RoleChanges(
            shard, self._pipeline, self._writes, self._takeover, files, self.incarnation
        )
        self._background = [
            shard.loop.create_task(
                self.sessions.expire(lambda: shard.closing), name=f"session-expiry-{shard_id}"
            ),
            shard.loop.create_task(
                keep_wal_trimmed(shard, wal_retention, maintenance),
                name=f"wal-retention-{shard_id}",
            ),
        ]
        # What the servers call, done by the parts (bound here: no extra call per request).
        self.append = self._writes.append
        self.submit = self._writes.submit
        self.write = self._writes.write
        self.entries = self._writes.entries
        self.traces_of = self._writes.traces_of
        self.commit_counted = self._pipeline.commit_counted
        self.state_digest_at = self._pipeline.state_digest_at
        self.wait_for_commit_after = self._pipeline.wait_for_commit_after
        self.wait_for_sequence_update = self._pipeline.wait_for_sequence_update
        self.wait_progress_after = self._pipeline.wait_progress_after
        self.wait_durable_after = self._pipeline.wait_durable_after
        self.new_term = self._roles.new_term
        self.truncate = self._roles.truncate
        self.append_replicated = self._roles.append_replicated
        self.install_snapshot = self._roles.install_snapshot
        self.take_leader_changes = self._apply_step.take_leader_changes
        self.wait_taken_over = self._takeover.wait_taken_over
        self.wait_serving = self._takeover.wait_serving

    @classmethod
    def open(
        cls,
        shard_id: int,
        spec: ShardSpec,
        directory: Path,
        limits: Limits,
        wal_segment_size_bytes: int,
        wal_retention: WalRetention | None = None,
        replication: ReplicationSettings | None = None,
        wal_zero_fill_bytes: int = DEFAULT_WAL_ZERO_FILL_BYTES,
        wal_spare_segments: int = DEFAULT_WAL_SPARE_SEGMENTS,
    ) -> ShardReplica:
        files = ShardFiles(
            directory,
            WalOptions(
                segment_size_bytes=wal_segment_size_bytes,
                zero_fill_ahead_bytes=wal_zero_fill_bytes,
                spare_segments=wal_spare_segments,
            ),
        )
        kv, wal = files.open()
        return cls(
            shard_id,
            spec,
            kv,
            wal,
            limits,
            replication=replication,
            files=files,
            wal_retention=wal_retention,
        )

    # ---- what it is -----------------------------------------------------------------

    @property
    def kv(self) -> KvStore:
        return self._shard.kv

    @property
    def wal(self) -> LogStore:
        return self._shard.wal

    @property
    def namespace(self) -> str:
        return self.spec.namespace

    @property
    def key_order(self) -> KeyOrder:
        return self.spec.key_order

    @property
    def notifications_enabled(self) -> bool:
        return self.spec.notifications_enabled

    @property
    def read_cache(self) -> ReadCache:
        """A leader's answers to exact-key gets (read_cache.py)."""
        return self._apply_step.read_cache

    @property
    def changes_for_followers(self) -> KeptChanges:
        """What a leader's apply step wrote, for its followers (applied_changes.py)."""
        return self._apply_step.changes_for_followers

    @property
    def entries_applied_from_leader_changes(self) -> int:
        return self._apply_step.entries_applied_from_leader_changes

    @property
    def applied_offset(self) -> int:
        """What readers see: every entry up to here is in the KV."""
        return self.core.applied_offset

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def log(self) -> TermHistory:
        return self.core.log

    @property
    def commit_offset(self) -> int:
        """The highest offset known committed (applied, or about to be)."""
        return self.core.commit_offset

    @property
    def durable_offset(self) -> int:
        return self._shard.durable_offset

    @property
    def serving(self) -> bool:
        """Answers reads now (shard_takeover.py)."""
        return self._takeover.serving

    @property
    def leader_role(self) -> LeaderRole | None:
        return self._shard.leader

    @property
    def sequence_generation(self) -> int:
        """Counts applied groups that generated sequence keys."""
        return self._pipeline.sequence_generation

    @property
    def closing(self) -> bool:
        """True once open-ended streams (notifications, sequence updates) should end."""
        return self._shard.ending

    def count_read(self, gets: int) -> None:
        """A client read request with `gets` gets is being served."""
        self.counters.read_requests += 1
        self.counters.read_gets += gets

    async def become_leader(
        self,
        term: int,
        me: Member,
        make_leader: Callable[[ShardReplica, LeaderCore], LeaderRole],
        followers: Sequence[Member] = (),
        incarnations: Mapping[str, int] | None = None,
    ) -> EntryId:
        """Lead `term` (shard_roles.py); `make_leader` builds the replication side
        of this replica around the term's quorum."""
        build = functools.partial(make_leader, self)
        return await self._roles.become_leader(term, me, build, followers, incarnations)

    # ---- lifecycle ------------------------------------------------------------------

    def end_streams(self) -> None:
        """Tell open-ended streams (including a leader's Replicate stream to us) to
        finish, so that a shutdown's grace period only waits for requests that end by
        themselves."""
        self._shard.streams_ending = True
        self._pipeline.wake_waiters()

    async def close(self) -> None:
        """Finish what can commit without waiting on followers, fail the rest, then
        release the WAL and KV."""
        shard = self._shard
        shard.closing = True
        self._writes.drop_fold(Unavailable(f"shard {self.shard_id} is shutting down"))
        self._pipeline.wake_waiters()  # subscribers waiting for commits see the close
        for background in self._background:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
        await self._pipeline.drain()
        await self._roles.carry_out(self.core.step(Closing()))
        for pending in self.core.pending:
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(
                    WriteOutcomeUnknown(f"shard {self.shard_id} closed before the write committed")
                )
        shard.disk.close()
        shard.wal.close()
        shard.kv.close()
