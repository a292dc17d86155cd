"""The apply step of a shard replica: committed entries into its KV, a group at a
time, and the caches that describe the KV kept true.

ShardCore decides how far to apply and which entries go together (its apply
limit and groups); this step does the I/O: it reads entries the write buffer
does not hold from the log, applies a group into one overlay (core/apply.py),
writes it as one KV batch with the new applied offset, and tells the core. It
is synchronous, over two ports (the KV and a log reader), so that the storage
pod's asyncio pipeline (shard.py) and the simulation (tests/simulation) run the
same step.

The three caches over the KV are kept here, and changed only here:
- the header cache (core/apply.py): record headers the apply step reads;
- the read cache (core/read_cache.py): a leader's answers to exact-key gets;
- applied changes (core/replication/applied_changes.py): what a leader's apply
  step wrote, kept for its followers, and what a follower's leader sent of it.
Whatever changes the KV behind the apply step's back (a snapshot, the leader's
changes written as they are, a failure half way) or the role that may use a
cache goes through one of the `on_*` methods below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import Limits, ReplicationSettings
from cairn.storage.core.apply import HeaderCache, PendingChanges
from cairn.storage.core.entries import LogEntry
from cairn.storage.core.entry_apply import ShardRules, apply_entry
from cairn.storage.core.pending import PendingEntry, ReadLog, W, decoded
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.core.replication.applied_changes import (
    ChangesStash,
    ChangesUse,
    KeptChanges,
    use_of,
)
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.kv import KvStore
from cairn.storage.kv.encoded_changes import EncodedChangesError, encode_changes

log = logging.getLogger(__name__)

# Reads log entries first..last (the WAL's `read`).
LogReader = Callable[[int, int], Iterable[LogEntry]]


@dataclass(frozen=True, slots=True)
class Applied(Generic[W]):
    """A group applied: its entries and their results, in order (the writers of
    those with a waiter get theirs)."""

    group: Sequence[PendingEntry[W]]
    results: Sequence[Any]
    # Sequence keys were generated (GetSequenceUpdates subscribers look again).
    sequence_keys_generated: bool


@dataclass(frozen=True, slots=True)
class WroteLeaderChanges:
    """Entries up to `last_offset` were applied by writing what the leader's apply
    step wrote for them. Whether they generated sequence keys is not known here."""

    last_offset: int


class WaitForCommit:
    """The leader's changes for the next entries are held for when they are
    appliable: nothing to do until the commit offset moves."""


WAIT_FOR_COMMIT = WaitForCommit()


class ApplyFailed(Exception):
    """The KV write failed: the shard's state on disk is unknown beyond the last
    applied offset. `group`: the entries being applied (no longer in the write
    buffer), whose writers must be told."""

    def __init__(self, error: BaseException, group: Sequence[PendingEntry[Any]]) -> None:
        super().__init__(str(error))
        self.group = group


class ApplyStep(Generic[W]):
    def __init__(
        self,
        core: ShardCore[W],
        kv: KvStore,
        rules: ShardRules,
        limits: Limits,
        replication: ReplicationSettings,
    ) -> None:
        self.core = core
        self.kv = kv
        self.rules = rules
        self.header_cache = HeaderCache(limits.max_cached_headers_per_shard)
        # Held only while leading (the one role that serves reads).
        self.read_cache = ReadCache(
            limits.max_read_cache_entries_per_shard, limits.max_read_cache_bytes_per_shard
        )
        # What the apply step wrote, for followers to write rather than apply
        # (leader), and what the leader sent of it (follower).
        self.changes_for_followers = KeptChanges(
            replication.max_applied_changes_groups, replication.max_applied_changes_bytes
        )
        self.leader_changes = ChangesStash(
            replication.max_applied_changes_groups, replication.max_applied_changes_bytes
        )
        self.entries_applied_from_leader_changes = 0

    # -- applying ----------------------------------------------------------------------

    def has_more(self, durable_offset: int) -> bool:
        """Whether there are entries to apply (ShardCore.apply_limit)."""
        return self.core.applied_offset < self.core.apply_limit(durable_offset)

    def next(
        self, durable_offset: int, read_log: LogReader, leading: bool, keep_for_followers: bool
    ) -> Applied[W] | WroteLeaderChanges | WaitForCommit:
        """Apply the next entries (`has_more`, with the log durable up to
        `durable_offset`): as a follower, by writing its leader's changes for
        them when it holds those; else a group by the core's bounds.
        `keep_for_followers`: a leader with followers keeps what it wrote for
        them. Raises ApplyFailed."""
        limit = self.core.apply_limit(durable_offset)
        if not leading and self.leader_changes:
            outcome = self._write_leader_changes(limit, self.core.appliable_offset(durable_offset))
            if outcome is not None:
                return outcome
        group = self._next_group(limit, read_log)
        try:
            state = PendingChanges(self.kv, self.header_cache, self.read_cache)
            results = [
                apply_entry(
                    self.rules,
                    state,
                    pending.kind,
                    pending.body,
                    pending.offset,
                    pending.entry.timestamp_ms,
                    pending.plain_puts,
                    pending.waiter is not None,
                )
                for pending in group
            ]
            state.set_commit_offset(group[-1].offset)
            changes = state.column_changes()
            # Inline on purpose: rocksdict holds the GIL while RocksDB writes, so a
            # worker thread would only add hand-off cost. Unlogged: a crash loses
            # the batch, and the WAL (kept until `persist`) redoes it.
            self.kv.write_unlogged(changes)
            state.written()
            if keep_for_followers:
                self.changes_for_followers.record(
                    group[0].offset, group[-1].offset, group[-1].entry.term, encode_changes(changes)
                )
        except Exception as error:
            raise ApplyFailed(error, group) from error
        self.core.on_applied(group[-1].offset)
        return Applied(group, results, state.sequence_keys_generated)

    def _next_group(self, limit: int, read_log: LogReader) -> Sequence[PendingEntry[W]]:
        taken = self.core.next_apply_group(limit)
        if isinstance(taken, ReadLog):
            read: list[PendingEntry[W]] = [
                decoded(entry) for entry in read_log(taken.first, taken.last)
            ]
            return self.core.group_of(read)
        return taken

    def take_leader_changes(self, term: int, groups: Sequence[rpb.AppliedChanges]) -> None:
        """Applied changes a follower's leader of `term` sent with its entries:
        kept if this replica follows that term (a stale stream's are not)."""
        if groups and self.core.follows(term):
            self.leader_changes.add(groups, self.core.applied_offset)

    def _write_leader_changes(
        self, limit: int, appliable: int
    ) -> WroteLeaderChanges | WaitForCommit | None:
        """Apply the next entries by writing the changes the leader's apply step
        wrote for them, if held (applied_changes.py); None: apply them here."""
        core = self.core
        first = core.applied_offset + 1
        stash = self.leader_changes
        group = stash.get(first)
        if group is None:
            stash.drop_before(first)
            return None
        last = group.last_offset
        history = core.log
        use = use_of(group, core.applied_offset, limit, history.last_offset, history.term_at(last))
        if use is ChangesUse.WAIT:
            if last <= appliable:
                # Held back only by a state digest's stop inside the group: apply
                # these entries here, which can stop there.
                stash.take(first)
                return None
            return WAIT_FOR_COMMIT
        stash.take(first)
        if use is ChangesUse.APPLY:
            return None
        try:
            self.kv.write_encoded_unlogged(group.changes)
        except EncodedChangesError as error:
            # Nothing was written: apply the entries here.
            log.warning("shard %d: leader changes unusable (%s)", core.shard_id, error)
            return None
        except Exception as error:
            raise ApplyFailed(error, ()) from error
        core.pending.take_through(last)
        # Written behind the header cache's back: it no longer describes the KV.
        if self.header_cache:
            self.header_cache.clear()
        core.on_applied(last)
        self.entries_applied_from_leader_changes += last - first + 1
        return WroteLeaderChanges(last)

    # -- what changes the caches -------------------------------------------------------

    def on_leading(self) -> None:
        """A new term led from here: reads are served from the cache, starting
        empty; no changes of an earlier role are kept."""
        self.read_cache.enable(self.kv)
        self.leader_changes.clear()
        self.changes_for_followers.clear()

    def on_stepped_down(self) -> None:
        self.read_cache.disable()
        self.changes_for_followers.clear()

    def on_new_stream(self) -> None:
        """A follower starts a stream from its leader: what an earlier one sent
        is not needed (and if the log is cut, may describe entries it no longer
        holds)."""
        self.leader_changes.clear()

    def on_storage_replaced(self) -> None:
        """The KV is being replaced (a snapshot): nothing cached describes it."""
        self.header_cache.clear()
        self.read_cache.clear()
        self.leader_changes.clear()

    def on_reopened(self, kv: KvStore) -> None:
        """The KV was opened again (after a snapshot); off until the next term (a
        replica reopens its storage as a follower)."""
        self.kv = kv
        self.read_cache.disable()

    def on_failed(self) -> None:
        """A step failed: it may have changed the KV without telling the cache (a
        batch written, then an error); from now on reads go to the KV."""
        self.read_cache.disable()
