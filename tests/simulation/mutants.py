"""Deliberately broken variants of the shipped code: each must be caught by a
check within a few seeds, which shows that the checks fail when they should.

Each is a tuple of patches: (object, attribute name, replacement), set with
pytest's monkeypatch while the mutant runs, each undoing one rule of the
controller (planner, executor, `choose_leader`, keeper), of the shard's core
(ShardCore, LeaderCore, QuorumTracker) or of its driver. Three of them revert
the fixes of issue 38's holes: "hole 1: ...", "hole 2: ...", "hole 3: ...";
"remove a member the commit needs" reverts the fix of a fourth, found by a
longer campaign. Where each is caught: test_managed_cluster.py,
test_pod_scenarios.py and test_real_cluster.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.controller import executor, keeper, planner
from cairn.controller.model import ClusterState, ClusterStatus, ShardRecord
from cairn.controller.state.store import StateConflict
from cairn.storage.core.ready import Ready
from cairn.storage.core.replication.leader import FollowerPhase, FollowerProgress, LeaderCore
from cairn.storage.core.replication.quorum import QuorumTracker
from cairn.storage.core.replication.terms import NO_OFFSET
from cairn.storage.core.sessions import SessionTracker, stored_sessions
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.replication.leader import ReplicatingLeader
from cairn.storage.shard_context import ShardContext
from cairn.storage.shard_sessions import ShardSessions
from simulation import managed_pod

# (object, attribute name, replacement)
Patches = tuple[tuple[object, str, Any], ...]


def _lowest_head(
    heads: Mapping[str, tuple[int, int]], voters: Sequence[str], *args: Any, **kwargs: Any
) -> str | None:
    """Elects the member with the lowest head: committed entries it lacks are lost."""
    answered = {name: head for name, head in heads.items() if name in voters}
    if len(answered) * 2 <= len(voters):
        return None
    return min(sorted(answered), key=lambda name: answered[name])


def _always(*args: Any, **kwargs: Any) -> bool:
    return True


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _never(*args: Any, **kwargs: Any) -> bool:
    return False


def _no_learners(*args: Any, **kwargs: Any) -> list[str]:
    """The planner's learner gate off: members are added while one catches up."""
    return []


def _any_follower_may_take_over(self: Any, record: ShardRecord, report: Any, name: str) -> bool:
    """Hole 2: a leader move or a handover targets any member, caught up or not."""
    return name != record.leader and name in record.ensemble


def _in_step_with_learners(self: Any, record: ShardRecord, report: Any) -> bool:
    """Hole 2: the ensemble counts as in step (for moves, balancing, changes)
    once every member is a follower of the leader's, voting or still a learner."""
    if report.head_term != record.term:
        return False
    followers = {follower.internal_address for follower in report.followers}
    return all(
        name == record.leader or self._address(name) in followers for name in record.ensemble
    )


def _all_hold_the_commit_offset(self: Any, record: ShardRecord, report: Any) -> set[str]:
    """Every member counted as holding the commit offset (no waiting for it)."""
    return set(record.ensemble)


async def _update_status_from_stale_state(
    self: keeper.StateKeeper,
    change: Callable[[ClusterStatus], ClusterStatus],
    *,
    fencing: bool,
) -> ClusterState:
    """Hole 3 (keeper): the new status is computed once, from the state this
    controller holds, and on a conflict written again over the newer state (as
    keeper.py once retried), with no epoch checked."""
    state = self.state
    status = change(state.status)
    if status == state.status:
        return state
    for _ in range(keeper.MAX_CONFLICT_RETRIES):
        try:
            self.state = await self.store.write_status(status, self.state.version)
            return self.state
        except StateConflict:
            await self._reload()
    raise StateConflict("lost every race")


def _admit_any(highest: int, epoch: int) -> int:
    """Hole 3 (pods): every controller's call is taken, whatever its epoch."""
    return max(highest, epoch)


def _keep_any_incarnation(
    self: LeaderCore, progress: FollowerProgress, incarnation: int | None
) -> None:
    """Hole 1 (leader, as a patch of LeaderCore): a follower answering with
    another incarnation of its data is not readmitted as a learner."""
    if incarnation is not None:
        progress.incarnation = incarnation


_leader_on_ack = LeaderCore.on_ack


def _ack_of_any_incarnation(
    self: LeaderCore,
    member: str,
    term: int,
    durable_offset: int,
    applied_offset: int | None = None,
    incarnation: int | None = None,
) -> int:
    """Hole 1 (leader): an acknowledgement of another incarnation counts."""
    return _leader_on_ack(self, member, term, durable_offset, applied_offset, None)


def _from_applied_to_send(
    self: LeaderCore, member: str, our_last_offset: int
) -> tuple[int, int] | None:
    """The send window from what the follower applied (LeaderCore's to_send
    with its window rule undone; as a patch)."""
    progress = self.followers.get(member)
    if progress is None or progress.phase is not FollowerPhase.STREAMING:
        return None
    window_end = min(progress.acked_offset, progress.applied_offset)
    last = min(our_last_offset, window_end + self.max_in_flight_entries)
    return (progress.next_offset, last) if progress.next_offset <= last else None


def _head_counts_as_applied(
    self: LeaderCore,
    member: str,
    term: int,
    durable_offset: int,
    applied_offset: int | None = None,
    incarnation: int | None = None,
) -> int:
    """A head without an applied offset (Truncate's answer) counted as applied."""
    applied = durable_offset if applied_offset is None else applied_offset
    return _leader_on_ack(self, member, term, durable_offset, applied, incarnation)


