"""The executor's status writes as functions of the status they replace (hole 3
of issue 38): whatever state a step is applied to, it derives what it writes
from that state, and refuses to write over a shard that has moved on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cairn.common.hashing import HashRange
from cairn.controller import steps
from cairn.controller.actions import ActionFailed
from cairn.controller.fencing import ControllerFenced, check_epoch, take_epoch
from cairn.controller.model import (
    ClusterStatus,
    ElectionRecord,
    LastLeader,
    ShardRecord,
    ShardState,
)

A, B, C, D = "cairn-storage-0", "cairn-storage-1", "cairn-storage-2", "cairn-storage-3"


def status_with(record: ShardRecord, *elections: ElectionRecord) -> ClusterStatus:
    return ClusterStatus(shards=(record,), elections=elections)


STEADY = ShardRecord("default", 0, HashRange(0, 0xFFFFFFFF), 7, ShardState.STEADY, A, (A, B, C))


def test_a_new_term_is_one_past_every_term_recorded_for_the_shard() -> None:
    opened = steps.shard_record(steps.open_term(status_with(STEADY), 0), 0)
    assert (opened.term, opened.state, opened.leader) == (8, ShardState.ELECTION, None)
    # Applied again to the state it then replaces, it never repeats a term.
    twice = steps.open_term(steps.open_term(status_with(STEADY), 0), 0)
    assert steps.shard_record(twice, 0).term == 9
    # A record whose term went back (written by an older controller) cannot
    # make a term handed out already come round again.
    history = ElectionRecord("default", 0, 11, B, "test", 0, 1)
    assert steps.shard_record(steps.open_term(status_with(STEADY, history), 0), 0).term == 12
    new = replace(STEADY, state=ShardState.NEW, leader=None)
    assert steps.shard_record(steps.open_term(status_with(new), 0), 0).state is ShardState.NEW


def test_an_election_step_refuses_a_shard_that_moved_on() -> None:
    opened = steps.open_term(status_with(STEADY), 0)
    led = steps.record_leader(opened, 0, 8, B, incarnations={B: 7})
    assert steps.shard_record(led, 0).leader == B
    assert steps.shard_record(led, 0).incarnation_of(B) == 7
    with pytest.raises(ActionFailed):
        steps.record_leader(opened, 0, 7, B, incarnations={})  # an older term
    with pytest.raises(ActionFailed):
        steps.record_leader(led, 0, 8, C, incarnations={})  # the term has its leader
    steady = steps.record_steady(led, 0, 8, B, None, move_done=False)
    assert steps.shard_record(steady, 0).state is ShardState.STEADY
    assert steady.assignments_version == 1
    # Confirming it again changes nothing (a removal under way stays recorded).
    removing = steps.start_removal(steady, 0, 8, C)
    assert steps.record_steady(removing, 0, 8, B, None, move_done=False) == removing
    with pytest.raises(ActionFailed):
        steps.record_steady(steps.open_term(steady, 0), 0, 8, B, None, move_done=False)
    # A new member a leader got is recorded as a member.
    outside = steps.record_leader(opened, 0, 8, D, incarnations={})
    assert steps.shard_record(outside, 0).ensemble == (A, B, C, D)


def test_ensemble_steps_are_computed_from_the_ensemble_they_replace() -> None:
    status = status_with(STEADY)
    added = steps.add_member(status, 0, 7, D)
    assert steps.shard_record(added, 0).ensemble == (A, B, C, D)
    assert steps.add_member(added, 0, 7, D) == added
    removing = steps.start_removal(added, 0, 7, B)
    record = steps.shard_record(removing, 0)
    assert (record.ensemble, record.leaving) == ((A, C, D), (B,))
    assert steps.start_removal(removing, 0, 7, B) == removing
    done = steps.finish_removal(removing, 0, 7, (B,))
    assert steps.shard_record(done, 0).leaving == ()
    with pytest.raises(ActionFailed):
        steps.start_removal(status, 0, 7, A)  # the leader
    moved_on = steps.open_term(status, 0)
    for step in (
        lambda: steps.add_member(moved_on, 0, 7, D),
        lambda: steps.start_removal(moved_on, 0, 7, B),
        lambda: steps.finish_removal(moved_on, 0, 7, (B,)),
        lambda: steps.require_member(moved_on, 0, 7, A, B),
        lambda: steps.require_leaving(status, 0, 7, (B,)),
        lambda: steps.require_outside(status, 0, B),
    ):
        with pytest.raises(ActionFailed):
            step()
    assert steps.require_member(status, 0, 7, A, B) == status
    assert steps.require_outside(status, 0, D) == status


def test_the_last_leader_and_its_learners_follow_the_elections_and_changes() -> None:
    # Chosen: the last leader, handed every other member (no learners).
    opened = steps.open_term(status_with(STEADY), 0)
    led = steps.record_steady(
        steps.record_leader(opened, 0, 8, B, incarnations={}), 0, 8, B, None, move_done=False
    )
    assert steps.shard_record(led, 0).last_leader == LastLeader(8, B)
    # A member added is its learner until seen voting, before the leader hears of it.
    added = steps.add_member(led, 0, 8, D)
    assert steps.shard_record(added, 0).last_leader == LastLeader(8, B, (D,))
    assert steps.add_member(added, 0, 8, D) == added
    assert steps.record_voting(added, 0, 7, A, (D,)) == added  # another leader's report
    voting = steps.record_voting(added, 0, 8, B, (D,))
    assert steps.shard_record(voting, 0).last_leader == LastLeader(8, B)
    assert steps.record_voting(voting, 0, 8, B, (D,)) == voting
    # A learner removed is no learner any more.
    removed = steps.finish_removal(steps.start_removal(added, 0, 8, D), 0, 8, (D,))
    assert steps.shard_record(removed, 0).last_leader == LastLeader(8, B)
    # A failed election keeps it: no later term has had a leader.
    reopened = steps.open_term(added, 0)
    record = steps.shard_record(reopened, 0)
    assert (record.term, record.leader) == (9, None)
    assert record.last_leader == LastLeader(8, B, (D,))
    assert steps.record_voting(reopened, 0, 8, B, (D,)) != reopened  # still its learner
    # The next leader chosen replaces it, handed D as a follower.
    assert steps.shard_record(
        steps.record_leader(reopened, 0, 9, A, incarnations={}), 0
    ).last_leader == LastLeader(9, A)


def test_the_epoch_is_taken_by_incrementing_and_checked_for_equality() -> None:
    status = take_epoch(take_epoch(ClusterStatus()))
    assert status.controller_epoch == 2
    check_epoch(status, 2)
    for stale in (0, 1, 3):
        with pytest.raises(ControllerFenced):
            check_epoch(status, stale)


def test_an_election_keeps_a_leaving_member_the_rest_lack_a_majority_without() -> None:
    # Seed 109 of the wipes profile: C was leaving (A, B, C) when A lost its
    # disk; B and C answered the election intact, A with another incarnation.
    # Dropping C would leave (A, B) with one member known to hold its data, and
    # once B went down before catching A up no election could be planned again
    # (a wait for an operator although no data was lost): C stays a member.
    removing = replace(STEADY, ensemble=(A, B), leaving=(C,), incarnations=((A, 1), (B, 2), (C, 3)))
    opened = steps.open_term(status_with(removing), 0)
    led = steps.shard_record(steps.record_leader(opened, 0, 8, B, incarnations={B: 2, C: 3}), 0)
    assert (led.ensemble, led.leaving) == ((A, B, C), ())
    assert led.incarnation_of(C) == 3
    # With a majority of the rest intact, the removal goes on as before.
    intact = steps.record_leader(opened, 0, 8, B, incarnations={A: 1, B: 2, C: 3})
    assert (steps.shard_record(intact, 0).ensemble, steps.shard_record(intact, 0).leaving) == (
        (A, B),
        (C,),
    )
