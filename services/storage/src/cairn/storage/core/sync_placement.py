"""Where a shard's WAL fsync runs: on the event loop or in the shard's sync thread.

Handing an fsync to a thread and back costs two thread wake-ups; on a busy
machine each can take longer than the fsync itself on a device with a write
cache (here an fdatasync takes 30-80 us, while a request waited 300-450 us from
being logged to being durable through the thread, and 150-180 us inline). But
an fsync on the loop stops everything else the process serves while it runs, so
that is only worth it while the device syncs fast. This keeps a moving average
of measured sync times: below the threshold (Limits.inline_fsync_below_s),
syncs run inline; a sync ten times slower than that (a device stall, a busy
disk) lifts the average above it at once, and syncs go back to the thread until
fast ones bring it down again.
"""

from __future__ import annotations

# Weight of the newest measurement in the moving average.
SMOOTHING = 0.1


class SyncPlacement:
    """A moving average of sync durations and the choice it implies. Starts in the
    thread: nothing is known about the device yet."""

    __slots__ = ("_average_s", "_inline_below_s", "_smoothing")

    def __init__(self, inline_below_s: float, smoothing: float = SMOOTHING) -> None:
        if inline_below_s < 0 or not 0 < smoothing <= 1:
            raise ValueError("inline_below_s must be >= 0 and smoothing in (0, 1]")
        self._inline_below_s = inline_below_s
        self._smoothing = smoothing
        self._average_s = 2 * inline_below_s if inline_below_s > 0 else 1.0

    @property
    def inline(self) -> bool:
        return self._average_s < self._inline_below_s

    @property
    def average_s(self) -> float:
        return self._average_s

    def observe(self, duration_s: float) -> None:
        self._average_s += self._smoothing * (duration_s - self._average_s)
