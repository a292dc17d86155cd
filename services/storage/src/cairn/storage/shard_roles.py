"""One shard replica's changes of role, term and log, as its controller and its
leader ask for them: fence at a new term, lead, follow (dropping what disagrees
with the leader's log), take entries and snapshots from the leader. ShardCore
decides each (its `Ready` says what to do); this carries it out, in the order
`Ready` lists: persist the term, step down, reset the stream, cut the log, sync.

A new leader first logs a TERM_START entry and serves reads once that entry is
applied (shard_takeover.py): by then everything committed before it is applied too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from cairn.common.errors import InvalidTerm, Unavailable, WriteOutcomeUnknown
from cairn.proto import replication_pb2 as rpb
from cairn.storage import folding
from cairn.storage.core.entries import TERM_START
from cairn.storage.core.events import BecomeLeader, NewTerm, SnapshotOffered, Truncate
from cairn.storage.core.meta import INCARNATION_KEY, TERM_KEY, encode_i64, encode_u64
from cairn.storage.core.ready import Ready, SteppedDown
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId, TermHistory
from cairn.storage.kv import Column
from cairn.storage.ports import LeaderRole, ReplicaFiles, SnapshotInstall
from cairn.storage.shard_context import ShardContext
from cairn.storage.shard_pipeline import ShardPipeline
from cairn.storage.shard_takeover import LeaderTakeover
from cairn.storage.shard_writes import LeaderWrites
from cairn.storage.wal import LogEntry, WalError

log = logging.getLogger(__name__)


class RoleChanges:
    def __init__(
        self,
        shard: ShardContext,
        pipeline: ShardPipeline,
        writes: LeaderWrites,
        takeover: LeaderTakeover,
        files: ReplicaFiles | None,
        incarnation: int,
    ) -> None:
        """`files` (where the KV and WAL were opened from) is needed to install
        snapshots; `incarnation` is kept through them."""
        self._shard = shard
        self._pipeline = pipeline
        self._writes = writes
        self._takeover = takeover
        self._files = files
        self._incarnation = incarnation
        self._snapshot_receiving = False

    # ---- the controller's calls -----------------------------------------------------------

    async def new_term(self, term: int) -> tuple[EntryId, int]:
        """Fence at `term`: returns the head and the commit offset."""
        shard = self._shard
        async with shard.storage_lock:
            await self.carry_out(shard.core.step(NewTerm(term)))
        log.info("shard %d: fenced at term %d, head %s", shard.shard_id, term, shard.core.head)
        return shard.core.head, shard.core.commit_offset

    async def become_leader(
        self,
        term: int,
        me: Member,
        make_leader: Callable[[LeaderCore], LeaderRole],
        followers: Sequence[Member] = (),
        incarnations: Mapping[str, int] | None = None,
    ) -> EntryId:
        """Lead `term` with `followers` (`incarnations`: of their data, as the
        controller recorded them): log its first entry, start replicating
        (`make_leader` builds the replication side around the term's quorum)."""
        shard = self._shard
        async with shard.storage_lock:
            shard.check_writable()
            event = BecomeLeader(
                term, me, tuple(followers), incarnations, shard.replication.max_in_flight_entries
            )
            lead = shard.core.step(event).lead
            assert lead is not None
            self._takeover.on_leading()
            shard.apply_step.on_leading()
            shard.leader = make_leader(lead.quorum)
            body = lead.first_entry
            await self._writes.append(
                TERM_START, body.SerializeToString(), body, wait_for_space=False
            )
        term_start = EntryId(term, shard.core.term_start_offset)
        log.info(
            "shard %d: leading term %d from offset %d", shard.shard_id, term, term_start.offset
        )
        return term_start

    # ---- the leader's calls -----------------------------------------------------------------

    async def truncate(self, term: int, leader: Member, leader_log: TermHistory) -> EntryId:
        """Follow `leader` in `term`, dropping what of our log disagrees with its log.
        Returns our head."""
        shard = self._shard
        async with shard.storage_lock:
            shard.check_writable()
            await self.carry_out(shard.core.step(Truncate(term, leader, leader_log)))
            return shard.core.head

    async def append_replicated(
        self, term: int, entries: Sequence[LogEntry], leader_commit_offset: int
    ) -> None:
        """Entries from our leader (checked to continue our log), and its commit offset."""
        shard = self._shard
        core = shard.core
        shard.check_writable()
        if shard.log_busy:
            raise Unavailable(f"shard {shard.shard_id} is truncating or replacing its log")
        if entries:
            # No waiting for room here: the leader sends only a bounded window beyond
            # what we hold durably, and waiting would stop us reading the commit
            # offset that lets us apply. What waits to be applied is bounded apart.
            core.check_entries(term, entries[0].offset)
            started_ns = time.perf_counter_ns()
            try:
                shard.wal.append_many(entries)
            except (OSError, WalError) as error:
                raise Unavailable(
                    f"shard {shard.shard_id} cannot write its log: {error}"
                ) from error
            shard.counters.wal_append_latency.record_since(started_ns)
            shard.wake_syncer.set()
        else:
            core.check_entries(term, core.log.last_offset + 1)
        if core.on_replicated(entries, leader_commit_offset, shard.durable_offset):
            shard.wake_applier.set()

    async def install_snapshot(
        self, term: int, leader: Member, chunks: AsyncIterator[rpb.SnapshotChunk]
    ) -> EntryId:
        """Replace our state with a snapshot from the leader of `term` (see
        snapshot.py); `chunks` starts with the one carrying the header. Returns the
        new head."""
        shard = self._shard
        if self._files is None:
            raise Unavailable(f"shard {shard.shard_id} cannot install snapshots")
        if self._snapshot_receiving:
            raise Unavailable(f"shard {shard.shard_id} is already receiving a snapshot")
        self._snapshot_receiving = True
        counters = shard.counters
        counters.snapshots_started += 1
        started_ns = time.perf_counter_ns()
        try:
            async with shard.storage_lock:
                shard.check_writable()
                await self.carry_out(shard.core.step(SnapshotOffered(term, leader)))
            # Received without the lock (it may take long): the replica keeps
            # answering fences meanwhile, and the install checks nothing changed.
            installer = self._files.installer([(INCARNATION_KEY, encode_u64(self._incarnation))])
            try:
                async for chunk in chunks:
                    installer.add(chunk)
                    counters.snapshot_bytes += chunk.ByteSize()
                    await asyncio.sleep(0)
            except BaseException:
                installer.abort()
                raise
            async with shard.storage_lock:
                try:
                    shard.core.check_still_following(term, leader)
                except InvalidTerm:
                    installer.abort()
                    raise
                head = await self._install(self._files, installer)
                counters.snapshots_completed += 1
                counters.snapshot_latency.record_since(started_ns)
                return head
        finally:
            self._snapshot_receiving = False

    # ---- carrying out the core's decisions ----------------------------------------------------

    async def carry_out(self, ready: Ready[asyncio.Future[Any]]) -> None:
        """Do what the core decided for an event (ready.py), in its order."""
        if ready.persist_term:
            await self._persist_term()
        if ready.stepped_down is not None:
            await self._step_down(ready.stepped_down)
        if ready.new_stream:
            self._shard.apply_step.on_new_stream()
        if ready.cut_log_after is not None:
            await self._cut_log(ready.cut_log_after)
        if ready.sync_log:
            await self._sync_log()

    async def _persist_term(self) -> None:
        """Make the term durable before anyone is told about it."""
        shard = self._shard
        shard.kv.write([(Column.META, TERM_KEY, encode_i64(shard.core.term))])
        await shard.disk.run(shard.kv.sync)

    async def _step_down(self, stepped_down: SteppedDown[asyncio.Future[Any]]) -> None:
        """Stop leading: the replication side stops, waiting writers are told to go
        elsewhere (SteppedDown says what each may be told)."""
        shard = self._shard
        leader, shard.leader = shard.leader, None
        self._takeover.on_stepped_down()
        shard.apply_step.on_stepped_down()
        if stepped_down.not_logged is not None:
            error = Unavailable(f"shard {shard.shard_id}: leadership changed")
            folding.fail(stepped_down.not_logged.waiters, error)
        unknown = WriteOutcomeUnknown(
            f"shard {shard.shard_id}: leadership changed; the write may or may not commit"
        )
        for future in stepped_down.outcome_unknown:
            if not future.done():
                future.set_exception(unknown)
        if leader is not None:
            await leader.stop()
        shard.space_freed.set()

    async def _cut_log(self, keep: int) -> None:
        shard = self._shard
        log.info(
            "shard %d: dropping entries %d..%d that disagree with the leader of term %d",
            shard.shard_id,
            keep + 1,
            shard.core.log.last_offset,
            shard.core.term,
        )
        shard.log_busy = True
        try:
            await shard.disk.run(functools.partial(shard.wal.truncate_after, keep))
        finally:
            shard.log_busy = False
        shard.core.on_log_cut(keep)
        shard.space_freed.set()

    async def _sync_log(self) -> None:
        shard = self._shard
        if shard.wal.synced_offset < shard.core.log.last_offset:
            await shard.disk.run(shard.wal.sync)
            self._pipeline.on_durable()

    async def _install(self, files: ReplicaFiles, installer: SnapshotInstall) -> EntryId:
        shard = self._shard
        # The KV and WAL are replaced under the pipeline: stop it first.
        shard.log_busy = True
        await self._pipeline.stop_for_new_storage()
        shard.kv.close()
        shard.wal.close()
        try:
            base = installer.finish()
        except BaseException:
            installer.abort()
            raise
        finally:
            # Open again (also finishing an install a failure interrupted).
            shard.kv, shard.wal = files.open()
            shard.apply_step.on_reopened(shard.kv)
            self._pipeline.start()
            shard.log_busy = False
        shard.core.on_snapshot_installed(base)
        await self._persist_term()
        self._pipeline.publish_applied()
        log.info("shard %d: installed a snapshot up to %s", shard.shard_id, base)
        return base
