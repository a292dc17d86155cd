"""The shipped shard code (shard.py, the replication sender and servicer) on
three simulated pods (real_cluster.py): power losses, correlated ones
included, network cuts and elections; every acknowledged write is in every
later leader's state, and once healed the cluster takes writes again.

Seeds and steps are the simulation's options (conftest.py): a campaign is
`--sim-seeds N --sim-steps 5000`.
"""

from __future__ import annotations

import pytest

from cairn.storage.shard import ShardReplica
from simulation import summary
from simulation.real_cluster import Cluster, Violation


def run_history(seed: int, steps: int) -> Cluster:
    cluster = Cluster(seed)
    try:
        cluster.run(steps)
        cluster.heal_and_settle()
        cluster.check_writes_go_through()
    finally:
        cluster.close()
    return cluster


def test_acknowledged_writes_survive_on_the_shipped_code(sim_seed: int, sim_steps: int) -> None:
    cluster = run_history(sim_seed, sim_steps)
    summary.add_pods(cluster.counters)
    assert cluster.counters.get("writes acknowledged", 0) > 0


# A mutant of the driver: a replica counts what it appended as durable before
# its fsync covers it (as leader, and in its acknowledgements as follower).
# The seed that first catches it, and how many seeds it is given.
UNSYNCED_CAUGHT_AT, UNSYNCED_SEEDS = 15, 30
MUTANT_STEPS = 5000


def test_the_check_catches_a_driver_that_counts_unsynced_entries_as_durable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        ShardReplica, "durable_offset", property(lambda replica: replica.core.log.last_offset)
    )
    seeds = [UNSYNCED_CAUGHT_AT, *(s for s in range(UNSYNCED_SEEDS) if s != UNSYNCED_CAUGHT_AT)]
    with pytest.raises(Violation, match=r"without \d+ acknowledged writes"):
        _first_violation(seeds)


def _first_violation(seeds: list[int]) -> None:
    for seed in seeds:
        run_history(seed, MUTANT_STEPS)
