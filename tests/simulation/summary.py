"""What the simulated runs of a test session did, summed: printed at the end of
the session (conftest.py), so that a reader sees which paths the seeds took
(writes folded, reads answered from the read cache, entries applied from the
leader's changes, faults injected) and how often."""

from __future__ import annotations

from collections import Counter

from simulation.world import World

TOTALS: Counter[str] = Counter()
RUNS: Counter[str] = Counter()


def add(world: World) -> None:
    """Count a finished run of the real code (not a mutant's)."""
    RUNS["runs"] += 1
    TOTALS.update(world.env.counts)


def lines() -> list[str]:
    if not RUNS:
        return []
    width = len(f"{max(TOTALS.values(), default=0):,}")
    return [f"{RUNS['runs']} simulated runs of the real code:"] + [
        f"  {count:>{width},}  {what}" for what, count in sorted(TOTALS.items())
    ]
