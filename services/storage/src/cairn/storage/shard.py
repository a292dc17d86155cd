"""One shard replica: WAL + KV + the asyncio pipeline that drives them.

Every decision is the shard core's (`core/shard_core.py`, over `core.replication`):
who may lead or follow in which term, where a follower's log stops agreeing, what
is committed, how far to apply, when a leader serves, whether writes fold, how
much may wait. This module is its driver: it does the I/O the core calls for, in
this order: persist, then send, then apply, over the ports of `ports.py`. Beside
it: the apply step and the caches over the KV (`apply_step.py`), sessions
(`shard_sessions.py`), opening (`shard_recovery.py`), counters and status.

    append   -> leader: a client write or session event becomes a log entry
                (WAL append, no fsync); follower: entries from the leader
    syncer   -> one fdatasync in a worker thread covers every entry appended so far
                (group commit); the durable offset counts as the leader's own
                acknowledgement, or goes back to the leader from a follower
    senders  -> (leader) stream entries to each follower; their acknowledgements
                advance the commit offset (replication/sender.py)
    applier  -> applies entries up to min(commit offset, durable offset), a group at
                a time, as ONE atomic KV batch that also records the applied offset;
                then answers the clients

So an answer is only sent for an entry that a majority holds durably and this
replica has applied. A replica never applies past the commit offset it was told,
so a follower never exposes an entry that a new leader could drop. After a
restart a replica is FENCED: it re-applies nothing beyond its KV until a leader
(itself, once elected, or another) tells it what is committed.

A new leader first logs a TERM_START entry and serves reads once that entry is
applied: by then everything committed before it is applied too. It then gives
every stored session a fresh full timeout.

Entries are client writes, session lifecycle events and term starts: all state
changes go through the log, so replicas that apply it are identical.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from cairn.common import tracing
from cairn.common.errors import (
    InvalidTerm,
    Unavailable,
    WriteOutcomeUnknown,
)
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.storage import folding
from cairn.storage.apply_step import ApplyFailed, ApplyStep, WaitForCommit, WroteLeaderChanges
from cairn.storage.clock import monotonic_ms, wall_clock_ms
from cairn.storage.config import (
    DEFAULT_WAL_SPARE_SEGMENTS,
    DEFAULT_WAL_ZERO_FILL_BYTES,
    Limits,
    ReplicationSettings,
    ShardSpec,
)
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    TERM_START,
    Folded,
    encode_entry,
)
from cairn.storage.core.entry_apply import ShardRules
from cairn.storage.core.events import BecomeLeader, Closing, NewTerm, SnapshotOffered, Truncate
from cairn.storage.core.folding import WriteFold
from cairn.storage.core.meta import (
    INCARNATION_KEY,
    TERM_KEY,
    encode_i64,
    encode_u64,
)
from cairn.storage.core.pending import PendingEntry
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.core.ready import Ready, SteppedDown
from cairn.storage.core.replication.applied_changes import (
    KeptChanges,
)
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member, Role
from cairn.storage.core.replication.terms import (
    EntryId,
    TermHistory,
)
from cairn.storage.core.retention import WalRetention, trim_target
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.core.state_digest import DigestBuilder, StateDigest
from cairn.storage.kv import Column, KvStore
from cairn.storage.ports import (
    DiskWork,
    LeaderRole,
    LogStore,
    ReplicaFiles,
    SnapshotInstall,
    ThreadDiskWork,
)
from cairn.storage.shard_counters import ShardCounters
from cairn.storage.shard_files import ShardFiles
from cairn.storage.shard_recovery import recover
from cairn.storage.shard_sessions import ShardSessions
from cairn.storage.wal import LogEntry, WalError, WalOptions

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger(__name__)

# A state digest hashes this many records between turns of the event loop.
_DIGEST_ITEMS_PER_TURN = 1000
# How often a shard compares its WAL size with the retention.
WAL_RETENTION_CHECK_INTERVAL_S = 1.0
# WAL trimming for every shard of the process, beside (never behind) their fsyncs.
_MAINTENANCE = ThreadDiskWork("wal-trim", threads=2)


def new_incarnation() -> int:
    """A random identity for a replica's data: 63 bits (it fits a signed 64-bit
    field anywhere it is copied), never 0 (which the protocol reads as "not
    reported")."""
    return secrets.randbits(63) or 1


# An entry logged and not applied yet, and the future of its writer, if any.
_Pending = PendingEntry["asyncio.Future[Any]"]


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
        self.kv = kv
        self.wal = wal
        self.limits = limits
        self.replication = replication or ReplicationSettings()
        self.files = files
        self._clock_ms = clock_ms
        self._rules = ShardRules(
            shard_id,
            spec.key_order,
            spec.notifications_enabled,
            limits.notification_retention_ms,
            limits.max_notification_batches_trimmed_per_entry,
        )
        self._loop = asyncio.get_running_loop()
        # Replaced (and the old one set) whenever the applied offset advances.
        self._commit_advanced = asyncio.Event()
        # Counts applied groups that generated sequence keys; the event is replaced
        # (and the old one set) at each, for GetSequenceUpdates subscribers.
        self.sequence_generation = 0
        self._sequence_advanced = asyncio.Event()
        self.core: ShardCore[asyncio.Future[Any]]
        self.core, self.incarnation = recover(
            shard_id, kv, wal, limits.pipeline(), incarnation_source
        )
        self._apply_step = ApplyStep(self.core, kv, self._rules, limits, self.replication)
        self.sessions = ShardSessions(self, session_clock_ms)
        self._leader: LeaderRole | None = None
        # Set while core.taken_over: a leader has applied its term's first entry.
        self._serving = asyncio.Event()
        self._takeover_timer: asyncio.TimerHandle | None = None
        # Client writes collected for the next entry (leader; see folding.py).
        self._space_freed = asyncio.Event()
        self._wake_syncer = asyncio.Event()
        self._wake_applier = asyncio.Event()
        # Replaced (and the old one set) whenever the durable or applied offset
        # advances (a follower reports both to its leader).
        self._progress = asyncio.Event()
        self._failure: BaseException | None = None
        self._closing = False
        self._streams_ending = False
        # Held by every change of role, term or log other than appends (fencing,
        # leading, truncating, installing a snapshot, trimming), so that none of them
        # sees another half done. Replicated appends check `_log_busy` instead.
        self._storage_lock = asyncio.Lock()
        self._snapshot_receiving = False
        # Set while the log is cut or replaced: replicated appends must wait for a
        # new stream then.
        self._log_busy = False
        self._disk = disk if disk is not None else ThreadDiskWork(f"wal-sync-{shard_id}")
        self._maintenance = maintenance
        self._wal_retention = wal_retention
        self.counters = ShardCounters()
        self._tasks: list[asyncio.Task[None]] = []
        self._start_tasks()

    def _start_tasks(self) -> None:
        loop, shard = self._loop, self.shard_id
        self._tasks = [
            loop.create_task(self._sync_loop(), name=f"syncer-{shard}"),
            loop.create_task(self._apply_loop(), name=f"applier-{shard}"),
            loop.create_task(
                self.sessions.expire(lambda: self._closing), name=f"session-expiry-{shard}"
            ),
            loop.create_task(self._retention_loop(), name=f"wal-retention-{shard}"),
        ]

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
        """Every entry up to here is in the KV."""
        return self.core.applied_offset

    @property
    def commit_offset(self) -> int:
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
    def known_commit_offset(self) -> int:
        """The highest offset known committed (applied, or about to be)."""
        return self.core.commit_offset

    @property
    def durable_offset(self) -> int:
        return min(self.wal.synced_offset, self.core.log.last_offset)

    @property
    def serving(self) -> bool:
        """Answers reads now: taken over (its term's first entry applied, any older
        leader's lease over) and holding its own lease (lease.py)."""
        leader = self._leader
        return leader is not None and self.core.serves_reads(leader.lease_holds)

    # ---- controller -------------------------------------------------------------------

    async def new_term(self, term: int) -> tuple[EntryId, int]:
        """Fence at `term`: returns the head and the commit offset."""
        async with self._storage_lock:
            await self._carry_out(self.core.step(NewTerm(term)))
        log.info("shard %d: fenced at term %d, head %s", self.shard_id, term, self.core.head)
        return self.core.head, self.core.commit_offset

    async def become_leader(
        self,
        term: int,
        me: Member,
        make_leader: Callable[[ShardReplica, LeaderCore], LeaderRole],
        followers: Sequence[Member] = (),
        incarnations: Mapping[str, int] | None = None,
    ) -> EntryId:
        """Lead `term` with `followers` (`incarnations`: of their data, as the
        controller recorded them): log its first entry, start replicating
        (`make_leader` builds the replication side around the term's quorum)."""
        async with self._storage_lock:
            self._check_writable()
            event = BecomeLeader(
                term, me, tuple(followers), incarnations, self.replication.max_in_flight_entries
            )
            lead = self.core.step(event).lead
            assert lead is not None
            self._serving.clear()
            self._apply_step.on_leading()
            self._leader = make_leader(self, lead.quorum)
            body = lead.first_entry
            await self.append(TERM_START, body.SerializeToString(), body, wait_for_space=False)
        term_start = EntryId(term, self.core.term_start_offset)
        log.info("shard %d: leading term %d from offset %d", self.shard_id, term, term_start.offset)
        return term_start

    async def wait_serving(self, timeout_s: float | None = None) -> None:
        """Wait until this leader answers reads: taken over, and holding its lease
        (renewed at once if it lapsed: a majority must answer this leader)."""
        self.core.check_leader()
        if self.serving:
            return
        if timeout_s is None:
            timeout_s = self.replication.leader_ready_timeout_s
        deadline = self._loop.time() + timeout_s
        await self.wait_taken_over(timeout_s)
        leader = self._leader
        renewed = leader is not None and await leader.renew_lease(deadline - self._loop.time())
        self.core.check_leader()
        if not renewed:
            raise Unavailable(
                f"shard {self.shard_id}: no majority of the ensemble confirmed this leader "
                f"within {timeout_s:g} s"
            )

    async def wait_taken_over(self, timeout_s: float | None = None) -> None:
        """Wait until this leader may acknowledge writes: its term's first entry is
        applied, and any older leader's lease is over."""
        self.core.check_leader()
        if self._serving.is_set():
            return
        try:
            await asyncio.wait_for(
                self._serving.wait(),
                self.replication.leader_ready_timeout_s if timeout_s is None else timeout_s,
            )
        except TimeoutError:
            raise Unavailable(f"shard {self.shard_id}: the leader is still taking over") from None
        self.core.check_leader()

    def _finish_takeover(self, term: int) -> None:
        """The term's first entry is applied: serve once any older leader's lease
        is over, now or when a timer says so."""
        leader = self._leader
        if leader is None or self.core.term != term:
            return
        wait_ms = self.core.takeover_wait_ms(leader.clock_ms(), leader.serves_from_ms)
        if wait_ms is None:
            return
        if wait_ms > 0:
            if self._takeover_timer is None:
                self._takeover_timer = self._loop.call_later(
                    wait_ms / 1000, self._takeover_timer_fired, term
                )
            return
        self.sessions.rearm()
        self._serving.set()

    def _takeover_timer_fired(self, term: int) -> None:
        self._takeover_timer = None
        self._finish_takeover(term)

    @property
    def leader_role(self) -> LeaderRole | None:
        return self._leader

    async def _persist_term(self) -> None:
        """Make the term durable before anyone is told about it."""
        self.kv.write([(Column.META, TERM_KEY, encode_i64(self.core.term))])
        await self._disk.run(self.kv.sync)

    async def _carry_out(self, ready: Ready[asyncio.Future[Any]]) -> None:
        """Do what the core decided for an event (ready.py), in its order."""
        if ready.persist_term:
            await self._persist_term()
        if ready.stepped_down is not None:
            await self._step_down(ready.stepped_down)
        if ready.new_stream:
            self._apply_step.on_new_stream()
        if ready.cut_log_after is not None:
            await self._cut_log(ready.cut_log_after)
        if ready.sync_log:
            await self._sync_log()

    async def _step_down(self, stepped_down: SteppedDown[asyncio.Future[Any]]) -> None:
        """Stop leading: the replication side stops, waiting writers are told to go
        elsewhere (SteppedDown says what each may be told)."""
        leader, self._leader = self._leader, None
        self._serving.clear()
        if self._takeover_timer is not None:
            self._takeover_timer.cancel()
            self._takeover_timer = None
        self._apply_step.on_stepped_down()
        if stepped_down.not_logged is not None:
            error = Unavailable(f"shard {self.shard_id}: leadership changed")
            folding.fail(stepped_down.not_logged.waiters, error)
        unknown = WriteOutcomeUnknown(
            f"shard {self.shard_id}: leadership changed; the write may or may not commit"
        )
        for future in stepped_down.outcome_unknown:
            if not future.done():
                future.set_exception(unknown)
        if leader is not None:
            await leader.stop()
        self._space_freed.set()

    # ---- follower side ----------------------------------------------------------------

    async def truncate(self, term: int, leader: Member, leader_log: TermHistory) -> EntryId:
        """Follow `leader` in `term`, dropping what of our log disagrees with its log.
        Returns our head."""
        async with self._storage_lock:
            self._check_writable()
            await self._carry_out(self.core.step(Truncate(term, leader, leader_log)))
            return self.core.head

    async def _cut_log(self, keep: int) -> None:
        log.info(
            "shard %d: dropping entries %d..%d that disagree with the leader of term %d",
            self.shard_id,
            keep + 1,
            self.core.log.last_offset,
            self.core.term,
        )
        self._log_busy = True
        try:
            await self._disk.run(functools.partial(self.wal.truncate_after, keep))
        finally:
            self._log_busy = False
        self.core.on_log_cut(keep)
        self._space_freed.set()

    async def _sync_log(self) -> None:
        if self.wal.synced_offset < self.core.log.last_offset:
            await self._disk.run(self.wal.sync)
            self._on_durable()

    async def append_replicated(
        self, term: int, entries: Sequence[LogEntry], leader_commit_offset: int
    ) -> None:
        """Entries from our leader (checked to continue our log), and its commit offset."""
        self._check_writable()
        if self._log_busy:
            raise Unavailable(f"shard {self.shard_id} is truncating or replacing its log")
        if entries:
            # No waiting for room here: the leader sends only a bounded window beyond
            # what we hold durably, and waiting would stop us reading the commit
            # offset that lets us apply. What waits to be applied is bounded apart.
            self.core.check_entries(term, entries[0].offset)
            started_ns = time.perf_counter_ns()
            try:
                self.wal.append_many(entries)
            except (OSError, WalError) as error:
                raise Unavailable(f"shard {self.shard_id} cannot write its log: {error}") from error
            self.counters.wal_append_latency.record_since(started_ns)
            self._wake_syncer.set()
        else:
            self.core.check_entries(term, self.core.log.last_offset + 1)
        if self.core.on_replicated(entries, leader_commit_offset, self.durable_offset):
            self._wake_applier.set()

    async def wait_progress_after(
        self, durable_offset: int, applied_offset: int
    ) -> tuple[int, int]:
        """The durable and applied offsets, once either is past the one given (or
        the shard closes)."""
        while (
            self.durable_offset <= durable_offset
            and self.applied_offset <= applied_offset
            and not self.closing
            and self._failure is None
        ):
            await self._progress.wait()
        return self.durable_offset, self.applied_offset

    async def wait_durable_after(self, durable_offset: int) -> int:
        """The durable offset, once it is past the one given (or the shard closes)."""
        while self.durable_offset <= durable_offset and not self.closing and self._failure is None:
            await self._progress.wait()
        return self.durable_offset

    def _publish_progress(self) -> None:
        advanced, self._progress = self._progress, asyncio.Event()
        advanced.set()

    async def install_snapshot(
        self, term: int, leader: Member, chunks: AsyncIterator[rpb.SnapshotChunk]
    ) -> EntryId:
        """Replace our state with a snapshot from the leader of `term` (see
        snapshot.py); `chunks` starts with the one carrying the header. Returns the
        new head."""
        if self.files is None:
            raise Unavailable(f"shard {self.shard_id} cannot install snapshots")
        if self._snapshot_receiving:
            raise Unavailable(f"shard {self.shard_id} is already receiving a snapshot")
        self._snapshot_receiving = True
        self.counters.snapshots_started += 1
        started_ns = time.perf_counter_ns()
        try:
            async with self._storage_lock:
                self._check_writable()
                await self._carry_out(self.core.step(SnapshotOffered(term, leader)))
            # Received without the lock (it may take long): the replica keeps
            # answering fences meanwhile, and the install checks nothing changed.
            installer = self.files.installer([(INCARNATION_KEY, encode_u64(self.incarnation))])
            try:
                async for chunk in chunks:
                    installer.add(chunk)
                    self.counters.snapshot_bytes += chunk.ByteSize()
                    await asyncio.sleep(0)
            except BaseException:
                installer.abort()
                raise
            async with self._storage_lock:
                try:
                    self.core.check_still_following(term, leader)
                except InvalidTerm:
                    installer.abort()
                    raise
                head = await self._install(installer)
                self.counters.snapshots_completed += 1
                self.counters.snapshot_latency.record_since(started_ns)
                return head
        finally:
            self._snapshot_receiving = False

    async def _install(self, installer: SnapshotInstall) -> EntryId:
        # The KV and WAL are replaced under the pipeline: stop it first.
        self._log_busy = True
        await self._pause_pipeline()
        self.kv.close()
        self.wal.close()
        try:
            base = installer.finish()
        except BaseException:
            installer.abort()
            raise
        finally:
            self._reopen_storage()
            self._log_busy = False
        self.core.on_snapshot_installed(base)
        await self._persist_term()
        self._publish_applied()
        log.info("shard %d: installed a snapshot up to %s", self.shard_id, base)
        return base

    async def _pause_pipeline(self) -> None:
        """Stop the syncer and applier (they touch the WAL and KV) and drop what is
        pending: a snapshot replaces it all."""
        for task in self._tasks[:2]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pending in self.core.pending.drop_all():
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(
                    WriteOutcomeUnknown("replaced by a snapshot; the write may or may not commit")
                )
        self._apply_step.on_storage_replaced()

    def _reopen_storage(self) -> None:
        """Open the KV and WAL again (finishing an install a failure interrupted)
        and restart the pipeline."""
        assert self.files is not None
        self.kv, self.wal = self.files.open()
        self._apply_step.on_reopened(self.kv)
        self._tasks[0] = self._loop.create_task(self._sync_loop(), name=f"syncer-{self.shard_id}")
        self._tasks[1] = self._loop.create_task(self._apply_loop(), name=f"applier-{self.shard_id}")

    # ---- write path (leader) ----------------------------------------------------------

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise Unavailable(f"shard {self.shard_id} has failed: {self._failure}")
        if self._closing:
            raise Unavailable(f"shard {self.shard_id} is shutting down")

    async def _wait_for_space(self, size: int) -> None:
        self.core.check_fits(size)
        while not self.core.has_room(size):
            # Backpressure: wait for the pipeline to drain rather than grow without bound.
            self._space_freed.clear()
            await self._space_freed.wait()
            self._check_writable()

    async def append(
        self,
        kind: int,
        raw_body: bytes,
        body: Message,
        plain_puts: bool = False,
        wait_for_space: bool = True,
    ) -> asyncio.Future[Any]:
        """Log one entry as leader and return the future of its apply result,
        resolved once the entry is committed and applied. Waits only while the
        shard's write buffer is full, so a pipelining caller gets its future without
        a task switch."""
        self._check_writable()
        self.core.check_leader()
        if wait_for_space:
            await self._make_room(len(raw_body) + 1)
        return self._log(kind, encode_entry(kind, raw_body), body, plain_puts)

    async def _make_room(self, size: int) -> None:
        if not self.core.has_room(size):
            await self._wait_for_space(size)
            self.core.check_leader()

    def _log(
        self,
        kind: int,
        payload: bytes,
        body: Message | Folded,
        plain_puts: bool,
        traces: tuple[Context, ...] | None = None,
    ) -> asyncio.Future[Any]:
        """Append an entry to the WAL as leader, after any fold collected so far, so
        that entries keep the order their requests came in."""
        self._seal_fold()
        return self._append_entry(kind, payload, body, plain_puts, traces)

    def _append_entry(
        self,
        kind: int,
        payload: bytes,
        body: Message | Folded,
        plain_puts: bool,
        traces: tuple[Context, ...] | None = None,
    ) -> asyncio.Future[Any]:
        """Append an entry to the WAL as leader. `traces`: the contexts of the
        writes it carries (a fold's); by default, the caller's, if sampled."""
        self._check_writable()
        entry = self.core.next_entry(payload, self._clock_ms())
        leader = self._leader
        assert leader is not None
        started_ns = time.perf_counter_ns()
        try:
            self.wal.append(entry)
        except (OSError, WalError) as error:
            # e.g. a full disk: the WAL left no partial record; this write fails, the
            # shard stays consistent and takes the next one (a WAL that could not undo
            # a partial write refuses appends until reopened: WalError).
            raise Unavailable(f"shard {self.shard_id} cannot write its log: {error}") from error
        self.counters.wal_append_latency.record_since(started_ns)
        # A caller that goes away may cancel this future; the entry still commits and
        # the pipeline skips answering it (it checks done()).
        future: asyncio.Future[Any] = self._loop.create_future()
        # The class itself: calling the subscripted alias costs a typing call per entry.
        pending: _Pending = PendingEntry(entry, kind, body, plain_puts, future)
        if tracing.ENABLED:
            if traces is None:
                caller = tracing.current_context()
                traces = () if caller is None else (caller,)
            pending.traces = traces
        self.core.on_logged(pending)
        self._wake_syncer.set()
        leader.entries_appended()
        return future

    async def submit(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> asyncio.Future[bytes]:
        """Log a client write request (validated by the caller); the future holds the
        serialized WriteResponse. With entries uncommitted, a request of plain puts
        and deletes joins the fold that the next commit step logs (folding.py). A new
        leader takes none before it has taken over (lease.py): it must acknowledge
        no write while an older leader may still answer reads."""
        self._check_writable()
        self.core.check_leader()
        if not self.core.taken_over:
            await self.wait_taken_over()
        await self._make_room(len(raw_request) + 1)
        future: asyncio.Future[bytes]
        if self.core.folds(request, plain_puts, self.core.has_followers):
            future = self._fold_in(raw_request, request)
        else:
            future = self._log(
                CLIENT_WRITE, encode_entry(CLIENT_WRITE, raw_request), request, plain_puts
            )
        # Counted once taken in; the request is parsed already, so counting its
        # operations is three C-level length reads, plain puts or not.
        self.counters.write_requests += 1
        self.counters.write_operations += (
            len(request.puts) + len(request.deletes) + len(request.delete_ranges)
        )
        return future

    def _fold_in(self, raw_request: bytes, request: pb.WriteRequest) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = self._loop.create_future()
        trace = tracing.current_context() if tracing.ENABLED else None
        sealed = self.core.fold_in(raw_request, request, future, trace)
        if sealed is not None:
            self._log_fold(sealed)
        return future

    def _seal_fold(self) -> None:
        fold = self.core.seal_fold()
        if fold is not None:
            self._log_fold(fold)

    def _log_fold(self, fold: WriteFold[asyncio.Future[bytes]]) -> None:
        """Log the collected requests (as a plain client write if there is just one)."""
        kind, payload, body = fold.entry()
        try:
            logged = self._append_entry(kind, payload, body, True, tuple(fold.traces))
        except Exception as error:  # not logged: nothing was accepted
            folding.fail(fold.waiters, error)
            return
        counters = self.counters
        counters.folds += 1
        counters.folded_requests += len(fold.requests)
        counters.folded_operations += fold.operations
        logged.add_done_callback(functools.partial(folding.settle, fold.waiters))

    def _drop_fold(self, error: BaseException) -> None:
        """Requests collected but never logged: not accepted, safe to send again."""
        fold = self.core.seal_fold()
        if fold is not None:
            folding.fail(fold.waiters, error)

    def count_read(self, gets: int) -> None:
        """A client read request with `gets` gets is being served."""
        self.counters.read_requests += 1
        self.counters.read_gets += gets

    async def write(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> bytes:
        """`submit`, then wait for the answer."""
        response: bytes = await (await self.submit(raw_request, request, plain_puts))
        return response

    def traces_of(self, first_offset: int, last_offset: int, limit: int) -> list[Context]:
        """Up to `limit` trace contexts of the writes in entries first_offset..
        last_offset, of those still pending (a follower catching up on entries
        applied meanwhile gets none: their writes were answered long ago)."""
        found: list[Context] = []
        for pending in self.core.pending.held_from(first_offset, last_offset):
            found.extend(pending.traces[: limit - len(found)])
            if len(found) >= limit:
                break
        return found

    def entries(self, first_offset: int, last_offset: int, max_bytes: int) -> list[LogEntry]:
        """Logged entries first_offset..last_offset (at least one if any, then up to
        `max_bytes` of payload), from memory while still pending, else from the WAL.
        Raises ValueError if the WAL no longer holds first_offset."""
        found: list[LogEntry] = []
        size = 0
        pending = self.core.pending
        held_first = pending.first_offset
        held: Iterable[LogEntry]
        if held_first is not None and held_first <= first_offset:
            held = (each.entry for each in pending.held_from(first_offset, last_offset))
        else:
            held = self.wal.read(first_offset, last_offset)
        for entry in held:
            if found and size + len(entry.payload) > max_bytes:
                break
            found.append(entry)
            size += len(entry.payload)
        return found

    # ---- WAL retention ----------------------------------------------------------------

    async def _retention_loop(self) -> None:
        retention = self._wal_retention
        if retention is None or retention == WalRetention():
            return
        while not self._closing:
            await asyncio.sleep(WAL_RETENTION_CHECK_INTERVAL_S)
            if self._failure is not None or self._log_busy or self._storage_lock.locked():
                continue
            wal = self.wal
            try:
                target = trim_target(
                    retention,
                    applied_offset=self.applied_offset,
                    first_offset=wal.first_offset,
                    last_offset=wal.last_offset,
                    size_bytes=wal.total_size_bytes(),
                    now_ms=self._clock_ms(),
                    timestamp_at=self._entry_timestamp_ms,
                )
                if target is None:
                    continue
                async with self._storage_lock:
                    # Off the loop and off the sync thread: deleting files and syncing
                    # the directory must not hold up group commit.
                    first = await self._maintenance.run(functools.partial(self._trim_wal, target))
                    self.core.log.trim_before(first)
            except Exception as error:  # keep serving; the next round retries
                log.warning("shard %d: WAL trimming failed: %r", self.shard_id, error)

    def _entry_timestamp_ms(self, offset: int) -> int:
        return self.wal.get(offset).timestamp_ms

    def _trim_wal(self, before_offset: int) -> int:
        """Delete segments below `before_offset` (applied ones only): once the KV
        is persisted, every applied entry survives power loss in it, and replay
        never needs it again. Returns the WAL's new first offset."""
        self.kv.persist()
        self.counters.wal_trims += 1
        return self.wal.trim_before(before_offset)

    # ---- notifications --------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """True once open-ended streams (notifications, sequence updates) should end."""
        return self._closing or self._streams_ending

    def end_streams(self) -> None:
        """Tell open-ended streams (including a leader's Replicate stream to us) to
        finish, so that a shutdown's grace period only waits for requests that end by
        themselves."""
        self._streams_ending = True
        self._commit_advanced.set()
        self._sequence_advanced.set()
        self._progress.set()

    async def wait_for_commit_after(self, offset: int) -> None:
        """Return once the applied offset is past `offset` (or the shard closes)."""
        while self.applied_offset <= offset and not self.closing:
            await self._commit_advanced.wait()

    async def wait_for_sequence_update(self, generation: int) -> None:
        """Return once a group with sequence puts was applied after `generation` was
        read from `sequence_generation` (or the shard closes)."""
        while self.sequence_generation == generation and not self.closing:
            await self._sequence_advanced.wait()

    # ---- the pipeline ---------------------------------------------------------------

    def commit_counted(self) -> None:
        """The term's quorum (ShardCore.leading) counted what followers answered
        (replication/leader.py). Read from the quorum of the term this replica
        leads now: a sender of an earlier leadership may still be finishing."""
        leading = self.core.leading
        if leading is not None and self.core.on_commit(leading.commit_offset):
            self._commit_moved()

    def _commit_moved(self) -> None:
        """More is committed: apply it; as leader, the writes folded meanwhile go
        out now, and followers learn the new commit offset with the next message."""
        self._wake_applier.set()
        self._seal_fold()
        leader = self._leader
        if leader is not None:
            leader.entries_appended()

    async def _sync_loop(self) -> None:
        while True:
            if self.wal.synced_offset >= self.wal.last_offset:
                if self._closing:
                    self._wake_applier.set()
                    return
                await self._wake_syncer.wait()
                self._wake_syncer.clear()
                continue
            started_ns = time.perf_counter_ns()
            try:
                await self._disk.run(self.wal.sync)
            except Exception as error:  # an fsync failure leaves the disk state unknown
                self._fail(error)
                return
            self.counters.wal_sync_latency.record_since(started_ns)
            self._on_durable()

    def _on_durable(self) -> None:
        self._publish_progress()
        moved = self.core.on_local_durable(self.durable_offset)
        leader = self._leader
        if leader is not None:
            leader.own_durability_counted()
        if moved:
            self._commit_moved()
        # A leader's followers may have committed entries before its own fsync
        # covered them: those become appliable now, with no commit change to say so.
        if self._apply_step.has_more(self.durable_offset):
            self._wake_applier.set()

    async def state_digest_at(self, offset: int, timeout_s: float) -> StateDigest:
        """The digest of the records as they were right after applying `offset`.

        Below it, applying stops at `offset` until the view is taken (an apply group
        never straddles it), so that replicas reaching it at different times all
        describe the same state. OffsetPassed once applied beyond it; TimeoutError
        if it is not reached within `timeout_s` (nothing is committed up to it)."""
        self.core.stop_applying_at(offset)
        try:
            async with asyncio.timeout(timeout_s):
                while self.applied_offset < offset:
                    if self.closing:
                        raise Unavailable(f"shard {self.shard_id} is closing")
                    await self._commit_advanced.wait()
            self.core.check_view_at(offset)
            # Taken now, with no await since applying stopped at `offset`: the view
            # holds exactly the state at `offset`.
            items = self.kv.scan(Column.RECORDS, b"", None, bulk=True)
        finally:
            self.core.resume_applying_at(offset)
            self._wake_applier.set()
        builder = DigestBuilder()
        for count, (key, value) in enumerate(items, 1):
            builder.add(key, value)
            if count % _DIGEST_ITEMS_PER_TURN == 0:
                await asyncio.sleep(0)  # let requests in between slices
                if self.closing:
                    # The KV the view reads may be closed under it.
                    raise Unavailable(f"shard {self.shard_id} is closing")
        return builder.digest()

    async def _apply_loop(self) -> None:
        step = self._apply_step
        while True:
            await self._wake_applier.wait()
            self._wake_applier.clear()
            while step.has_more(self.durable_offset):
                leader = self._leader
                keep_for_followers = self.core.has_followers
                try:
                    outcome = step.next(
                        self.durable_offset,
                        self.wal.read,
                        self.core.leading is not None,
                        keep_for_followers,
                    )
                except ApplyFailed as failed:
                    self._fail(failed.__cause__ or failed, applying=failed.group)
                    return
                self._space_freed.set()
                if isinstance(outcome, WaitForCommit):
                    break
                self._publish_applied()
                if isinstance(outcome, WroteLeaderChanges):
                    # The changes do not say whether they hold sequence keys (the
                    # leader's apply step knew): readers of sequence updates look again.
                    self._publish_sequence_update()
                else:
                    if leader is not None and keep_for_followers:
                        # Followers learn the commit offset only as far as we applied
                        # (sender.py): what we just applied is theirs to learn now.
                        leader.entries_appended()
                    if outcome.sequence_keys_generated:
                        self._publish_sequence_update()
                    for pending, result in zip(outcome.group, outcome.results, strict=True):
                        if pending.waiter is not None and not pending.waiter.done():
                            pending.waiter.set_result(result)
                    if leader is not None and not self.core.taken_over:
                        self._finish_takeover(self.core.term)
                # Let the loop take in more requests between groups.
                await asyncio.sleep(0)
            if self._closing and self._tasks[0].done():
                return

    def take_leader_changes(self, term: int, groups: Sequence[rpb.AppliedChanges]) -> None:
        """Applied changes from our leader of `term`, sent with its entries."""
        self._apply_step.take_leader_changes(term, groups)

    def _publish_sequence_update(self) -> None:
        self.sequence_generation += 1
        advanced, self._sequence_advanced = self._sequence_advanced, asyncio.Event()
        advanced.set()

    def _publish_applied(self) -> None:
        advanced, self._commit_advanced = self._commit_advanced, asyncio.Event()
        advanced.set()
        self._publish_progress()

    def _fail(self, error: BaseException, applying: Sequence[_Pending] = ()) -> None:
        """Refuse further writes; the writers waiting, those of the group being
        applied (`applying`, already taken off the pending queue) included, are told
        the outcome of theirs is unknown."""
        log.error("shard %d failed, refusing further writes: %r", self.shard_id, error)
        self._failure = error
        self._apply_step.on_failed()
        self._drop_fold(Unavailable(f"shard {self.shard_id} failed: {error}"))
        failure = WriteOutcomeUnknown(f"shard {self.shard_id} failed: {error}")
        for pending in itertools.chain(applying, self.core.pending.drop_all()):
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(failure)
        self._space_freed.set()
        self._publish_progress()

    # ---- lifecycle ------------------------------------------------------------------

    async def close(self) -> None:
        """Finish what can commit without waiting on followers, fail the rest, then
        release the WAL and KV."""
        self._closing = True
        self._drop_fold(Unavailable(f"shard {self.shard_id} is shutting down"))
        self._commit_advanced.set()  # subscribers waiting for commits see the close
        self._sequence_advanced.set()
        self._progress.set()
        for background in self._tasks[2:]:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
        self._wake_syncer.set()
        self._wake_applier.set()
        self._space_freed.set()
        for task in self._tasks[:2]:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=30)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            # The applier ends once it sees the syncer done; a syncer cancelled here
            # (not ending by itself, which wakes it) would leave it asleep.
            self._wake_applier.set()
        await self._carry_out(self.core.step(Closing()))
        for pending in self.core.pending:
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(
                    WriteOutcomeUnknown(f"shard {self.shard_id} closed before the write committed")
                )
        self._disk.close()
        self.wal.close()
        self.kv.close()
