"""Deterministic simulation of one shard with 3 and 5 replicas (see __init__.py).

Every case runs one seed: faulty steps with the checkers after each, then a quiet
phase and the liveness check. A failure prints the seed, the step, the state of
every replica and the trace's tail; conftest.py has the options for long runs.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulation.mutants import MUTANTS
from simulation.world import PROFILES, SimConfig, SimulationFailure, run_seed


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("replicas", [3, 5], ids=["3replicas", "5replicas"])
def test_shard_keeps_its_invariants(
    replicas: int, profile: str, sim_seed: int, sim_steps: int
) -> None:
    config = dataclasses.replace(PROFILES[profile], replicas=replicas, steps=sim_steps)
    try:
        world = run_seed(sim_seed, config)
    except SimulationFailure as failure:
        pytest.fail(f"[{profile}] {failure}", pytrace=False)
    # The run did something: writes were acknowledged and leaders came and went.
    assert world.observer.acked
    assert world.coordinator.elections_started > 1


# Mutant -> (seeds it must be caught within, ensemble size, fault profile), each
# run for MUTANT_STEPS steps; each is caught well within its bound today.
CAUGHT_WITHIN: dict[str, tuple[int, int, str]] = {
    "elect the lowest head": (3, 3, "churn"),
    "ensemble changes without waiting": (20, 3, "churn"),  # seed 14 today
    "acknowledge unsynced entries": (8, 3, "churn"),
    "act on stale Truncates": (8, 5, "churn"),
    # Caught at seed 3 today: a write acknowledged by a resumed old leader on
    # the strength of a new leader's offsets is missing after the next election.
    "acknowledge old streams after a new term": (10, 3, "reading"),
    # A new leader's followers lag past the window: its term never commits.
    "send window anchored at the applied offset": (4, 3, "lagging"),
    # An old leader cut off with a reader answers from a stale state.
    "reads without the lease": (12, 3, "reading"),
    # A wiped member re-created empty is elected and lacks a write acknowledged
    # before.
    "count wiped members' votes": (12, 3, "wipes"),
}
MUTANT_STEPS = 2000


@pytest.mark.parametrize("mutant", sorted(CAUGHT_WITHIN))
def test_checkers_catch_a_broken_variant(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds, replicas, profile = CAUGHT_WITHIN[mutant]
    broken = MUTANTS[mutant]
    for target, name, value in broken.patches:
        monkeypatch.setattr(target, name, value)
    config = dataclasses.replace(
        PROFILES[profile],
        replicas=replicas,
        steps=MUTANT_STEPS,
        rules=broken.config.rules,
        leader_core_class=broken.config.leader_core_class,
    )
    for seed in range(seeds):
        try:
            run_seed(seed, config)
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
