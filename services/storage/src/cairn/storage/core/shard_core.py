"""The decisions of one shard replica, without I/O: ReplicaCore's roles and terms,
plus the rules of the pipeline that moves entries from the log to the KV.

    applied <= min(commit, durable)   a replica applies only what a majority holds
                                      and it holds itself durably; a state digest
                                      may hold applying at an offset (digest stops)
    follower commit                   what its leader said is committed, as far as
                                      it holds it durably (never goes back)
    leader commit                     what its quorum counted (LeaderCore, owned
                                      here while leading: its own durable offset
                                      and its followers' acknowledgements)
    taking over                       a new leader serves once its term's first entry
                                      is applied and any older leader's lease is over
    timestamps                        an entry never gets an earlier time than the
                                      log's last one
    backpressure                      entries logged but not applied are bounded in
                                      number and bytes
    folding                           a leader collects client writes into one entry
                                      while entries wait for their commit
    apply groups                      entries are applied a group at a time, one KV
                                      batch each, bounded in entries and operations

The driver (shard.py) tells it what happened (`on_*`) and asks what to do; it
keeps no clock (times are arguments) and does no I/O. It is the first part of the
pure shard core that issue 45 describes (every decision of a replica here, the
driver a loop over its output). While leading it owns the term's LeaderCore
(`leading`): the replica's own durability goes to it from here
(`on_local_durable`); the replication runtime (replication/leader.py) works
its followers' streams with it and tells the counted commit offset through
`on_commit`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, assert_never

from google.protobuf.message import Message

from cairn.common.errors import OffsetPassed, Overloaded
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.apply import MAX_RECORDS_PER_CLOSE_ENTRY
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CLOSE_SESSION,
    FOLDED_WRITES,
    Folded,
    LogEntry,
)
from cairn.storage.core.events import (
    BecomeLeader,
    Closing,
    Event,
    NewTerm,
    SnapshotOffered,
    Truncate,
)
from cairn.storage.core.folding import WriteFold, keys_of, may_fold, starts_fold
from cairn.storage.core.pending import PendingEntry, PendingQueue, ReadLog, W, decoded
from cairn.storage.core.ready import Leading, Ready, SteppedDown
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member, ReplicaCore, Role
from cairn.storage.core.replication.terms import NO_OFFSET, EntryId, TermHistory


@dataclass(frozen=True, slots=True)
class PipelineLimits:
    """How much the pipeline holds logged but not applied, and applies in one batch
    (Limits' per-shard bounds)."""

    max_pending_entries: int
    max_pending_bytes: int
    max_entries_per_apply: int
    max_operations_per_apply: int
    # Folding (folding.py): from how many uncommitted entries a leader folds, and
    # what one fold may hold.
    fold_after_uncommitted_entries: int
    max_operations_per_fold: int
    max_bytes_per_fold: int


def operation_count(kind: int, body: Message | Folded) -> int:
    """What an entry may cost to apply, in record operations."""
    if kind == CLIENT_WRITE:
        assert isinstance(body, pb.WriteRequest)
        return len(body.puts) + len(body.deletes) + len(body.delete_ranges)
    if kind == FOLDED_WRITES:
        assert isinstance(body, Folded)
        return sum(len(request.puts) + len(request.deletes) for request in body.requests)
    if kind == CLOSE_SESSION:
        return MAX_RECORDS_PER_CLOSE_ENTRY
    return 1


@dataclass(slots=True, kw_only=True)
class ShardCore(ReplicaCore, Generic[W]):
    limits: PipelineLimits
    # Logged, not applied yet (what backpressure bounds); `W` is what a writer
    # waits on (pending.py).
    pending: PendingQueue[W] = field(default_factory=PendingQueue)
    # Every entry up to here is in the KV: what readers see.
    applied_offset: int = NO_OFFSET
    # The leader's commit offset as last told (follower).
    leader_commit_offset: int = NO_OFFSET
    # The first entry of the term this replica leads (leader).
    term_start_offset: int = NO_OFFSET
    # A leader has taken over: its first entry is applied, older leases are over.
    taken_over: bool = False
    # The quorum of the term this replica leads (leader).
    leading: LeaderCore | None = None
    last_timestamp_ms: int = 0
    # Offsets at which state digests wait to take their view: applying stops at the
    # lowest until that view is taken.
    digest_stops: list[int] = field(default_factory=list)
    # Client writes a leader collects for its next entry (folding.py).
    fold: WriteFold[W] | None = None

    # -- events ------------------------------------------------------------------------

    def step(self, event: Event) -> Ready[W]:
        """Take `event` (events.py): the core's state changes now, and the answer
        lists what the driver must do for it, in order (ready.py). Raises
        InvalidTerm, changing nothing, for an event of a term this replica may
        no longer act on."""
        match event:
            case NewTerm(term):
                return self._fence(term)
            case BecomeLeader():
                return self._lead(event)
            case Truncate(term, leader, leader_log):
                return self._truncate(term, leader, leader_log)
            case SnapshotOffered(term, leader):
                changed, stepped_down = self._follow(term, leader)
                return Ready(persist_term=changed, stepped_down=stepped_down)
            case Closing():
                was_leading = self.role is Role.LEADER
                if was_leading:
                    self.role = Role.FENCED
                return Ready(stepped_down=self._step_down(was_leading))
            case _:
                assert_never(event)

    def _fence(self, term: int) -> Ready[W]:
        was_leading = self.role is Role.LEADER
        changed = self.fence(term)
        # The controller elects by the head this answers: it must survive a power
        # loss, or the elected replica could lead with a shorter log than it claimed.
        return Ready(persist_term=changed, stepped_down=self._step_down(was_leading), sync_log=True)

    def _lead(self, event: BecomeLeader) -> Ready[W]:
        term_start = self.become_leader(event.term, event.me)
        quorum = LeaderCore(
            event.term,
            event.me,
            event.followers,
            self.commit_offset,
            term_start.offset,
            event.window,
            event.incarnations,
        )
        self.on_leading(term_start, quorum)
        first_entry = internal_pb.TermStartEntry(leader=event.me.internal_address)
        return Ready(lead=Leading(quorum, first_entry))

    def _truncate(self, term: int, leader: Member, leader_log: TermHistory) -> Ready[W]:
        # Both checked before anything changes.
        self.check_may_follow(term, leader)
        keep = self.truncation_point(leader_log, term)
        changed, stepped_down = self._follow(term, leader)
        return Ready(
            changed,
            stepped_down,
            new_stream=True,
            cut_log_after=keep if keep < self.log.last_offset else None,
            # The leader counts our head as acknowledged: it must be durable first.
            sync_log=True,
        )

    def _follow(self, term: int, leader: Member) -> tuple[bool, SteppedDown[W] | None]:
        was_leading = self.role is Role.LEADER
        changed = self.follow(term, leader)
        return changed, self._step_down(was_leading)

    def _step_down(self, was_leading: bool) -> SteppedDown[W] | None:
        if not was_leading:
            return None
        return SteppedDown(tuple(self.on_stepped_down()), self.seal_fold())

    # -- applying ----------------------------------------------------------------------

    def appliable_offset(self, durable_offset: int) -> int:
        """Committed and durable: how far the replica may apply."""
        return min(self.commit_offset, durable_offset)

    def apply_limit(self, durable_offset: int) -> int:
        """How far to apply now: appliable, and not past a digest's stop."""
        limit = self.appliable_offset(durable_offset)
        return min(limit, min(self.digest_stops)) if self.digest_stops else limit

    def apply_group_size(self, operation_counts: Iterable[int]) -> int:
        """How many of the next appliable entries (their operation counts, in order)
        to apply as one batch: the first always, then as many as fit the bounds."""
        limits = self.limits
        size = operations = 0
        for count in operation_counts:
            operations += count
            if size and (
                size >= limits.max_entries_per_apply or operations > limits.max_operations_per_apply
            ):
                break
            size += 1
        return size

    def next_apply_group(self, limit: int) -> list[PendingEntry[W]] | ReadLog:
        """The next entries to apply together (all up to `limit`, past the applied
        offset): taken from the write buffer while it holds them, else a range to
        read from the log (entries logged before a restart or a role change, or a
        follower's that did not fit), which `group_of` cuts to a group."""
        first = self.applied_offset + 1
        pending = self.pending
        # Applied already (a snapshot, or the leader's applied changes, moved past them).
        pending.take_through(first - 1)
        held_first = pending.first_offset
        if held_first is None or held_first > first:
            last = limit if held_first is None else min(limit, held_first - 1)
            return ReadLog(first, min(last, first + self.limits.max_entries_per_apply - 1))
        appliable = pending.held_from(first, limit)
        return pending.take(self.apply_group_size(_operation_counts(appliable)))

    def group_of(self, read: Sequence[PendingEntry[W]]) -> Sequence[PendingEntry[W]]:
        """The group to apply of entries read from the log (`ReadLog`)."""
        return read[: self.apply_group_size(_operation_counts(read))]

    def on_applied(self, offset: int) -> None:
        assert offset >= self.applied_offset, (offset, self.applied_offset)
        self.applied_offset = offset

    def on_snapshot_installed(self, base: EntryId) -> None:
        """The KV and log were replaced by a snapshot up to `base`: all of it is
        committed (the leader sent it from its applied state) and applied."""
        self.log.reset(base)
        self.pending.drop_all()
        self.commit_offset = base.offset
        self.applied_offset = base.offset
        self.leader_commit_offset = max(self.leader_commit_offset, base.offset)

    def stop_applying_at(self, offset: int) -> None:
        """A state digest at `offset` waits for it: applying stops there until
        the view is taken (`resume_applying_at`). OffsetPassed if applied past it
        already: the state at `offset` is gone."""
        if self.applied_offset > offset:
            raise self._passed(offset)
        self.digest_stops.append(offset)

    def check_view_at(self, offset: int) -> None:
        """The digest's view is taken now: OffsetPassed unless applying stands
        exactly at `offset` (a snapshot installed meanwhile moves past it)."""
        if self.applied_offset != offset:
            raise self._passed(offset)

    def _passed(self, offset: int) -> OffsetPassed:
        return OffsetPassed(
            f"shard {self.shard_id}: applied up to {self.applied_offset}, past {offset}"
        )

    def resume_applying_at(self, offset: int) -> None:
        self.digest_stops.remove(offset)

    # -- logging -----------------------------------------------------------------------

    def next_entry(self, payload: bytes, now_ms: int) -> LogEntry:
        """The entry a leader logs next: its term, the next offset, a time never
        earlier than the log's last one. Once the WAL holds it, `on_logged`."""
        self.check_leader()
        return LogEntry(
            self.term, self.log.last_offset + 1, self.next_timestamp_ms(now_ms), payload
        )

    def on_logged(self, pending: PendingEntry[W]) -> None:
        """A leader's WAL holds the entry `next_entry` made: it is in the log, and
        held until applied."""
        entry = pending.entry
        self.log.append(entry.term, entry.offset)
        self.hold(pending)

    def on_replicated(
        self, entries: Sequence[LogEntry], leader_commit_offset: int, durable_offset: int
    ) -> bool:
        """A follower's WAL holds `entries` from its leader (`check_entries` said
        they continue its log), and its leader said what is committed. It holds
        in memory what fits its write buffer (`keeps_in_memory`). Returns whether
        its commit offset moved (there is more to apply)."""
        for entry in entries:
            self.log.append(entry.term, entry.offset)
            if self.keeps_in_memory(entry.offset, len(entry.payload)):
                self.pending.append(decoded(entry))
        if entries:
            self.on_replicated_timestamp(entries[-1].timestamp_ms)
        return leader_commit_offset > self.leader_commit_offset and self.on_leader_commit(
            leader_commit_offset, durable_offset
        )

    # -- commit ------------------------------------------------------------------------

    def on_leader_commit(self, leader_commit_offset: int, durable_offset: int) -> bool:
        """A follower is told its leader's commit offset. Returns whether its own
        commit offset moved (there is more to apply)."""
        self.leader_commit_offset = max(self.leader_commit_offset, leader_commit_offset)
        return self.on_follower_durable(durable_offset)

    def on_follower_durable(self, durable_offset: int) -> bool:
        """A follower's log is durable up to `durable_offset`: what it was told is
        committed becomes its own commit offset as far as it holds it. Returns
        whether the commit offset moved."""
        before = self.commit_offset
        return self.learn_commit(self.leader_commit_offset, durable_offset) > before

    def on_local_durable(self, durable_offset: int) -> bool:
        """This replica's log is durable up to `durable_offset`: a leader's quorum
        counts it, a follower may commit further. Returns whether the commit
        offset moved."""
        if self.role is Role.LEADER and self.leading is not None:
            return self.on_commit(self.leading.on_local_durable(durable_offset))
        if self.role is Role.FOLLOWER:
            return self.on_follower_durable(durable_offset)
        return False

    def on_commit(self, commit_offset: int) -> bool:
        """A leader's quorum counted a majority up to `commit_offset`.
        Returns whether the commit offset moved."""
        if commit_offset <= self.commit_offset:
            return False
        self.commit_offset = commit_offset
        return True

    # -- leading -----------------------------------------------------------------------

    def on_leading(self, term_start: EntryId, leading: LeaderCore) -> None:
        """This replica leads from `term_start` (become_leader's answer) with the
        quorum `leading` (of this term, counting from this replica's commit
        offset): it serves only once it has taken over."""
        if leading.term != self.term or self.role is not Role.LEADER:
            raise ValueError(f"shard {self.shard_id}: leading term {leading.term} not begun")
        self.term_start_offset = term_start.offset
        self.taken_over = False
        self.leading = leading

    @property
    def has_followers(self) -> bool:
        """Leading with followers: commits wait on them (so writes fold), and
        what the apply step writes is kept for them (applied_changes.py)."""
        return self.leading is not None and bool(self.leading.followers)

    def serves_reads(self, lease_holds: Callable[[], bool]) -> bool:
        """A leader answers reads once it has taken over (its term's first entry
        applied, older leases over) and while its own lease holds (lease.py)."""
        return self.taken_over and self.role is Role.LEADER and lease_holds()

    def on_stepped_down(self) -> list[W]:
        """This replica no longer leads: returns the writers still waiting for
        entries it logged. Their entries stay in the log, for a later leader to
        decide: whether those writes commit is unknown here."""
        self.taken_over = False
        self.leading = None
        waiting = []
        for pending in self.pending:
            if pending.waiter is not None:
                waiting.append(pending.waiter)
                pending.waiter = None
        return waiting

    def takeover_wait_ms(self, now_ms: int, serves_from_ms: int) -> int | None:
        """After an apply, or when the takeover timer fires: None if there is
        nothing to take over now (not leading, taken over already, or the term's
        first entry is not applied yet); otherwise how long an older leader's lease
        may still last, 0 when this leader has taken over now."""
        if (
            self.role is not Role.LEADER
            or self.taken_over
            or self.applied_offset < self.term_start_offset
        ):
            return None
        wait_ms = serves_from_ms - now_ms
        if wait_ms > 0:
            return wait_ms
        self.taken_over = True
        return 0

    def next_timestamp_ms(self, now_ms: int) -> int:
        """The time of an entry this leader logs now."""
        self.last_timestamp_ms = max(now_ms, self.last_timestamp_ms)
        return self.last_timestamp_ms

    def on_replicated_timestamp(self, timestamp_ms: int) -> None:
        """A follower logged its leader's entries up to one of this time."""
        self.last_timestamp_ms = max(self.last_timestamp_ms, timestamp_ms)

    # -- folding -----------------------------------------------------------------------

    def folds(self, request: pb.WriteRequest, plain_puts: bool, has_followers: bool) -> bool:
        """Whether a leader folds a client write: it may fold, and a fold is being
        collected or starts now (enough entries wait for their commit, and the
        commit waits on followers)."""
        return may_fold(request, plain_puts) and (
            self.fold is not None
            or starts_fold(
                self.log.last_offset - self.commit_offset,
                self.limits.fold_after_uncommitted_entries,
                has_followers,
            )
        )

    def fold_in(
        self, raw_request: bytes, request: pb.WriteRequest, waiter: W, trace: Any = None
    ) -> WriteFold[W] | None:
        """Add a client write to the fold (`trace`: its sampled trace context, if
        any). Returns the fold it sealed first, when the write does not fit it:
        the driver logs that one now, before anything else, so that requests
        are logged in the order they came."""
        keys = keys_of(request)
        operations = len(request.puts) + len(request.deletes)
        limits = self.limits
        sealed = None
        fold = self.fold
        if fold is not None and not fold.fits(
            keys,
            operations,
            len(raw_request),
            limits.max_operations_per_fold,
            limits.max_bytes_per_fold,
        ):
            sealed, fold = fold, None
        if fold is None:
            fold = self.fold = WriteFold()
        fold.add(raw_request, request, keys, operations, waiter)
        if trace is not None:
            fold.traces.append(trace)
        return sealed

    def seal_fold(self) -> WriteFold[W] | None:
        """The fold to log now (the commit offset moved, another entry is about
        to be logged, or the leader stops collecting), if any."""
        fold, self.fold = self.fold, None
        return fold

    # -- backpressure ------------------------------------------------------------------

    def check_fits(self, size: int) -> None:
        """A request that could never fit the write buffer is refused, not waited for."""
        if size > self.limits.max_pending_bytes:
            raise Overloaded(f"a single request of {size} bytes exceeds the shard's write buffer")

    def has_room(self, size: int) -> bool:
        """Whether an entry of `size` bytes may be logged beside those pending."""
        limits = self.limits
        pending = self.pending
        return (
            len(pending) < limits.max_pending_entries
            and pending.size_bytes + size <= limits.max_pending_bytes
        )

    def keeps_in_memory(self, offset: int, size: int) -> bool:
        """Whether a follower keeps a logged entry in memory for its apply step:
        while it continues the run held (or what is applied) within the write
        buffer's bounds. Past them it is read back from the log when applied: a
        follower can lag its leader's commit offset by any number of entries (a
        new term commits only once its first entry reaches a majority), so what
        it holds unapplied is bounded here, not by holding back the leader's
        stream."""
        last_held = self.pending.last_offset
        if last_held is None:
            last_held = self.applied_offset
        return offset == last_held + 1 and self.has_room(size)

    def hold(self, pending: PendingEntry[W]) -> None:
        """Hold an entry this leader logged. What it holds of the entries it
        inherited as a follower may stop short of it (a follower holds a run
        only while it fits the buffer): those are let go, to be read back from
        the log when applied, so that what is held stays one run from the oldest
        entry held to the newest."""
        last_held = self.pending.last_offset
        if last_held is not None and last_held != pending.offset - 1:
            self.pending.drop_all()
        self.pending.append(pending)

    def on_log_cut(self, keep: int) -> list[PendingEntry[W]]:
        """The log was cut after `keep` (a follower's entries that disagree with
        its leader's): returns what the write buffer held of them."""
        self.log.truncate_after(keep)
        return self.pending.drop_after(keep)


def _operation_counts(entries: Iterable[PendingEntry[W]]) -> Iterable[int]:
    return (operation_count(entry.kind, entry.body) for entry in entries)