_new_quorum = QuorumTracker.for_new_term.__func__  # type: ignore[attr-defined]


def _quorum_without_term_start(
    cls: type[QuorumTracker],
    term: int,
    leader: str,
    voters: Any,
    committed_offset: int,
    term_start_offset: int = NO_OFFSET,
) -> QuorumTracker:
    """A new term's quorum that commits entries of older terms before the
    term's first entry is on a majority."""
    return _new_quorum(cls, term, leader, voters, committed_offset)  # type: ignore[no-any-return]


def _takes_over_at_once(self: ShardCore[Any], now_ms: int, serves_from_ms: int) -> int | None:
    """A new leader takes over as soon as its first entry is applied, while an
    older leader's lease may still let it answer reads."""
    return _takeover_wait_ms(self, now_ms, now_ms)


_takeover_wait_ms = ShardCore.takeover_wait_ms


def _appended(shard: ShardContext) -> int:
    """shard_context.py: a replica counts what it appended as durable before its fsync
    covers it (as leader, and in its acknowledgements as follower)."""
    return shard.core.log.last_offset


def _rearm_expired(sessions: ShardSessions) -> None:
    """A new leader takes every stored session as expired (no fresh timeout):
    their ephemeral records go while their clients still keep them alive."""
    sessions.tracker = SessionTracker()
    now = sessions.clock_ms()
    for session_id, state in stored_sessions(sessions.replica.kv):
        sessions.tracker.open(session_id, 0, now, state.owner)


def _apply_past_durable(self: ShardCore, durable_offset: int) -> int:
    """ShardCore's apply limit without its durable half: a replica applies what
    is committed whether or not its own log holds it durably."""
    return self.commit_offset


def _without_sync(rule: Callable[..., Ready[Any]]) -> Callable[..., Ready[Any]]:
    """`rule` (one of ShardCore's steps) without its log sync."""

    def unsynced(*args: Any) -> Ready[Any]:
        return dataclasses.replace(rule(*args), sync_log=False)

    return unsynced


MUTANTS: dict[str, Patches] = {
    "elect the lowest head": ((executor, "choose_leader", _lowest_head),),
    # The planner changes the ensemble again without waiting for the leader's
    # voters to match it and a majority to hold the commit offset, and the
    # leader drops whom it is told to at once (else it waits for the rest
    # itself: "remove a member the commit needs").
    "ensemble changes without waiting": (
        (planner._Planner, "_in_step", _always),
        (planner._Planner, "_learners", _no_learners),
        (planner._Planner, "_holding", _all_hold_the_commit_offset),
        (QuorumTracker, "_held_without", _always),
    ),
    "commit before the term-start entry": (
        (QuorumTracker, "for_new_term", classmethod(_quorum_without_term_start)),
    ),
    "acknowledge unsynced entries": ((ShardContext, "durable_offset", property(_appended)),),
    # Rules of the shard's own core (ShardCore.step): what its answer to a
    # controller's NewTerm or a leader's Truncate reports is not made durable.
    "NewTerm answers an unsynced head": ((ShardCore, "_fence", _without_sync(ShardCore._fence)),),
    "Truncate answers an unsynced head": (
        (ShardCore, "_truncate", _without_sync(ShardCore._truncate)),
    ),
    "reads without the lease": ((ReplicatingLeader, "lease_holds", _always),),
    "a new leader serves before older leases end": (
        (ShardCore, "takeover_wait_ms", _takes_over_at_once),
    ),
    "send window anchored at the applied offset": (
        (LeaderCore, "to_send", _from_applied_to_send),
        (LeaderCore, "on_ack", _head_counts_as_applied),
    ),
    # Hole 1: incarnations ignored. The controller takes a member that lost its
    # disk for the replica it was (its empty or partly rebuilt log counts toward
    # an election's majority), and the leader keeps its pre-wipe vote.
    "hole 1: a wiped member keeps its vote": (
        (ShardRecord, "intact", _always),
        (LeaderCore, "_check_incarnation", _keep_any_incarnation),
        (LeaderCore, "on_ack", _ack_of_any_incarnation),
    ),
    # Hole 2: choose_leader counts the majority over every member, learners
    # included (no report of who the leader counted), and leader moves and
    # handovers target members that have not caught up, in ensembles that are
    # not in step (a learner still catching up).
    "hole 2: a learner is elected": (
        (executor, "counted_voters", _nothing),
        (planner._Planner, "_may_take_over", _any_follower_may_take_over),
        (planner._Planner, "_in_step", _in_step_with_learners),
        (planner._Planner, "_learners", _no_learners),
        (planner._Planner, "_commit_unrecorded", _never),
    ),
    # The leader drops any member it is told to, even one whose acknowledgement
    # committed entries still need (the controller judged from an older
    # report): those entries are then on fewer than a majority of the rest.
    "remove a member the commit needs": ((QuorumTracker, "_held_without", _always),),
    # A rule of the shard's own core (ShardCore), not of replication: applied
    # entries a crash takes from the log.
    "apply past the durable offset": ((ShardCore, "appliable_offset", _apply_past_durable),),
    "sessions expire when a leader takes over": ((ShardSessions, "rearm", _rearm_expired),),
    # Hole 3: no controller-epoch fencing: the state takes a stale controller's
    # writes (computed from the state it held, and re-applied after a
    # conflict), pods their calls (the fence a managed pod admits with).
    "hole 3: no controller-epoch fencing": (
        (keeper.StateKeeper, "_update_status", _update_status_from_stale_state),
        (keeper.StateKeeper, "fence", _nothing),
        (managed_pod, "admit", _admit_any),
    ),
}
