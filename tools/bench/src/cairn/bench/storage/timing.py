"""The measured window, the open-loop schedule, and the per-load tally.

Timing (all on the monotonic clock):

    start ──warmup──> measure_start ──duration──> end ──drain (bounded)──> done

A request belongs to the figures when its start time is in [measure_start, end).
Closed loop (no rate): start = when it was sent. Open loop (`rate_ops_per_s`):
start = its SCHEDULED time on a fixed-rate schedule, so a request that had to
wait for a free slot, or for a late timer, carries that wait in its latency
(no coordinated omission); requests still unsent when the drain ends are
counted as `unsent`. Open loop also records, per request, how late it was sent
(`send_lag`: the client's own timer and slot waits; asyncio timers have ~1 ms
granularity) and its latency from the actual send (`from_send`), so queueing,
client lateness and service time can be told apart.

Throughput is counted ops over (last counted completion or `end`) - measure_start.
One latency sample per answered request (a 100-put request is one sample);
requests whose RPC failed count their ops as failed and give no sample, and
`requests` counts answered requests only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cairn.bench.storage.rpc import describe
from cairn.bench.storage.specs import LoadResult

# Told of every answered put request: (request, response, start_s, sent_s or None
# in closed loop, answered_s), the raw bytes as sent and received. For loads that
# need more than counts (notify matches answers to notifications by offset). It
# runs in the response reader, so it must be cheap and must not raise.
AnswerObserver = Callable[[bytes, bytes, float, float | None, float], None]


@dataclass(frozen=True, slots=True)
class Window:
    start_s: float
    measure_start_s: float
    end_s: float
    drain_deadline_s: float


class Schedule:
    """Fixed-rate start times: the i-th request starts at first_s + i * interval_s."""

    __slots__ = ("_next_index", "first_s", "interval_s")

    def __init__(self, first_s: float, interval_s: float) -> None:
        self.first_s = first_s
        self.interval_s = interval_s
        self._next_index = 0

    def take(self) -> float:
        at_s = self.first_s + self._next_index * self.interval_s
        self._next_index += 1
        return at_s

    def count_before(self, end_s: float) -> int:
        """Requests scheduled at or after the next one and before `end_s`."""
        total = math.ceil((end_s - self.first_s) / self.interval_s)
        return max(0, total - self._next_index)


class Tally:
    """Accumulates one load's figures for requests started inside the window."""

    def __init__(self, result: LoadResult, window: Window) -> None:
        self.result = result
        self.window = window
        self.last_completion_s = window.end_s

    def done(
        self, start_s: float, sent_s: float | None, now_s: float, ok: int, failed: int
    ) -> None:
        """An answered request; `sent_s` is given in open loop (start_s is then scheduled)."""
        if start_s < self.window.measure_start_s:
            return
        result = self.result
        result.requests += 1
        result.ops_ok += ok
        result.ops_failed += failed
        result.latency.record_s(now_s - start_s)
        if sent_s is not None:
            result.send_lag.record_s(sent_s - start_s)
            result.from_send.record_s(now_s - sent_s)
        if now_s > self.last_completion_s:
            self.last_completion_s = now_s

    def failed(self, start_s: float, now_s: float, error: BaseException) -> None:
        """A request whose RPC failed: all its ops count as failed; no latency sample."""
        if start_s < self.window.measure_start_s:
            return
        result = self.result
        result.rpc_errors += 1
        result.ops_failed += result.spec.batch
        if result.first_error is None:
            result.first_error = describe(error)
        if now_s > self.last_completion_s:
            self.last_completion_s = now_s

    def unsent(self, count: int) -> None:
        self.result.unsent_requests += count

    def finish(self) -> None:
        self.result.elapsed_s = self.last_completion_s - self.window.measure_start_s


async def sleep_until(at_s: float) -> None:
    delay_s = at_s - time.monotonic()
    if delay_s > 0:
        await asyncio.sleep(delay_s)
