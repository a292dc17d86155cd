"""The process's clocks, in milliseconds: the one place that reads them, so that
the pure cores take time as an argument and tests can pass their own."""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
