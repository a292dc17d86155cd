"""Deterministic simulation of one shard with 3 and 5 replicas (see __init__.py).

Every case runs one seed: faulty steps with the checkers after each, then a quiet
phase and the liveness check. A failure prints the seed, the step, the state of
every replica and the trace's tail; conftest.py has the options for long runs.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulation import summary
from simulation.mutants import MUTANTS
from simulation.profiles import TARGETED, Targeted, run_targeted
from simulation.world import PROFILES, SimConfig, SimulationFailure, run_seed

# (profile, replicas, seed, steps) of liveness failures found and diagnosed
# but not yet fixed: xfailed by name, so they stay visible. Keep it empty.
KNOWN_LIVENESS_FAILURES: set[tuple[str, int, int, int]] = set()


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("replicas", [3, 5], ids=["3replicas", "5replicas"])
def test_shard_keeps_its_invariants(
    replicas: int, profile: str, sim_seed: int, sim_steps: int
) -> None:
    if (profile, replicas, sim_seed, sim_steps) in KNOWN_LIVENESS_FAILURES:
        pytest.xfail("a liveness failure the real controller's simulation found (see above)")
    config = dataclasses.replace(PROFILES[profile], replicas=replicas, steps=sim_steps)
    try:
        world = run_seed(sim_seed, config)
    except SimulationFailure as failure:
        pytest.fail(f"[{profile}] {failure}", pytrace=False)
    summary.add(world)
    # The run did something: writes were acknowledged and leaders came and went.
    assert world.observer.acked
    assert world.coordinator.elections_started > 1


@pytest.mark.parametrize("profile", sorted(TARGETED))
def test_targeted_profiles_keep_invariants(profile: str, sim_seed: int, sim_steps: int) -> None:
    """The targeted profiles (profiles.py) with the real code: they exist to
    catch their hole's mutant, and must not fail without it. Three replicas
    only: hole 1's history needs a leader and two followers, hole 2's
    ensemble changes cycle the replication factor through 2 and 4 from 3, and
    a second size would double their cost."""
    targeted = TARGETED[profile]
    config = dataclasses.replace(targeted.config, replicas=3, steps=sim_steps)
    try:
        world = run_targeted(sim_seed, targeted, config)
    except SimulationFailure as failure:
        pytest.fail(f"[{profile}] {failure}", pytrace=False)
    summary.add(world)
    assert world.observer.acked
    assert world.coordinator.elections_started > 1


@pytest.mark.parametrize(("profile", "seed"), [("wipes", 8), ("lagging", 11)])
def test_half_of_an_even_ensemble_elects_when_its_leader_committed(profile: str, seed: int) -> None:
    """Found by the first CI run with the real controller: at a replication
    factor of 2 one member held everything committed and the other nothing
    (seed 8: it lost its disk; seed 11: its replica was never created), and
    the holder restarted fenced. Counting a majority, 2 of 2, the shard never
    elected again; the holder alone meets every commit quorum of its last term
    (election.enough_answers), so it now leads again."""
    config = dataclasses.replace(PROFILES[profile], replicas=3, steps=2000)
    run_seed(seed, config)


@pytest.mark.parametrize("seed", [105, 109, 110, 119, 133, 134, 135, 2488])
def test_wipes_no_longer_stall_the_shard(seed: int) -> None:
    """Found by a 5000-step campaign (wipes, 3 replicas): shards that kept an
    intact majority but never elected again. 109: an election finished a
    removal that left one intact member of two (steps.record_leader keeps the
    leaving member now). 110, 119, 133: the last leader answered intact with
    too few others for a majority (at RF 2 alone, at RF 4 with one member it
    counted) before a commit of its term was reported; it holds all that
    earlier terms committed (election.enough_answers). 134: at RF 4, not
    traced; it passes since the same changes. 105, 135: at RF 4, one member
    wiped and one added but never created, the last leader and one member it
    was handed answered; the controller had restarted (135), or an election
    had failed and it restarted (105), and knew only that the leader counted
    itself. The record keeps the last leader and its learners now
    (ShardRecord.last_leader; tests/controller/test_last_leader.py). 2488: RF 3
    grew to 4 before the record said the new leader had committed in its
    term; the leader and the member being added lost their disks, and two of
    four could not elect. Changes wait for the commit on record now
    (tests/controller/test_commit_recorded_before_changes.py)."""
    config = dataclasses.replace(PROFILES["wipes"], replicas=3, steps=5000)
    run_seed(seed, config)


@pytest.mark.parametrize("seed", [1061, 1180])
def test_half_of_an_even_ensemble_elects_after_the_controller_that_saw_the_commit_left(
    seed: int,
) -> None:
    """Found by a 5000-step campaign (wipes, 5 replicas): at RF 4 the last
    leader and one member lost their disks, and the two members left intact,
    half of four, never elected. They may: the last leader had reported its
    term committed, so any half of the members it counted holds every
    committed entry; but only the controller that saw that report knew it,
    and it had been replaced. The record says so now (LastLeader.committed,
    recorded by RecordVoting in an even ensemble)."""
    config = dataclasses.replace(PROFILES["wipes"], replicas=5, steps=5000)
    run_seed(seed, config)


@pytest.mark.parametrize("seed", [2014, 2028])
def test_half_of_an_even_ensemble_elects_when_a_member_saw_its_leaders_commit(seed: int) -> None:
    """Found by a 5000-step campaign (wipes, 3 replicas): the last leader lost
    its disk before any controller saw it commit in its term, leaving half of
    an even ensemble intact (2028: one of two; 2014: two of four, the fourth
    a new member never created), which waited for an operator. A follower
    whose commit offset is at an entry of that term shows the term committed
    (planner.commit_seen_in_term), so that half holds every committed entry
    and elects."""
    config = dataclasses.replace(PROFILES["wipes"], replicas=3, steps=5000)
    run_seed(seed, config)


@pytest.mark.parametrize(
    ("profile", "replicas", "seed"), [("lagging", 5, 2233), ("wipes", 3, 2083)]
)
def test_one_member_catches_up_at_a_time(profile: str, replicas: int, seed: int) -> None:
    """Found by 5000-step campaigns: an ensemble growing while a learner was
    cut off gained a second learner. Lagging 2233 then lost an acknowledged
    write (an election handed both learners to a leader as voters, and the
    next was won by them and a voter lacking the last commits); wipes 2083
    stalled (half of four, one a learner). The planner adds nothing while a
    learner is a member (tests/controller/test_one_learner_at_a_time.py)."""
    config = dataclasses.replace(PROFILES[profile], replicas=replicas, steps=5000)
    run_seed(seed, config)


def test_a_refused_removal_does_not_keep_a_wiped_member_out() -> None:
    """Found by a 5000-step campaign (wipes 1397, 3 replicas): RF 3 -> 2, the
    removal of r-3 recorded when r-0, a member staying, lost its disk. The
    leader refused to drop r-3 until the rest held what was committed with it,
    and FinishEnsembleChange stopped at that refusal before re-creating r-0,
    the one member that could catch up: it never converged. The additions now
    go on after a refused removal, which is finished next time."""
    config = dataclasses.replace(PROFILES["wipes"], replicas=3, steps=5000)
    run_seed(1397, config)


@pytest.mark.parametrize(
    ("profile", "seed", "steps"), [("reading", 1026, 400), ("churn", 1021, 3000)]
)
def test_a_removed_member_the_commit_needed_loses_nothing(
    profile: str, seed: int, steps: int
) -> None:
    """Found by a 5000-step campaign: acknowledged writes lost at steps 240
    and 2683. The controller removed a member (RF 3 -> 2) judging from a
    report in which the other one held the commit offset; the leader had
    committed more with the member removed before the removal arrived, and
    dropped it. Then the leader died, and the member left was elected alone
    without those entries. The leader now keeps a member until the rest hold
    every committed entry (QuorumTracker.remove)."""
    config = dataclasses.replace(PROFILES[profile], replicas=3, steps=steps)
    run_seed(seed, config)


# Mutant -> (seeds it must be caught within, ensemble size, fault profile,
# controller), each run for MUTANT_STEPS steps; each is caught well within its
# bound today (the first catching seed and checker in the comment).
CAUGHT_WITHIN: dict[str, tuple[int, int, str, str]] = {
    # Seed 0, (b): a new leader lacks an acknowledged write.
    "elect the lowest head": (3, 3, "churn", "real"),
    # Seed 48, (b): a member removed before the rest caught up leaves no
    # majority holding what was committed with it; a new leader lacks an
    # acknowledged write. (At seed 21, before the leader's first commit was
    # recorded ahead of changes, it was a liveness failure: the shard never
    # committed again.) "shrink-then-crash" catches it at seed 1 by (b), but
    # through the leader's removal, as "remove a member the commit needs".
    "ensemble changes without waiting": (60, 3, "wipes", "real"),
    "acknowledge unsynced entries": (8, 3, "churn", "real"),  # seed 3, (c)
    "act on stale Truncates": (24, 5, "churn", "real"),  # seed 9, ReplicationInvariantError
    # Seed 0, (e): a replica applied past its synced offset (a rule of the
    # shard's core, ShardCore.appliable_offset, which the simulated replicas run).
    "apply past the durable offset": (3, 3, "lagging", "real"),
    # Seed 3, liveness: a new leader's followers lag past the window, its
    # term never commits.
    "send window anchored at the applied offset": (10, 3, "lagging", "real"),
    # Under the real controller, whose failure detection takes a few steps,
    # an old leader cut off with a reader rarely still answers once a new
    # leader has acknowledged a write: these two run with the scripted
    # coordinator (which elects the moment a leader is cut off), as before.
    # Caught at seed 53: (f), a read answered from a stale state.
    "reads without the lease": (60, 3, "reading", "scripted"),
    # Not listed: "acknowledge old streams after a new term" (caught at seed 3
    # of "reading" before streams broke on a lost message, as gRPC streams do;
    # not within 15 seeds of reading, 12 of churn or lagging since).
    # Issue 38's holes, reverted in the real code:
    # seed 1, (b): B's replica re-created empty after its wipe, counted as
    # holding what it held (profiles.py, "wipe-while-lagging"). The broad
    # profiles reach its history too rarely: wipes x 3 did not catch it in
    # seeds 0-7, lagging-and-wiping configs without the targeted world (RF
    # changes on) not in 0-7 either.
    "hole 1: a wiped member keeps its vote": (3, 3, "wipe-while-lagging", "real"),
    # seed 31, (b): a member the leader did not count as holding every
    # committed entry takes the term by a leader move, lacking an
    # acknowledged write (profiles.py, "even-learners"). Its history is rare:
    # moves and ensemble changes wait for the term's first entry to be held
    # (issue 38's inherited-commit hole) and the record keeps the last
    # leader's commit; the mutant lifts the wait for that record too.
    "hole 2: a learner is elected": (40, 3, "even-learners", "real"),
    # seed 0, (b): the leader dropped a member whose acknowledgement its
    # commit offset needed; it crashed, and the member left, lacking entries
    # committed with the removed one, was elected (profiles.py,
    # "shrink-then-crash"). Found by a 5000-step campaign (churn seed 1021,
    # reading seed 1026); the broad profiles reach it about once in a hundred
    # seeds.
    "remove a member the commit needs": (16, 3, "shrink-then-crash", "real"),
    # seed 2, (g): two controllers act on one shard, two leaders in one term.
    "hole 3: no controller-epoch fencing": (4, 3, "churn", "real"),
}
MUTANT_STEPS = 2000
# The first seed that catches each mutant (within its bound above), run first: the
# seeds before it run their whole 2000 steps in vain. If a change to the simulation
# moves the catch elsewhere, the other seeds of the bound are still run, in order.
FIRST_CATCHING_SEED: dict[str, int] = {
    "acknowledge unsynced entries": 3,
    "act on stale Truncates": 9,
    "ensemble changes without waiting": 48,
    "hole 1: a wiped member keeps its vote": 1,
    "hole 2: a learner is elected": 31,
    "hole 3: no controller-epoch fencing": 2,
    "reads without the lease": 53,
    "send window anchored at the applied offset": 3,
}


@pytest.mark.parametrize("mutant", sorted(CAUGHT_WITHIN))
def test_checkers_catch_a_broken_variant(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds, replicas, profile, controller = CAUGHT_WITHIN[mutant]
    broken = MUTANTS[mutant]
    for target, name, value in broken.patches:
        monkeypatch.setattr(target, name, value)
    targeted = TARGETED.get(profile) or Targeted(PROFILES[profile])
    config = dataclasses.replace(
        targeted.config,
        replicas=replicas,
        steps=MUTANT_STEPS,
        rules=broken.config.rules,
        leader_core_class=broken.config.leader_core_class,
        controller=controller,
    )
    first = FIRST_CATCHING_SEED.get(mutant, 0)
    assert first < seeds, (mutant, first, seeds)
    for seed in [first, *(seed for seed in range(seeds) if seed != first)]:
        try:
            run_targeted(seed, targeted, config)
        except SimulationFailure:
            return
    pytest.fail(f"no checker caught the mutant {mutant!r} in {seeds} seeds")


def test_notification_trimming_does_not_depend_on_apply_grouping() -> None:
    """A short retention makes the every-256th-entry trim meet notifications of
    entries in its own apply group; check (d) would see the states diverge if the
    trim judged only the KV as it was before the group (it once did)."""
    config = SimConfig(replicas=3, steps=1000, notification_retention_ms=100)
    for seed in range(2000, 2005):
        run_seed(seed, config)
