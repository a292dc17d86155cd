"""The shipped shard code (shard.py, the replication sender and servicer) on
three or five simulated pods (real_cluster.py): power losses, correlated ones
included, network cuts, isolated pods and elections; every acknowledged write
is in every later leader's state, every read finds what was acknowledged
before it began, and once healed the cluster takes writes again.

Seeds and steps are the simulation's options (conftest.py): a campaign is
`--sim-seeds N --sim-steps 5000`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cairn.storage.core.shard_core import ShardCore
from cairn.storage.replication.leader import ReplicatingLeader
from cairn.storage.shard import ShardReplica
from simulation import summary
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


def _count_unsynced_as_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    """shard.py: a replica counts what it appended as durable before its fsync
    covers it (as leader, and in its acknowledgements as follower)."""
    unsynced = property(lambda replica: replica.core.log.last_offset)
    monkeypatch.setattr(ShardReplica, "durable_offset", unsynced)


def _reads_without_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """replication/leader.py: a leader takes its lease as always held, and
    answers reads cut off from the rest."""
    monkeypatch.setattr(ReplicatingLeader, "lease_holds", lambda leader: True)


def _serve_before_older_leases_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """ShardCore: a new leader takes over as soon as its first entry is
    applied, while an older leader's lease may still let it answer reads."""
    takeover_wait_ms = ShardCore.takeover_wait_ms

    def at_once(core: ShardCore[object], now_ms: int, serves_from_ms: int) -> int | None:
        return takeover_wait_ms(core, now_ms, now_ms)

    monkeypatch.setattr(ShardCore, "takeover_wait_ms", at_once)


# Each mutant of the shipped code, the seed that first catches it (run first)
# and how many seeds it is given; MUTANT_STEPS steps each.
MUTANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], int, int]] = {
    "count unsynced entries as durable": (_count_unsynced_as_durable, 3, 30),
    "reads without the lease": (_reads_without_the_lease, 3, 30),
    "a new leader serves before older leases end": (_serve_before_older_leases_end, 0, 30),
}
MUTANT_STEPS = 5000


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_checks_catch_a_broken_rule_of_the_shipped_code(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaks, first, seeds = MUTANTS[mutant]
    breaks(monkeypatch)
    with pytest.raises(Violation):
        _first_violation([first, *(seed for seed in range(seeds) if seed != first)])


def _first_violation(seeds: list[int]) -> None:
    for seed in seeds:
        run_history(seed, MUTANT_STEPS)
