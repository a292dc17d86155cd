"""The shipped shard code (shard.py, the replication sender and servicer) on
three or five simulated pods (real_cluster.py): power losses, correlated ones
included, network cuts, isolated pods and elections; every acknowledged write
is in every later leader's state, every read finds what was acknowledged
before it began, and once healed the cluster takes writes again.

Seeds and steps are the simulation's options (conftest.py): a campaign is
`--sim-seeds N --sim-steps 5000`.
"""

from __future__ import annotations

import pytest

from simulation import summary
from simulation.mutants import MUTANTS
from simulation.real_cluster import Cluster, Violation


def run_history(seed: int, steps: int, pods: int = 3) -> Cluster:
    cluster = Cluster(seed, pods)
    try:
        cluster.run(steps)
        cluster.heal_and_settle()
        cluster.check_writes_go_through()
    finally:
        cluster.close()
    return cluster


@pytest.mark.parametrize("pods", [3, 5], ids=["3pods", "5pods"])
def test_acknowledged_writes_survive_on_the_shipped_code(
    pods: int, sim_seed: int, sim_steps: int
) -> None:
    cluster = run_history(sim_seed, sim_steps, pods)
    summary.add_pods(cluster.counters)
    assert cluster.counters.get("writes acknowledged", 0) > 0


# Each mutant of the shipped code (mutants.py), the seed that first catches it
# (run first) and how many seeds it is given; MUTANT_STEPS steps each.
CAUGHT_WITHIN: dict[str, tuple[int, int]] = {
    "acknowledge unsynced entries": (3, 30),
    "reads without the lease": (3, 30),
    "a new leader serves before older leases end": (0, 30),
}
MUTANT_STEPS = 5000


@pytest.mark.parametrize("mutant", sorted(CAUGHT_WITHIN))
def test_the_checks_catch_a_broken_rule_of_the_shipped_code(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for target, name, value in MUTANTS[mutant]:
        monkeypatch.setattr(target, name, value)
    first, seeds = CAUGHT_WITHIN[mutant]
    with pytest.raises(Violation):
        _first_violation([first, *(seed for seed in range(seeds) if seed != first)])


def _first_violation(seeds: list[int]) -> None:
    for seed in seeds:
        run_history(seed, MUTANT_STEPS)
