"""Targeted fault profiles: each reproduces the class of history one of issue
38's holes needs, with random variation, so that reverting the hole's fix (its
mutant, mutants.py) is caught within a CI-sized seed budget. The broad profiles
(world.PROFILES) reach these histories too rarely: their other faults (learners
stopped part-way, partitions, controller pauses) interrupt them first.

Each must also pass with the real code (test_simulation.py runs them like the
broad profiles).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulation.world import SimConfig, World


@dataclass(frozen=True)
class Targeted:
    config: SimConfig
    world: type[World] = World


TARGETED: dict[str, Targeted] = {
    # Hole 2: a learner still catching up elected. The replication factor
    # cycles through even sizes often (3 -> 2 -> 4 -> 3: a learner added each
    # time it grows), operators ask for leader moves often (the moves and
    # handovers the hole let target a learner), learners stop part-way, writes
    # keep the learners behind, and short lags keep a follower behind too.
    "even-learners": Targeted(
        SimConfig(
            ensemble_change_probability=0.15,
            random_election_probability=0.05,
            learner_stop_probability=0.02,
            client_write_probability=0.8,
            long_lag_probability=0.005,
            long_lag_steps=(40, 150),
        )
    ),
}


def run_targeted(seed: int, targeted: Targeted, config: SimConfig) -> World:
    """run_seed with the profile's world (`config`: its config, changed)."""
    world = targeted.world(seed, config)
    world.run()
    return world
