"""The shipped controller and the shipped storage pods together
(managed_cluster.py): the controller's observer, planner, executor and keeper
elect, fence and replace members over gRPC on the simulated network, under
power losses, cuts, isolated pods and controller crashes. Checked after every
step: pod_checks.py's invariants, each read's freshness, and liveness once
healed.

Seeds and steps are the simulation's options (conftest.py).
"""

from __future__ import annotations

import pytest

from simulation import summary
from simulation.managed_cluster import PROFILES, Cluster
from simulation.managed_profiles import TARGETED, Targeted
from simulation.mutants import MUTANTS
from simulation.real_cluster import Violation

# The broad profiles and the targeted histories (managed_profiles.py).
HISTORIES: dict[str, Targeted] = {
    **{name: Targeted(faults) for name, faults in PROFILES.items()},
    **TARGETED,
}


def run_history(seed: int, steps: int, profile: str) -> Cluster:
    history = HISTORIES[profile]
    cluster = history.cluster(seed, history.faults)
    try:
        cluster.run(steps)
        cluster.heal_and_settle()
        cluster.check_writes_go_through()
        cluster.check_members_converge()
    finally:
        cluster.close()
    return cluster


@pytest.mark.parametrize("profile", sorted(HISTORIES))
def test_the_shipped_controller_keeps_acknowledged_writes(
    profile: str, sim_seed: int, sim_steps: int
) -> None:
    cluster = run_history(sim_seed, sim_steps, profile)
    summary.add_managed(cluster.counters)
    assert cluster.counters.get("writes acknowledged", 0) > 0
    assert cluster.checks.leaders_serving >= 1


# Each mutant (mutants.py): the profile it runs in, the seed that first catches
# it (run first), and how many seeds it is given; MUTANT_STEPS steps each.
MUTANT_STEPS = 5000
CAUGHT_WITHIN: dict[str, tuple[str, int, int]] = {
    # (e): a replica applies an entry its disk does not hold durably yet.
    "apply past the durable offset": ("steady", 0, 3),
    # (e): a replica takes what it appended for durable (and applies it).
    "acknowledge unsynced entries": ("steady", 0, 3),
    # (h): a new leader expires the sessions at once; another locker takes
    # the lock while its holder still keeps its session alive.
    "sessions expire when a leader takes over": ("sessions", 0, 3),
    # (c): the new leader's first entry replaces one a member committed.
    "elect the lowest head": ("churn", 0, 3),
    # (c): a member removed before the rest caught up; a leader elected
    # without what was committed with it.
    "ensemble changes without waiting": ("wipes", 10, 15),
    # (g): a paused controller, resumed, elects in a term the next one gave.
    "hole 3: no controller-epoch fencing": ("wipes", 8, 15),
    # (c): B's replica, re-created empty after its disk was lost, counted as
    # holding what it held; with the lagging C it elects (managed_profiles.py).
    "hole 1: a wiped member keeps its vote": ("wipe-while-lagging", 0, 5),
    # (c): a lagging voter moved to while the member just added has nothing:
    # counting that member, a majority holds less than was committed; a
    # follower of the new leader, holding it, refuses its log
    # (ReplicationInvariantError). Seeds 0-9 catch it in 6.
    "hole 2: a learner is elected": ("move-to-lagging-voter", 0, 8),
    # (f), (b): the leader dropped a member whose acknowledgement its commit
    # offset needed; it lost power with the member left, which had not synced
    # what was committed; that member, back first, was elected without it.
    "remove a member the commit needs": ("shrink-then-crash", 0, 5),
}


@pytest.mark.parametrize("mutant", sorted(CAUGHT_WITHIN))
def test_the_checks_catch_a_broken_rule(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for target, name, value in MUTANTS[mutant]:
        monkeypatch.setattr(target, name, value)
    profile, first, seeds = CAUGHT_WITHIN[mutant]
    with pytest.raises(Violation):
        _first_violation(
            profile, MUTANT_STEPS, [first, *(seed for seed in range(seeds) if seed != first)]
        )


def _first_violation(profile: str, steps: int, seeds: list[int]) -> None:
    for seed in seeds:
        run_history(seed, steps, profile)


@pytest.mark.parametrize(("profile", "seed"), [("wipe-while-lagging", 310), ("even-learners", 632)])
def test_histories_a_campaign_found_stuck(profile: str, seed: int) -> None:
    """310: a cut-off follower replaced on the word of a leader that had not
    heard the other follower lost its disk; once the leader crashed, the shard
    could not elect (tests/controller/test_no_replacement_past_a_lost_disk.py).
    632: a DeleteShard whose call was cancelled left the replica's applier
    asleep; the pod refused to re-create the replica until close gave up on it
    (tests/storage/service/test_cancelled_close.py)."""
    run_history(seed, MUTANT_STEPS, profile)
