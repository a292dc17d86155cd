"""Deliberately broken variants: each must be caught by a checker within a few
seeds, which shows that the checkers fail when they should.

Each is a SimConfig change: a runtime rule switched off, a controller that
decides wrongly, or a leader core with a rule undone.
"""

from __future__ import annotations

import dataclasses

from cairn.storage.core.replication.leader import FollowerPhase, LeaderCore
from cairn.storage.core.replication.terms import EntryId
from simulation.context import RuntimeRules
from simulation.coordinator import Coordinator
from simulation.world import SimConfig


class LowestHeadCoordinator(Coordinator):
    """Elects the member with the lowest head: committed entries it lacks are lost."""

    def choose_leader(self, answers: dict[str, EntryId]) -> str:
        return min(sorted(answers), key=lambda name: answers[name])


class HastyEnsembleCoordinator(Coordinator):
    """Changes the ensemble again without waiting for the added member to vote or
    for the leader's term to commit its first entry."""

    def _prepare_change(self, leader: tuple[int, str]) -> None:
        self._change_ensemble(leader)


class WindowFromAppliedLeaderCore(LeaderCore):
    """Bounds what it sends a follower by what the follower applied, which cannot
    pass the commit offset: a new leader whose term-start entry lies more than a
    window past it never commits again (the leader's window rule undone)."""

    def to_send(self, member: str, our_last_offset: int) -> tuple[int, int] | None:
        progress = self.followers.get(member)
        if progress is None or progress.phase is not FollowerPhase.STREAMING:
            return None
        window_end = min(progress.acked_offset, progress.applied_offset)
        last = min(our_last_offset, window_end + self.max_in_flight_entries)
        return (progress.next_offset, last) if progress.next_offset <= last else None

    def on_ack(
        self,
        member: str,
        term: int,
        durable_offset: int,
        applied_offset: int | None = None,
        incarnation: int | None = None,
    ) -> int:
        # A head without an applied offset (Truncate's answer) counted as applied.
        applied = durable_offset if applied_offset is None else applied_offset
        return super().on_ack(member, term, durable_offset, applied, incarnation)


class WipedVotesCoordinator(Coordinator):
    """Takes a member that lost its disk for the replica it was: its empty (or
    partly rebuilt) log counts toward an election's majority."""

    def intact(self, name: str, incarnation: int) -> bool:
        return True


def _rules(**changes: bool) -> RuntimeRules:
    return dataclasses.replace(RuntimeRules(), **changes)


MUTANTS: dict[str, SimConfig] = {
    "elect the lowest head": SimConfig(coordinator_class=LowestHeadCoordinator),
    "ensemble changes without waiting": SimConfig(coordinator_class=HastyEnsembleCoordinator),
    "commit before the term-start entry": SimConfig(rules=_rules(term_start_rule=False)),
    "acknowledge unsynced entries": SimConfig(rules=_rules(ack_only_durable=False)),
    "NewTerm answers an unsynced head": SimConfig(rules=_rules(sync_before_new_term_answer=False)),
    "Truncate answers an unsynced head": SimConfig(rules=_rules(sync_before_truncate_answer=False)),
    "act on stale Truncates": SimConfig(rules=_rules(ignore_stale_truncates=False)),
    "reads without the lease": SimConfig(rules=_rules(reads_need_lease=False)),
    "a new leader serves before older leases end": SimConfig(
        rules=_rules(takeover_waits_for_old_leases=False)
    ),
    "send window anchored at the applied offset": SimConfig(
        leader_core_class=WindowFromAppliedLeaderCore
    ),
    "acknowledge old streams after a new term": SimConfig(
        rules=_rules(end_streams_on_new_term=False)
    ),
    "count wiped members' votes": SimConfig(coordinator_class=WipedVotesCoordinator),
}
