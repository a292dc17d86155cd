"""How much of a shard's WAL may go: by size and by age, never anything the KV
has not applied (replay and snapshots start from the KV).

A leader trims without waiting for slow followers: one that falls behind the
trimmed log is sent a snapshot instead, so a stalled follower cannot make the
leader's disk fill up. Pure: the WAL is read through `timestamp_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cairn.storage.core.replication.terms import NO_OFFSET


@dataclass(frozen=True, slots=True)
class WalRetention:
    # Trim once the WAL is larger than this (None: no size limit).
    max_bytes: int | None = None
    # Trim entries older than this, judged by their timestamps (None: no age limit).
    max_age_ms: int | None = None


def trim_target(
    retention: WalRetention,
    *,
    applied_offset: int,
    first_offset: int,
    last_offset: int,
    size_bytes: int,
    now_ms: int,
    timestamp_at: Callable[[int], int],
) -> int | None:
    """The offset before which entries may be deleted now, or None for nothing.
    (The WAL itself only deletes whole segments below it.)"""
    if first_offset == NO_OFFSET or applied_offset < first_offset:
        return None
    ceiling = applied_offset + 1
    target = NO_OFFSET
    if retention.max_bytes is not None and size_bytes > retention.max_bytes:
        target = ceiling
    if retention.max_age_ms is not None and timestamp_at(first_offset) < now_ms - (
        retention.max_age_ms
    ):
        cutoff_ms = now_ms - retention.max_age_ms
        target = max(
            target,
            _first_at_or_after(
                cutoff_ms, first_offset, min(last_offset, applied_offset), timestamp_at
            ),
        )
    target = min(target, ceiling)
    return target if target > first_offset else None


def _first_at_or_after(
    cutoff_ms: int, first_offset: int, last_offset: int, timestamp_at: Callable[[int], int]
) -> int:
    """The first offset in first..last+1 whose entry is not older than `cutoff_ms`
    (timestamps never decrease along a log: binary search)."""
    low, high = first_offset, last_offset + 1
    while low < high:
        middle = (low + high) // 2
        if timestamp_at(middle) < cutoff_ms:
            low = middle + 1
        else:
            high = middle
    return low
