"""One shard replica's pipeline: two asyncio tasks that carry entries from the log
to the clients' answers, and the notifications of their progress.

    syncer   -> one fdatasync in a worker thread covers every entry appended so far
                (group commit); the durable offset counts as the leader's own
                acknowledgement, or goes back to the leader from a follower
    applier  -> applies entries up to ShardCore's apply limit (committed and
                durable), a group at a time, as ONE atomic KV batch that also
                records the applied offset (apply_step.py); then answers the clients

A failed fsync or apply fails the replica: it refuses further writes, and every
writer still waiting is told the outcome of its write is unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Sequence
from typing import Any

from cairn.common.errors import Unavailable, WriteOutcomeUnknown
from cairn.storage.apply_step import ApplyFailed, WaitForCommit, WroteLeaderChanges
from cairn.storage.core.pending import PendingEntry
from cairn.storage.core.state_digest import DigestBuilder, StateDigest
from cairn.storage.kv import Column
from cairn.storage.shard_context import ShardContext
from cairn.storage.shard_takeover import LeaderTakeover
from cairn.storage.shard_writes import LeaderWrites

log = logging.getLogger(__name__)

# A state digest hashes this many records between turns of the event loop.
_DIGEST_ITEMS_PER_TURN = 1000
# How long a closing replica waits for its syncer and applier to finish.
_CLOSE_TIMEOUT_S = 30


class ShardPipeline:
    def __init__(self, shard: ShardContext, writes: LeaderWrites, takeover: LeaderTakeover) -> None:
        self._shard = shard
        self._writes = writes
        self._takeover = takeover
        # Replaced (and the old one set) whenever the applied offset advances.
        self._applied_advanced = asyncio.Event()
        # Counts applied groups that generated sequence keys; the event is replaced
        # (and the old one set) at each, for GetSequenceUpdates subscribers.
        self.sequence_generation = 0
        self._sequence_advanced = asyncio.Event()
        # Replaced (and the old one set) whenever the durable or applied offset
        # advances (a follower reports both to its leader).
        self._progress = asyncio.Event()
        self._syncer, self._applier = self._started()

    def start(self) -> None:
        """Run the syncer and applier again (after `stop_for_new_storage`)."""
        self._syncer, self._applier = self._started()

    def _started(self) -> tuple[asyncio.Task[None], asyncio.Task[None]]:
        loop, shard_id = self._shard.loop, self._shard.shard_id
        return (
            loop.create_task(self._sync_loop(), name=f"syncer-{shard_id}"),
            loop.create_task(self._apply_loop(), name=f"applier-{shard_id}"),
        )

    @property
    def tasks(self) -> tuple[asyncio.Task[None], asyncio.Task[None]]:
        return self._syncer, self._applier

    # ---- the syncer -------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        shard = self._shard
        while True:
            wal = shard.wal
            if wal.synced_offset >= wal.last_offset:
                if shard.closing:
                    shard.wake_applier.set()
                    return
                await shard.wake_syncer.wait()
                shard.wake_syncer.clear()
                continue
            started_ns = time.perf_counter_ns()
            try:
                await shard.disk.run(wal.sync)
            except Exception as error:  # an fsync failure leaves the disk state unknown
                self.fail(error)
                return
            shard.counters.wal_sync_latency.record_since(started_ns)
            self.on_durable()

    def on_durable(self) -> None:
        """The WAL synced: the durable offset may have moved."""
        shard = self._shard
        self._publish_progress()
        durable = shard.durable_offset
        moved = shard.core.on_local_durable(durable)
        leader = shard.leader
        if leader is not None:
            leader.own_durability_counted()
        if moved:
            self._commit_moved()
        # A leader's followers may have committed entries before its own fsync
        # covered them: those become appliable now, with no commit change to say so.
        if shard.apply_step.has_more(durable):
            shard.wake_applier.set()

    def commit_counted(self) -> None:
        """The term's quorum (ShardCore.leading) counted what followers answered
        (replication/leader.py). Read from the quorum of the term this replica
        leads now: a sender of an earlier leadership may still be finishing."""
        core = self._shard.core
        leading = core.leading
        if leading is not None and core.on_commit(leading.commit_offset):
            self._commit_moved()

    def _commit_moved(self) -> None:
        """More is committed: apply it; as leader, the writes folded meanwhile go
        out now, and followers learn the new commit offset with the next message."""
        shard = self._shard
        shard.wake_applier.set()
        self._writes.seal_fold()
        leader = shard.leader
        if leader is not None:
            leader.entries_appended()

    # ---- the applier ------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        shard = self._shard
        step = shard.apply_step
        core = shard.core
        while True:
            await shard.wake_applier.wait()
            shard.wake_applier.clear()
            while step.has_more(shard.durable_offset):
                leader = shard.leader
                keep_for_followers = core.has_followers
                try:
                    outcome = step.next(
                        shard.durable_offset,
                        shard.wal.read,
                        core.leading is not None,
                        keep_for_followers,
                    )
                except ApplyFailed as failed:
                    self.fail(failed.__cause__ or failed, applying=failed.group)
                    return
                shard.space_freed.set()
                if isinstance(outcome, WaitForCommit):
                    break
                self.publish_applied()
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
                    if leader is not None and not core.taken_over:
                        self._takeover.on_first_entry_applied(core.term)
                # Let the loop take in more requests between groups.
                await asyncio.sleep(0)
            if shard.closing and self._syncer.done():
                return

    def fail(self, error: BaseException, applying: Sequence[PendingEntry[Any]] = ()) -> None:
        """Refuse further writes; the writers waiting, those of the group being
        applied (`applying`, already taken off the pending queue) included, are told
        the outcome of theirs is unknown."""
        shard = self._shard
        log.error("shard %d failed, refusing further writes: %r", shard.shard_id, error)
        shard.failure = error
        shard.apply_step.on_failed()
        self._writes.drop_fold(Unavailable(f"shard {shard.shard_id} failed: {error}"))
        failure = WriteOutcomeUnknown(f"shard {shard.shard_id} failed: {error}")
        for pending in itertools.chain(applying, shard.core.pending.drop_all()):
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(failure)
        shard.space_freed.set()
        self._publish_progress()

    async def state_digest_at(self, offset: int, timeout_s: float) -> StateDigest:
        """The digest of the records as they were right after applying `offset`.

        Below it, applying stops at `offset` until the view is taken (an apply group
        never straddles it), so that replicas reaching it at different times all
        describe the same state. OffsetPassed once applied beyond it; TimeoutError
        if it is not reached within `timeout_s` (nothing is committed up to it)."""
        shard = self._shard
        core = shard.core
        core.stop_applying_at(offset)
        try:
            async with asyncio.timeout(timeout_s):
                while core.applied_offset < offset:
                    if shard.ending:
                        raise Unavailable(f"shard {shard.shard_id} is closing")
                    await self._applied_advanced.wait()
            core.check_view_at(offset)
            # Taken now, with no await since applying stopped at `offset`: the view
            # holds exactly the state at `offset`.
            items = shard.kv.scan(Column.RECORDS, b"", None, bulk=True)
        finally:
            core.resume_applying_at(offset)
            shard.wake_applier.set()
        builder = DigestBuilder()
        for count, (key, value) in enumerate(items, 1):
            builder.add(key, value)
            if count % _DIGEST_ITEMS_PER_TURN == 0:
                await asyncio.sleep(0)  # let requests in between slices
                if shard.ending:
                    # The KV the view reads may be closed under it.
                    raise Unavailable(f"shard {shard.shard_id} is closing")
        return builder.digest()

    # ---- stopping -----------------------------------------------------------------------

    async def stop_for_new_storage(self) -> None:
        """Stop the syncer and applier (they touch the WAL and KV) and drop what is
        pending: a snapshot replaces it all. `start` runs them again."""
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pending in self._shard.core.pending.drop_all():
            if pending.waiter is not None and not pending.waiter.done():
                pending.waiter.set_exception(
                    WriteOutcomeUnknown("replaced by a snapshot; the write may or may not commit")
                )
        self._shard.apply_step.on_storage_replaced()

    async def drain(self) -> None:
        """As the replica closes: sync and apply what can be, then end both tasks."""
        shard = self._shard
        shard.wake_syncer.set()
        shard.wake_applier.set()
        shard.space_freed.set()
        for task in self.tasks:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=_CLOSE_TIMEOUT_S)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            # The applier ends once it sees the syncer done; a syncer cancelled here
            # (not ending by itself, which wakes it) would leave it asleep.
            shard.wake_applier.set()

    # ---- progress, for waiting readers and the leader ------------------------------------

    def publish_applied(self) -> None:
        advanced, self._applied_advanced = self._applied_advanced, asyncio.Event()
        advanced.set()
        self._publish_progress()

    def _publish_sequence_update(self) -> None:
        self.sequence_generation += 1
        advanced, self._sequence_advanced = self._sequence_advanced, asyncio.Event()
        advanced.set()

    def _publish_progress(self) -> None:
        advanced, self._progress = self._progress, asyncio.Event()
        advanced.set()

    def wake_waiters(self) -> None:
        """Wake everyone waiting for progress (to see the replica close)."""
        self._applied_advanced.set()
        self._sequence_advanced.set()
        self._progress.set()

    async def wait_for_commit_after(self, offset: int) -> None:
        """Return once the applied offset is past `offset` (or the shard closes)."""
        shard = self._shard
        while shard.core.applied_offset <= offset and not shard.ending:
            await self._applied_advanced.wait()

    async def wait_for_sequence_update(self, generation: int) -> None:
        """Return once a group with sequence puts was applied after `generation` was
        read from `sequence_generation` (or the shard closes)."""
        while self.sequence_generation == generation and not self._shard.ending:
            await self._sequence_advanced.wait()

    async def wait_progress_after(
        self, durable_offset: int, applied_offset: int
    ) -> tuple[int, int]:
        """The durable and applied offsets, once either is past the one given (or
        the shard closes)."""
        shard = self._shard
        while (
            shard.durable_offset <= durable_offset
            and shard.core.applied_offset <= applied_offset
            and not shard.ending
            and shard.failure is None
        ):
            await self._progress.wait()
        return shard.durable_offset, shard.core.applied_offset

    async def wait_durable_after(self, durable_offset: int) -> int:
        """The durable offset, once it is past the one given (or the shard closes)."""
        shard = self._shard
        while shard.durable_offset <= durable_offset and not shard.ending and shard.failure is None:
            await self._progress.wait()
        return shard.durable_offset
