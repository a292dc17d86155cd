"""What the simulated runs of a test session did, summed: printed at the end of
the session (conftest.py), so that a reader sees which paths the seeds took
(writes folded, reads answered from the read cache, entries applied from the
leader's changes, snapshots installed, faults injected) and how often."""

from __future__ import annotations

from collections import Counter

RUNS: Counter[str] = Counter()
# The runs of the shipped shard code on pods elected by a script (real_cluster.py).
POD_TOTALS: Counter[str] = Counter()
# The runs of the shipped controller and pods together (managed_cluster.py).
MANAGED_TOTALS: Counter[str] = Counter()


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
    if RUNS["pod runs"]:
        found += [
            f"{RUNS['pod runs']} runs of the shipped shard code on pods elected by a script:",
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
