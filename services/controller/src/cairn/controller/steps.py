"""The status writes of the executor's steps, as functions of the status they
replace. Pure.

The keeper applies each inside its compare-and-set, to the status it replaces
(and again, to the newer status, after a conflict), so nothing here may come
from an earlier read: a new term is derived from the recorded terms, an
ensemble from the recorded ensemble. A step whose shard has moved on since the
action began (another term, another leader, no longer steady) raises
`ActionFailed` rather than writing over the newer record: the planner looks
again. A step that finds nothing to change is a check, which the keeper makes
against a fresh read of the store before the executor calls a pod on it.

`open_term` and `record_leader` and `record_steady` are an election's writes;
`add_member`, `start_removal`, `finish_removal` and `record_voting` an ensemble
change's; the `require_*` checks go before pod calls whose intent is recorded
already (finishing an interrupted change, deleting a replica left outside its
shard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from cairn.controller.actions import ActionFailed
from cairn.controller.election import majority
from cairn.controller.model import (
    ClusterStatus,
    ElectionRecord,
    LastLeader,
    ShardRecord,
    ShardState,
)


def shard_record(status: ClusterStatus, shard: int) -> ShardRecord:
    record = status.shard(shard)
    if record is None:
        raise ActionFailed(f"shard {shard} is not in the cluster state")
    return record


def highest_term(status: ClusterStatus, shard: int) -> int:
    """The highest term the status records for the shard (its record, and its
    elections in the history)."""
    record = shard_record(status, shard)
    return max((record.term, *(e.term for e in status.elections if e.shard == shard)))


def _in_term(status: ClusterStatus, shard: int, term: int) -> ShardRecord:
    record = shard_record(status, shard)
    if record.term != term:
        raise ActionFailed(f"shard {shard} has moved on to term {record.term} (from {term})")
    return record


def _steady_in_term(status: ClusterStatus, shard: int, term: int) -> ShardRecord:
    record = _in_term(status, shard, term)
    if record.state is not ShardState.STEADY or record.leader is None:
        raise ActionFailed(f"shard {shard} has no steady leader in term {term}")
    return record


# -- elections ---------------------------------------------------------------------


def open_term(status: ClusterStatus, shard: int) -> ClusterStatus:
    """A new term for the shard, one past every term recorded for it, with no
    leader: recorded before any member hears of it, so that no controller (this
    one restarted, or another) ever hands the same term out twice. The last
    leader stays recorded (`ShardRecord.last_leader`): if this election chooses
    no one, it is still the last that may have committed anything.

    A shard that never had a leader stays NEW through retried first elections:
    only then may NewTerm create missing replicas. Afterwards a member without
    its replica (a wiped disk) must not answer with an empty log, which could
    outvote one holding committed entries; it is recreated through an ensemble
    change, from a leader, instead."""
    record = shard_record(status, shard)
    state = ShardState.NEW if record.state is ShardState.NEW else ShardState.ELECTION
    term = highest_term(status, shard) + 1
    return status.with_shard(replace(record, term=term, state=state, leader=None))


def record_leader(
    status: ClusterStatus, shard: int, term: int, leader: str, incarnations: Mapping[str, int]
) -> ClusterStatus:
    """The leader chosen for `term` (made a member if it was not one), before it
    is told, with the incarnations of the data of the members that answered
    intact (those with none recorded get theirs recorded). It becomes the last
    leader, with no learners: it is handed every other member as a follower,
    and those vote from the start of its term (LeaderCore)."""
    record = _in_term(status, shard, term)
    if record.state is ShardState.STEADY or record.leader not in (None, leader):
        raise ActionFailed(f"shard {shard}: term {term} already has leader {record.leader}")
    ensemble = record.ensemble if leader in record.ensemble else (*record.ensemble, leader)
    leaving = record.leaving
    # The new leader drops the members still leaving. Were fewer than a
    # majority of the members that remain known to hold their data (one wiped
    # and not yet caught up, say), that would leave the shard without an
    # intact majority although none was lost: with the leader down before it
    # caught the wiped one up, no election could ever be planned again. The
    # removal is undone instead; the leaving members that answered intact stay.
    if sum(1 for name in ensemble if name in incarnations) < majority(len(ensemble)):
        kept = tuple(name for name in leaving if name in incarnations and name not in ensemble)
        ensemble = (*ensemble, *kept)
        leaving = tuple(name for name in leaving if name not in kept)
    chosen = replace(
        record,
        leader=leader,
        ensemble=ensemble,
        leaving=leaving,
        last_leader=LastLeader(term, leader),
    )
    chosen = chosen.with_incarnations(incarnations)
    return status.with_shard(chosen)


def record_steady(
    status: ClusterStatus,
    shard: int,
    term: int,
    leader: str,
    election: ElectionRecord | None,
    move_done: bool,
) -> ClusterStatus:
    """The leader of `term` took office: the shard is steady and the shard map
    changes. `move_done`: a requested leader move is done (one that failed stays
    requested)."""
    record = _in_term(status, shard, term)
    if record.leader != leader:
        raise ActionFailed(f"shard {shard}: term {term} is led by {record.leader}, not {leader}")
    if record.state is ShardState.STEADY and election is None:
        return status  # confirmed already: a later change's `leaving` must stay
    steady = replace(record, state=ShardState.STEADY, leaving=())
    # Incarnations are kept for voters only: one removed and added back later
    # is a new member.
    status = status.with_shard(steady.with_incarnations({}))
    status = replace(status, assignments_version=status.assignments_version + 1)
    if move_done:
        status = replace(
            status, leader_moves=tuple(m for m in status.leader_moves if m.shard != shard)
        )
    return status.with_election(election) if election is not None else status


# -- ensemble changes ----------------------------------------------------------------


def add_member(status: ClusterStatus, shard: int, term: int, name: str) -> ClusterStatus:
    """`name` listed as a member, before it is created and added, and as one of
    the last leader's learners: the leader counts it only once it has caught
    up (`record_voting`). Recorded before the leader hears of it, so the
    record never misses a member the leader does not count yet."""
    record = _steady_in_term(status, shard, term)
    if name in record.ensemble:
        return status
    added = replace(record, ensemble=(*record.ensemble, name))
    last = record.last_leader
    if last is not None and name not in last.learners:
        added = replace(added, last_leader=replace(last, learners=(*last.learners, name)))
    return status.with_shard(added)


def start_removal(status: ClusterStatus, shard: int, term: int, name: str) -> ClusterStatus:
    """`name` moved from the members to `leaving`, before the leader drops it."""
    record = _steady_in_term(status, shard, term)
    if name == record.leader:
        raise ActionFailed(f"shard {shard}: the leader is not removed directly")
    if name not in record.ensemble and name in record.leaving:
        return status
    if name not in record.ensemble:
        raise ActionFailed(f"shard {shard}: {name} is not a member")
    return status.with_shard(
        replace(
            record,
            ensemble=tuple(n for n in record.ensemble if n != name),
            leaving=(*record.leaving, name),
        )
    )


def finish_removal(
    status: ClusterStatus, shard: int, term: int, names: Iterable[str]
) -> ClusterStatus:
    """The leader has dropped `names`: they no longer count as voters (nor
    are they its learners)."""
    record = _steady_in_term(status, shard, term)
    gone = set(names)
    kept = replace(record, leaving=tuple(n for n in record.leaving if n not in gone))
    last = kept.last_leader
    if last is not None:
        learners = tuple(n for n in last.learners if n not in gone)
        kept = replace(kept, last_leader=replace(last, learners=learners))
    return status.with_shard(kept.with_incarnations({}))


def record_voting(
    status: ClusterStatus,
    shard: int,
    term: int,
    leader: str,
    names: Iterable[str],
    term_committed: bool = False,
) -> ClusterStatus:
    """`leader`, leading `term`, reported the learners `names` voting: they
    count toward its commit offset for the rest of its term (a voter stops
    voting only when removed, or when it comes back with another incarnation
    of its data, and then it does not answer an election for the data it is
    recorded to hold). With `term_committed`, it reported the first entry of
    its term committed, which stays so. Nothing changes if another leader
    has been chosen since: it was handed them as followers, and has no
    learners yet."""
    record = shard_record(status, shard)
    last = record.last_leader
    if last is None or (last.term, last.name) != (term, leader):
        return status
    voting = set(names)
    learners = tuple(name for name in last.learners if name not in voting)
    committed = last.committed or term_committed
    if (learners, committed) == (last.learners, last.committed):
        return status
    recorded = replace(last, learners=learners, committed=committed)
    return status.with_shard(replace(record, last_leader=recorded))


def record_new_member_data(
    status: ClusterStatus, shard: int, name: str, incarnation: int
) -> ClusterStatus:
    """A member with no recorded incarnation holds nothing the shard counts on
    yet: what it will hold comes with `incarnation`. One recorded already keeps
    its record: if this is another incarnation, the member lost that data, and
    its leader's report of it voting again (caught up) is what may change the
    record (`record_caught_up_data`)."""
    record = shard_record(status, shard)
    if not incarnation or record.incarnation_of(name) is not None:
        return status
    return status.with_shard(record.with_incarnations({name: incarnation}))


def record_caught_up_data(
    status: ClusterStatus, shard: int, caught_up: Mapping[str, int]
) -> ClusterStatus:
    """Members their leader caught up with another incarnation of their data
    than recorded hold what they are recorded to hold again: they count in
    elections again."""
    record = shard_record(status, shard)
    return status.with_shard(record.with_incarnations(caught_up))


def require_member(
    status: ClusterStatus, shard: int, term: int, leader: str, name: str
) -> ClusterStatus:
    """Check: `name` is still a member of the shard steady under `leader` in
    `term` (before it is fenced and added again)."""
    record = _steady_in_term(status, shard, term)
    if record.leader != leader or name not in record.ensemble:
        raise ActionFailed(f"shard {shard}: {name} is no longer a member under {leader}")
    return status


def require_leaving(
    status: ClusterStatus, shard: int, term: int, names: Iterable[str]
) -> ClusterStatus:
    """Check: `names` are still recorded as leaving the steady shard in `term`."""
    record = _steady_in_term(status, shard, term)
    if not set(names) <= set(record.leaving):
        raise ActionFailed(f"shard {shard}: {sorted(names)} are no longer all leaving")
    return status


def require_outside(status: ClusterStatus, shard: int, node: str) -> ClusterStatus:
    """Check: `node` is no voter of the steady shard (before its replica there is
    deleted)."""
    record = shard_record(status, shard)
    if record.state is not ShardState.STEADY or node in record.voters:
        raise ActionFailed(f"shard {shard}: {node}'s replica is not one left outside it")
    return status
