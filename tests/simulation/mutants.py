"""Deliberately broken variants: each must be caught by a checker within a few
seeds, which shows that the checkers fail when they should.

Each is a SimConfig change: a runtime rule switched off, or a controller that
decides wrongly.
"""

from __future__ import annotations

import dataclasses

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
    "acknowledge old streams after a new term": SimConfig(
        rules=_rules(end_streams_on_new_term=False)
    ),
    "count wiped members' votes": SimConfig(coordinator_class=WipedVotesCoordinator),
}
