"""Which offset a shard's leader may consider committed.

An entry is committed once it is durable on a majority of the ensemble's voters
(the leader included). Only acknowledgements of the current term count: after a
new term, entries the new leader inherited from older terms are committed once a
majority of the new term holds them, and never on the strength of what followers
acknowledged to an old leader (fencing stopped that leader; its acks prove
nothing about the new term's logs, which may have been truncated).

Members join as learners: they receive entries but do not vote until they have
caught up to what is already committed, so adding a member never stalls commits
or lets an empty replica be counted toward a majority. The commit offset never
goes back, whatever the ensemble becomes.

"Caught up" means holding the commit offset and the term's first entry. Until
this term commits its first entry, the commit offset may be one the leader
inherited, lower than what an earlier term committed (the new leader had not
learnt of it): a learner holding only that much may lack committed entries,
and a voter lacking them, with another, could make a majority that elects a
member without them. The term's first entry follows everything the leader
held when it took office, which includes every committed entry.

A voter leaves only once the voters that remain, a majority of them, hold
every committed entry. What was committed with its acknowledgement would else
be held by fewer than a majority of the new ensemble, and a majority of it,
without those entries, could elect a leader without them. Whoever asked for
the removal (the controller) judged from a report that is already old:
entries committed since may have needed the very member it removes, so the
check is made here, where commits are decided. Until it passes, the member is
*leaving*: it still votes, and an entry commits only on a majority of the
ensemble both with and without it (Raft's joint consensus). So the commit
offset waits for the members that remain instead of running ahead on the one
leaving, and they reach it, and the member goes, as soon as they have caught
up; a removal never waits on a moving target.

A voter that lost its data (it came back with another incarnation, see
LeaderCore) is *returning*: its acknowledgements are forgotten and it is a
learner again, but it still counts in the majority's size, so losing a disk
never lowers the number of acknowledgements a commit needs. It votes again once
caught up, as any learner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

NO_OFFSET = -1


@dataclass
class QuorumTracker:
    """The leader's view of its ensemble for one term. Pure: no I/O, no clock."""

    term: int
    leader: str
    voters: set[str]
    learners: set[str] = field(default_factory=set)
    # Learners that were voters of this ensemble and lost their data: still
    # counted in the majority's size (a subset of `learners`).
    returning: set[str] = field(default_factory=set)
    # Highest offset each member has acknowledged as durable in this term.
    acked: dict[str, int] = field(default_factory=dict)
    commit_offset: int = NO_OFFSET
    # The first entry of this term: nothing commits before a majority holds it.
    term_start_offset: int = NO_OFFSET
    # Voters (or returning learners) asked to leave, kept until the rest hold
    # every committed entry on a majority of them (see the module's docstring).
    leaving: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.leader not in self.voters:
            raise ValueError(f"the leader {self.leader!r} must be a voter")
        if self.voters & self.learners:
            raise ValueError("a member cannot be both a voter and a learner")

    @classmethod
    def for_new_term(
        cls,
        term: int,
        leader: str,
        voters: Iterable[str],
        committed_offset: int,
        term_start_offset: int = NO_OFFSET,
    ) -> QuorumTracker:
        """A fresh tracker for a new term: no acknowledgements count yet, but what
        was already committed stays committed."""
        return cls(
            term,
            leader,
            set(voters),
            commit_offset=committed_offset,
            term_start_offset=term_start_offset,
        )

    @property
    def majority(self) -> int:
        return (len(self.voters) + len(self.returning)) // 2 + 1

    def acknowledge(self, member: str, term: int, offset: int) -> int:
        """Record that `member` holds entries up to `offset` durably in `term`;
        returns the (possibly advanced) commit offset. Stale terms, unknown members
        and offsets lower than already acknowledged change nothing (acks are
        cumulative and may arrive out of order or twice)."""
        if term != self.term or member not in self.voters | self.learners:
            return self.commit_offset
        if offset > self.acked.get(member, NO_OFFSET):
            self.acked[member] = offset
        if member in self.learners and offset >= self._caught_up_at():
            # Caught up with what is committed: from now on it votes.
            self.learners.discard(member)
            self.returning.discard(member)
            self.voters.add(member)
        return self._advance()

    def _caught_up_at(self) -> int:
        """The offset a learner must hold to vote: the commit offset and the
        term's first entry (see the module's docstring)."""
        return max(self.commit_offset, self.term_start_offset)

    def readmit(self, member: str) -> int:
        """`member` lost what it acknowledged (its data was wiped and created
        anew): forget its acknowledgements and make it a returning learner.
        Returns the commit offset, which never goes back."""
        if member == self.leader:
            raise ValueError("the leader cannot be readmitted to its own ensemble")
        if member in self.voters:
            self.voters.discard(member)
            self.learners.add(member)
            self.returning.add(member)
        self.acked.pop(member, None)
        return self._advance()

    def add_learner(self, member: str) -> None:
        if member in self.voters:
            raise ValueError(f"{member!r} is already a voter")
        self.learners.add(member)

    def remove(self, member: str) -> int:
        """Ask `member` (never the leader) to leave; returns the commit offset,
        which may advance when the majority shrinks. It is gone at once unless
        the rest do not yet hold every committed entry on a majority of them:
        then it is `leaving` until they do (see the module's docstring), and
        `is_leaving` tells. Asking again changes nothing."""
        if member == self.leader:
            raise ValueError("the leader cannot be removed from its own ensemble")
        if member not in self.voters | self.learners:
            return self.commit_offset
        if member in self.voters | self.returning:
            self.leaving.add(member)
        else:
            self._drop(member)  # a learner never counted toward anything
        return self._advance()

    def is_leaving(self, member: str) -> bool:
        return member in self.leaving

    def is_member(self, member: str) -> bool:
        return member in self.voters or member in self.learners

    def cancel_removal(self, member: str) -> int:
        """Keep a leaving member after all (its removal could not finish in
        time); returns the commit offset, which may advance now that entries
        need only a majority of the whole ensemble again."""
        self.leaving.discard(member)
        return self._advance()

    def _drop(self, member: str) -> None:
        self.voters.discard(member)
        self.learners.discard(member)
        self.returning.discard(member)
        self.leaving.discard(member)
        self.acked.pop(member, None)

    def _held_without(self, member: str) -> bool:
        """Would a majority of the voters left after removing `member` hold every
        committed entry (the commit offset and the term's first entry)?"""
        remaining = self.voters - {member}
        majority = (len(remaining) + len(self.returning - {member})) // 2 + 1
        needed = self._caught_up_at()
        holding = sum(1 for m in remaining if self.acked.get(m, NO_OFFSET) >= needed)
        return holding >= majority

    def _held_by_majority(self, excluding: set[str]) -> int:
        """The highest offset a majority of the voters but `excluding` hold
        (NO_OFFSET while too few of them can vote: returning members must
        catch up first)."""
        voters = self.voters - excluding
        majority = (len(voters) + len(self.returning - excluding)) // 2 + 1
        votes = sorted((self.acked.get(m, NO_OFFSET) for m in voters), reverse=True)
        return votes[majority - 1] if len(votes) >= majority else NO_OFFSET

    def _advance(self) -> int:
        while True:
            candidate = self._held_by_majority(set())
            if self.leaving:
                candidate = min(candidate, self._held_by_majority(self.leaving))
            if candidate > self.commit_offset and candidate >= self.term_start_offset:
                self.commit_offset = candidate
            done = next((m for m in sorted(self.leaving) if self._held_without(m)), None)
            if done is None:
                return self.commit_offset
            self._drop(done)
