"""The role and term of one shard replica, and the rules that guard them.

    FENCED  --BecomeLeader(term)-->  LEADER
      |  ^                              |
      |  +--------NewTerm(higher)-------+
      +--Truncate(term >= mine)--> FOLLOWER --NewTerm(higher)--> FENCED

A replica starts FENCED (also after a restart: leadership is never assumed from
disk, the controller hands it out). The controller fences with `NewTerm`; a
replica refuses anything of an older term from then on. It becomes leader only
from FENCED in the same term, so one term never has two leaders as long as the
controller names one leader per term. A follower adopts a leader by its
`Truncate`, which may carry a newer term than the follower has seen: only the
controller creates terms, so a leader of a newer term was legitimately elected.

Pure: the caller persists the term when told to (before answering), truncates
its log where told, and maps the errors to the wire.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cairn.common.errors import InvalidTerm, NotLeader
from cairn.storage.core.replication.terms import NO_OFFSET, EntryId, TermHistory, last_shared_offset


class Role(enum.IntEnum):
    """Values match `ReplicaRole` in replication.proto."""

    FENCED = 1
    FOLLOWER = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class Member:
    """A storage pod as an ensemble member: `internal_address` is its identity."""

    public_address: str
    internal_address: str


class ReplicationInvariantError(AssertionError):
    """The logs contradict a rule that must always hold (a committed entry would be
    lost). Never caught: a replica that sees one must stop rather than go on."""


class OutOfOrderEntries(InvalidTerm):
    """Entries that do not continue the follower's log: the leader must bring the
    follower to its log again (Truncate) before streaming."""

    reason = "OUT_OF_ORDER_ENTRIES"


@dataclass(slots=True)
class ReplicaCore:
    shard_id: int
    term: int
    log: TermHistory
    # Highest offset known committed (and applied, or about to be).
    commit_offset: int = NO_OFFSET
    role: Role = Role.FENCED
    leader: Member | None = None

    @property
    def head(self) -> EntryId:
        return self.log.head

    # -- controller ------------------------------------------------------------------

    def fence(self, term: int) -> bool:
        """NewTerm: stop taking anything of an older term. Returns whether the term
        changed (the caller makes it durable before answering)."""
        if term < self.term:
            raise InvalidTerm(f"shard {self.shard_id}: term {term} is older than {self.term}")
        if term == self.term and self.role is not Role.FENCED:
            # Re-fencing a leader or follower in its own term could let a second
            # leader be made for it; a retrying controller uses a new term.
            raise InvalidTerm(
                f"shard {self.shard_id} is already {self.role.name.lower()} in term {term}"
            )
        changed = term != self.term
        self.term = term
        self.role = Role.FENCED
        self.leader = None
        return changed

    def check_not_older(self, term: int) -> None:
        """A controller call of `term` (DeleteShard) may act only if no newer term
        has begun here."""
        if term < self.term:
            raise InvalidTerm(f"shard {self.shard_id}: term {term} is older than {self.term}")

    def check_leading(self, term: int) -> None:
        """Ensemble changes go to the leader of the current term only."""
        if self.role is not Role.LEADER or term != self.term:
            raise InvalidTerm(
                f"shard {self.shard_id} is {self.role.name.lower()} in term {self.term}, "
                f"not leader of term {term}"
            )

    def check_still_following(self, term: int, leader: Member) -> None:
        """A snapshot received from the leader of `term` is installed only if this
        replica still follows that leader in that term: a newer term may have
        begun during the transfer, whose leader's log it may not match."""
        if self.term != term or self.leader != leader:
            raise InvalidTerm(
                f"shard {self.shard_id}: term {self.term} began during the snapshot of term {term}"
            )

    def follows(self, term: int) -> bool:
        """Whether this replica follows the leader of `term`."""
        return self.role is Role.FOLLOWER and term == self.term

    def check_following(self, term: int) -> None:
        """A follower reports its log's progress to the leader of its own term
        only: once fenced, or leading a newer term, its log at those offsets may
        hold another leader's entries, which that stream's leader would count as
        acknowledgements of its own."""
        if not self.follows(term):
            raise InvalidTerm(
                f"shard {self.shard_id} is {self.role.name.lower()} in term {self.term}; "
                f"the stream of term {term} ends"
            )

    def become_leader(self, term: int, me: Member) -> EntryId:
        """BecomeLeader: returns the id of the first entry of the term, which the
        caller logs before any client write (see QuorumTracker.term_start_offset)."""
        if term != self.term or self.role is not Role.FENCED:
            raise InvalidTerm(
                f"shard {self.shard_id}: cannot lead term {term} as "
                f"{self.role.name.lower()} in term {self.term} (fence it first)"
            )
        self.role = Role.LEADER
        self.leader = me
        return EntryId(term, self.log.last_offset + 1)

    # -- follower side ---------------------------------------------------------------

    def follow(self, term: int, leader: Member) -> bool:
        """A leader's Truncate: accept it as the leader of `term`. Returns whether
        the term changed (persist it first)."""
        self.check_may_follow(term, leader)
        changed = term != self.term
        self.term = term
        self.role = Role.FOLLOWER
        self.leader = leader
        return changed

    def check_may_follow(self, term: int, leader: Member) -> None:
        if term < self.term:
            raise InvalidTerm(f"shard {self.shard_id}: term {term} is older than {self.term}")
        if term == self.term:
            if self.role is Role.LEADER:
                raise InvalidTerm(f"shard {self.shard_id}: this replica leads term {term}")
            if self.role is Role.FOLLOWER and self.leader != leader:
                raise InvalidTerm(
                    f"shard {self.shard_id}: term {term} is led by {self.leader}, not {leader}"
                )

    def truncation_point(self, leader_log: TermHistory, leader_term: int | None = None) -> int:
        """The offset after which this follower's log must be dropped to agree with
        the log of the leader of `leader_term` (default: the term it follows).
        Never below the commit offset: committed entries are in every later
        leader's log."""
        shared = last_shared_offset(self.log, leader_log)
        # Entries of the leader's term came from that leader, which never rewrites
        # its own entries: a late Truncate carrying an older copy of its log must
        # not drop them (we may have acknowledged them already).
        own = self._last_offset_of_term(self.term if leader_term is None else leader_term)
        if shared is None:
            # Nothing to compare (one of the logs was trimmed past the other): keep
            # what is committed; the leader sends a snapshot if it cannot continue.
            return max(min(self.commit_offset, self.log.last_offset), own)
        if shared < self.commit_offset:
            raise ReplicationInvariantError(
                f"shard {self.shard_id}: committed entries up to {self.commit_offset} "
                f"disagree with the leader's log after {shared}"
            )
        return max(shared, own)

    def _last_offset_of_term(self, term: int) -> int:
        head = self.log.head
        return head.offset if head.term == term else NO_OFFSET

    def check_entries(self, term: int, first_offset: int) -> None:
        """Entries of a Replicate stream: from our leader, continuing our log."""
        if term != self.term or self.role is not Role.FOLLOWER:
            raise InvalidTerm(
                f"shard {self.shard_id}: entries of term {term}, but this replica is "
                f"{self.role.name.lower()} in term {self.term}"
            )
        if first_offset != self.log.last_offset + 1:
            raise OutOfOrderEntries(
                f"shard {self.shard_id}: entries from {first_offset}, but the log ends at "
                f"{self.log.last_offset}"
            )

    def learn_commit(self, leader_commit_offset: int, durable_offset: int) -> int:
        """A follower's commit offset: what the leader says is committed, as far as
        this replica holds it durably; never goes back."""
        self.commit_offset = max(self.commit_offset, min(leader_commit_offset, durable_offset))
        return self.commit_offset

    # -- clients ---------------------------------------------------------------------

    def check_leader(self) -> None:
        if self.role is not Role.LEADER:
            hint = self.leader.public_address if self.leader is not None else None
            raise NotLeader(self.shard_id, hint)
