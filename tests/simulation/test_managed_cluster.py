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
from simulation.managed_cluster import Cluster
from simulation.mutants import MUTANTS
from simulation.real_cluster import Violation


def run_history(seed: int, steps: int) -> Cluster:
    cluster = Cluster(seed)
    try:
        cluster.run(steps)
        cluster.heal_and_settle()
        cluster.check_writes_go_through()
    finally:
        cluster.close()
    return cluster


def test_the_shipped_controller_keeps_acknowledged_writes(sim_seed: int, sim_steps: int) -> None:
    cluster = run_history(sim_seed, sim_steps)
    summary.add_managed(cluster.counters)
    assert cluster.counters.get("writes acknowledged", 0) > 0
    assert cluster.checks.leaders_serving >= 1


# Each mutant (mutants.py) and the seed that first catches it (run first), then
# how many seeds it is given; MUTANT_STEPS steps each.
MUTANT_STEPS = 5000
CAUGHT_WITHIN: dict[str, tuple[int, int]] = {
    # (e): a replica applies an entry its disk does not hold durably yet.
    "apply past the durable offset": (0, 3),
    # The new leader's log disagrees with what a follower committed: the
    # follower's Truncate raises ReplicationInvariantError; or (b), (f).
    "elect the lowest head": (1, 5),
}


@pytest.mark.parametrize("mutant", sorted(CAUGHT_WITHIN))
def test_the_checks_catch_a_broken_rule(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for target, name, value in MUTANTS[mutant].patches:
        monkeypatch.setattr(target, name, value)
    first, seeds = CAUGHT_WITHIN[mutant]
    with pytest.raises(Violation):
        _first_violation([first, *(seed for seed in range(seeds) if seed != first)])


def _first_violation(seeds: list[int]) -> None:
    for seed in seeds:
        run_history(seed, MUTANT_STEPS)
