"""A leader's view of its followers: what to send each, and what is committed.

Each follower goes through phases driven by the leader's runtime:

    CONNECTING --Truncate answered--> STREAMING (from its head + 1)
         |                               |
         +--its log is behind ours--> SNAPSHOT --installed--> STREAMING
    any phase --stream broken--> CONNECTING

The window. While streaming, at most `max_in_flight_entries` entries are sent
beyond what the follower acknowledged as durable: the window bounds what is in
flight to it (messages on the wire, its unsynced WAL tail), and nothing else.
It must not be measured from what the follower applied, nor from our commit
offset: a follower applies only what is committed, and a new term commits
nothing until a majority holds its first entry, which can lie any distance past
the commit offset (a leader that restarted with a long tail it does not know to
be committed, followers that lag by thousands of entries). A window anchored
there would never reach that entry, and the shard would never commit again with
a majority up. So the entries a new term needs can always reach a majority;
what a follower holds unapplied stays bounded on its own side (it keeps a
bounded run in memory and reads the rest back from its WAL to apply it). A
follower's head after Truncate, or after a snapshot, is durable on it and
agrees with our log, so it counts as an acknowledgement in this term.

A follower's data has an identity, its *incarnation*, drawn when its replica
was created empty and reported with every Truncate answer and acknowledgement.
A follower that answers with another incarnation than before lost its disk and
was created anew under the same address: what it acknowledged is gone, so the
leader forgets its progress and readmits it as a learner (QuorumTracker.readmit)
rather than count acknowledgements its log no longer backs.

Pure: the runtime reads entries, sends, and reports back.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cairn.common.errors import InvalidTerm
from cairn.storage.core.replication.quorum import QuorumTracker
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import NO_OFFSET, EntryId


class FollowerPhase(enum.Enum):
    CONNECTING = "connecting"
    SNAPSHOT = "snapshot"
    STREAMING = "streaming"


@dataclass(slots=True)
class FollowerProgress:
    member: Member
    phase: FollowerPhase = FollowerPhase.CONNECTING
    # Next offset to send while streaming.
    next_offset: int = NO_OFFSET
    # Highest offset it acknowledged as durable in this term.
    acked_offset: int = NO_OFFSET
    # Highest offset it reported applied (for its status: applying lags
    # syncing on a follower that is behind the commit offset).
    applied_offset: int = NO_OFFSET
    # The incarnation of its data, once it answered (None: not yet, or a pod that
    # does not report one).
    incarnation: int | None = None


class StaleIncarnation(InvalidTerm):
    """An acknowledgement from another incarnation of the follower's data than
    the one its last Truncate answer reported (a late one of data since lost,
    or data that changed under its stream): it proves nothing about what the
    follower holds now. The stream must end; the next Truncate tells which
    data the follower has, and readmits it if that is new."""

    reason = "STALE_INCARNATION"


class NotAFollower(Exception):
    """An answer on the stream of a member this leader no longer has: its removal
    finished (on another member's acknowledgement) while the answer was on its
    way. It proves nothing now; the stream ends."""

    def __init__(self, member: str) -> None:
        super().__init__(f"{member} is no longer a follower")
        self.member = member


class LeaderCore:
    def __init__(
        self,
        term: int,
        me: Member,
        followers: Iterable[Member],
        commit_offset: int,
        term_start_offset: int,
        max_in_flight_entries: int,
        incarnations: Mapping[str, int] | None = None,
    ) -> None:
        """`incarnations`: the incarnation of each follower's data as the
        controller recorded it (by internal address); a follower that answers
        with another one is readmitted, as if it had changed in this term."""
        self.term = term
        self.me = me
        self.max_in_flight_entries = max_in_flight_entries
        known = incarnations or {}
        self.followers = {
            member.internal_address: FollowerProgress(
                member, incarnation=known.get(member.internal_address)
            )
            for member in followers
        }
        if me.internal_address in self.followers:
            raise ValueError("the leader cannot be its own follower")
        self.quorum = QuorumTracker.for_new_term(
            term,
            me.internal_address,
            [me.internal_address, *self.followers],
            commit_offset,
            term_start_offset,
        )

    @property
    def commit_offset(self) -> int:
        return self.quorum.commit_offset

    def progress(self, member: str) -> FollowerProgress:
        progress = self.followers.get(member)
        if progress is None:
            raise NotAFollower(member)
        return progress

    # -- our own log -----------------------------------------------------------------

    def on_local_durable(self, offset: int) -> int:
        """Our WAL is durable up to `offset`; returns the commit offset."""
        return self._acknowledge(self.me.internal_address, offset)

    # -- a follower ------------------------------------------------------------------

    def on_truncated(
        self,
        member: str,
        head: EntryId,
        our_first_offset: int,
        incarnation: int | None = None,
    ) -> FollowerPhase:
        """The follower's log now agrees with ours up to `head`. Stream from there if
        our WAL still holds the next entry (`our_first_offset` is the first entry it
        can provide), else send a snapshot. `incarnation` identifies the follower's
        data: another one than before means it lost what it acknowledged."""
        progress = self.progress(member)
        self._check_incarnation(progress, incarnation)
        if head.offset + 1 < our_first_offset:
            progress.phase = FollowerPhase.SNAPSHOT
            return progress.phase
        self._start_streaming(progress, head.offset)
        return progress.phase

    def on_snapshot_installed(self, member: str, last_included: EntryId) -> None:
        self._start_streaming(self.progress(member), last_included.offset)

    def _start_streaming(self, progress: FollowerProgress, head_offset: int) -> None:
        progress.phase = FollowerPhase.STREAMING
        progress.next_offset = head_offset + 1
        self.on_ack(progress.member.internal_address, self.term, head_offset)

    def to_send(self, member: str, our_last_offset: int) -> tuple[int, int] | None:
        """The inclusive offset range to send the follower now, or None (nothing new,
        window full, or not streaming). The window runs from what it acknowledged
        as durable (see the module's docstring for why nothing else)."""
        progress = self.followers.get(member)
        if progress is None or progress.phase is not FollowerPhase.STREAMING:
            return None
        last = min(our_last_offset, progress.acked_offset + self.max_in_flight_entries)
        if progress.next_offset > last:
            return None
        return progress.next_offset, last

    def on_sent(self, member: str, last_offset: int) -> None:
        self.progress(member).next_offset = last_offset + 1

    def on_ack(
        self,
        member: str,
        term: int,
        durable_offset: int,
        applied_offset: int | None = None,
        incarnation: int | None = None,
    ) -> int:
        """The follower holds our log durably up to `durable_offset` (and has applied
        up to `applied_offset`, if it says), as it reported in `term`; returns the
        commit offset. An answer of another term proves nothing about our entries
        at those offsets: InvalidTerm (the stream it came on must end); nor does
        one of another incarnation of its data: StaleIncarnation."""
        if term != self.term:
            raise InvalidTerm(f"follower {member} answered for term {term}, not {self.term}")
        progress = self.followers.get(member)
        if progress is None:
            return self.commit_offset
        if (
            incarnation is not None
            and progress.incarnation is not None
            and incarnation != progress.incarnation
        ):
            raise StaleIncarnation(
                f"follower {member} answered with incarnation {incarnation}, "
                f"not {progress.incarnation}"
            )
        progress.acked_offset = max(progress.acked_offset, durable_offset)
        if applied_offset is not None:
            progress.applied_offset = max(progress.applied_offset, applied_offset)
        return self._acknowledge(member, durable_offset)

    def _acknowledge(self, member: str, durable_offset: int) -> int:
        """Count `member`'s acknowledgement; a removal it lets finish drops the
        follower here too."""
        removing = bool(self.quorum.leaving)
        commit_offset = self.quorum.acknowledge(member, self.term, durable_offset)
        if removing:
            self._forget_removed()
        return commit_offset

    def _check_incarnation(self, progress: FollowerProgress, incarnation: int | None) -> None:
        if incarnation is None:
            return
        if progress.incarnation is not None and incarnation != progress.incarnation:
            self._readmit(progress, incarnation)
        progress.incarnation = incarnation

    def _readmit(self, progress: FollowerProgress, incarnation: int) -> None:
        """The follower's data was created anew: nothing it acknowledged is held
        any more. Not streaming until it answers Truncate again."""
        progress.phase = FollowerPhase.CONNECTING
        progress.next_offset = NO_OFFSET
        progress.acked_offset = NO_OFFSET
        progress.applied_offset = NO_OFFSET
        progress.incarnation = incarnation
        # The commit offset never goes back: readmitting cannot change it.
        self.quorum.readmit(progress.member.internal_address)
        self._forget_removed()

    def on_disconnected(self, member: str) -> None:
        """The stream broke: bring the follower to our log again before streaming.
        Its acknowledgements stay valid while its data does (a follower that lost
        it answers Truncate with another incarnation, see on_truncated)."""
        progress = self.followers.get(member)
        if progress is not None:
            progress.phase = FollowerPhase.CONNECTING

    # -- ensemble changes ------------------------------------------------------------

    def add_follower(self, member: Member) -> None:
        """A new member receives entries at once and votes once caught up."""
        if member.internal_address == self.me.internal_address:
            raise ValueError("the leader cannot be its own follower")
        if member.internal_address in self.followers:
            return
        self.followers[member.internal_address] = FollowerProgress(member)
        self.quorum.add_learner(member.internal_address)

    def remove_follower(self, member: str) -> int:
        """Returns the commit offset (a smaller ensemble may commit more). The
        follower goes at once, or, while the rest do not yet hold everything
        committed, once they do (QuorumTracker.remove): until then
        `is_leaving` and it is still sent entries."""
        if member not in self.followers:
            return self.commit_offset
        commit_offset = self.quorum.remove(member)
        self._forget_removed()
        return commit_offset

    def is_leaving(self, member: str) -> bool:
        return self.quorum.is_leaving(member)

    def cancel_removal(self, member: str) -> int:
        """The removal of `member` could not finish in time: it stays a member.
        Returns the commit offset."""
        return self.quorum.cancel_removal(member)

    def _forget_removed(self) -> None:
        """Followers the quorum has dropped (their removal finished)."""
        for member in [m for m in self.followers if not self.quorum.is_member(m)]:
            del self.followers[member]

    def is_voting(self, member: str) -> bool:
        return member in self.quorum.voters
