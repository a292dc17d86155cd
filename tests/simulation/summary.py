"""What the simulated runs of a test session did, summed: printed at the end of
the session (conftest.py), so that a reader sees which paths the seeds took
(writes folded, reads answered from the read cache, entries applied from the
leader's changes, faults injected) and how often."""

from __future__ import annotations

from collections import Counter

from simulation.world import World

TOTALS: Counter[str] = Counter()
RUNS: Counter[str] = Counter()
# The runs of the shipped shard code on simulated pods (real_cluster.py).
POD_TOTALS: Counter[str] = Counter()
# The runs of the shipped controller and pods together (managed_cluster.py).
MANAGED_TOTALS: Counter[str] = Counter()


def add(world: World) -> None:
    """Count a finished run of the real code (not a mutant's)."""
    RUNS["runs"] += 1
    TOTALS.update(world.env.counts)


def add_pods(counters: dict[str, int]) -> None:
    """Count a finished run of simulated pods (real_cluster.py)."""
    RUNS["pod runs"] += 1
    POD_TOTALS.update(counters)


def add_managed(counters: dict[str, int]) -> None:
    """Count a finished run of the shipped controller and pods (managed_cluster.py)."""
    RUNS["managed runs"] += 1
    MANAGED_TOTALS.update(counters)


def lines() -> list[str]:
    found = []
    if RUNS["runs"]:
        found += [f"{RUNS['runs']} simulated runs of the real code:", *_table(TOTALS)]
    if RUNS["pod runs"]:
        found += [
            f"{RUNS['pod runs']} runs of the shipped shard code on simulated pods:",
            *_table(POD_TOTALS),
        ]
    if RUNS["managed runs"]:
        found += [
            f"{RUNS['managed runs']} runs of the shipped controller and storage pods:",
            *_table(MANAGED_TOTALS),
        ]
    return found


def _table(totals: Counter[str]) -> list[str]:
    width = len(f"{max(totals.values(), default=0):,}")
    return [f"  {count:>{width},}  {what}" for what, count in sorted(totals.items())]
