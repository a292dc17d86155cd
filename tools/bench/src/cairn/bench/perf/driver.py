"""A `cairn perf` run: callers against a target through warmup, the measured
window and a bounded drain, with a report line per interval.

    start ──warmup──> measure_start ──duration──> end ──drain (bounded)──> done

No operation starts at or after `end`. Flat out, each caller loops: start an
operation, wait for it, record it. Open loop, callers take slots from one shared
fixed-rate schedule (stats.py explains how a late slot is counted). Whatever is
still running at the drain deadline is cancelled and counted as unfinished, as
are open-loop slots before `end` that no caller took by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from cairn.bench.perf.options import PerfOptions
from cairn.bench.perf.stats import (
    IntervalLine,
    Recorder,
    Summary,
    Window,
    summarize,
)
from cairn.bench.perf.targets import Target, error_type, open_target
from cairn.bench.perf.workload import (
    KeySpace,
    Kind,
    RateSchedule,
    Workload,
    caller_random,
    formatted_keys,
)
from cairn.bench.storage.server import cpu_seconds

# The first operation starts this long after the callers are created, so that
# they all begin together and the first interval is not short.
START_DELAY_S = 0.05

# Sleeps again after a timer that fired early; each retry sleeps the remainder, so
# two or three suffice (the bound only keeps a broken clock from spinning).
MAX_EARLY_WAKEUPS = 10

LineSink = Callable[[IntervalLine], None]


def interval_ends(window: Window, interval_s: float) -> Iterator[float]:
    """Report times: every `interval_s` from the start, with the measured window's
    edges as extra boundaries so that no interval mixes warmup, measured or drain
    operations (by start time, for all but the drain's lines)."""
    at_s = window.start_s
    for edge_s in (window.measure_start_s, window.end_s):
        while at_s + interval_s < edge_s - 1e-9:
            at_s += interval_s
            yield at_s
        if edge_s > at_s:
            at_s = edge_s
            yield at_s
    while True:
        at_s += interval_s
        yield at_s


def mode_of(options: PerfOptions) -> str:
    if options.is_http:
        transport = f"http gateway, {options.http_connections or options.concurrency} connections"
    elif options.batching:
        inflight = (
            f", {options.max_inflight_batches} in flight per shard"
            if options.max_inflight_batches is not None
            else ""
        )
        transport = (
            f"grpc, batching on (linger {options.linger_ms:g} ms, "
            f"max {options.max_batch_ops} ops{inflight})"
        )
    else:
        transport = "grpc, batching off"
    loop = f"open loop at {options.rate_ops_s:g} ops/s" if options.open_loop else "flat out"
    return (
        f"{transport}; {options.concurrency} callers, {loop}; "
        f"{options.read_ratio:.0%} gets, {options.value_size_bytes} B values, "
        f"{options.keys} keys"
    )


def value_of(options: PerfOptions) -> bytes:
    """The value every put writes: random bytes (not zeros, which a compressing
    transport or store would shrink), the same in every run of a seed."""
    return random.Random(options.seed).randbytes(options.value_size_bytes)


@dataclasses.dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU seconds of this process and of each server named (None: not readable,
    the process gone or no /proc)."""

    client_s: float
    servers_s: tuple[float | None, ...]

    def since(self, start: CpuUse) -> CpuUse:
        return CpuUse(
            self.client_s - start.client_s,
            tuple(
                None if end_s is None or start_s is None else end_s - start_s
                for start_s, end_s in zip(start.servers_s, self.servers_s, strict=True)
            ),
        )


class _Run:
    """The state the callers share."""

    def __init__(self, options: PerfOptions, target: Target, window: Window) -> None:
        self.options = options
        self.target = target
        self.window = window
        self.recorder = Recorder(window)
        self.schedule = (
            RateSchedule(window.start_s, options.rate_ops_s) if options.open_loop else None
        )
        self.keys = KeySpace(options.key_prefix, options.keys)
        self.formatted_keys = formatted_keys(self.keys)
        self.value = value_of(options)
        self.in_flight = 0

    async def caller(self, number: int) -> None:
        workload = Workload(
            self.keys,
            self.options.read_ratio,
            caller_random(self.options.seed, number),
            self.formatted_keys,
        )
        if self.schedule is None:
            await self._closed_loop(workload)
        else:
            await self._open_loop(workload, self.schedule)

    async def _closed_loop(self, workload: Workload) -> None:
        start_s, end_s = self.window.start_s, self.window.end_s
        await _sleep_until(start_s)
        # Operations count from the window's start even if the timer woke a little
        # before it (see _sleep_until): with no warmup, nothing is warmup. That holds
        # for every operation, not just the first: a fast one can end before it too.
        while (started_s := max(time.monotonic(), start_s)) < end_s:
            await self._one(workload, started_s)

    async def _open_loop(self, workload: Workload, schedule: RateSchedule) -> None:
        end_s = self.window.end_s
        while True:
            scheduled_s = schedule.peek()
            if scheduled_s >= end_s:
                return
            schedule.take()
            await _sleep_until(scheduled_s)
            await self._one(workload, scheduled_s)

    async def _one(self, workload: Workload, started_s: float) -> None:
        """One operation; its latency runs from `started_s`."""
        kind, key = workload.next()
        is_get = kind is Kind.GET
        self.in_flight += 1
        try:
            if is_get:
                found = await self.target.get(key)
            else:
                await self.target.put(key, self.value)
                found = True
        except Exception as error:  # every failure is counted, none ends the run
            self.in_flight -= 1
            self.recorder.failed(error_type(error), started_s, time.monotonic())
            # A failure that never suspended (a refused connection) must still let
            # the reporter and the other callers run.
            await asyncio.sleep(0)
            return
        self.in_flight -= 1
        self.recorder.answered(is_get, started_s, time.monotonic(), found)

    async def mark_cpu(self) -> CpuUse:
        """CPU seconds used over the measured window, by this process and by the
        servers named: with the operation count, the client's own cost per
        operation (a client using a whole core is the limit, not the server) and
        each server's."""
        pids = self.options.server_pids
        await _sleep_until(self.window.measure_start_s)
        start = CpuUse(time.process_time(), tuple(cpu_seconds(pid) for pid in pids))
        await _sleep_until(self.window.end_s)
        end = CpuUse(time.process_time(), tuple(cpu_seconds(pid) for pid in pids))
        return end.since(start)

    async def report(self, sink: LineSink, lines: list[IntervalLine]) -> None:
        """A line per interval until cancelled (then one for what is left, if anything)."""
        window = self.window
        last_s = window.start_s
        try:
            for at_s in interval_ends(window, self.options.interval_s):
                await _sleep_until(at_s)
                last_s = self._emit(sink, lines, last_s, at_s)
        finally:
            if not self.recorder.interval_is_empty:
                self._emit(sink, lines, last_s, max(time.monotonic(), last_s))

    def _emit(self, sink: LineSink, lines: list[IntervalLine], from_s: float, at_s: float) -> float:
        """Report the interval from `from_s` to now (the timer may wake a little
        after `at_s`; the line's rate uses the real length)."""
        now_s = max(time.monotonic(), at_s)
        tally = self.recorder.take_interval()
        line = IntervalLine.of(
            tally, now_s - self.window.start_s, now_s - from_s, self.window.phase(from_s)
        )
        lines.append(line)
        sink(line)
        return now_s


async def _sleep_until(at_s: float) -> None:
    # The loop's timers may fire a little early by this clock: sleep again then, so
    # that nothing meant for after `at_s` (a slot, an interval's end) runs before it.
    # uvloop's timers count whole milliseconds, and a remainder under one is a zero
    # delay, so there the retries can all come back early: this may return up to a
    # millisecond before `at_s` (callers that classify by time take that into account).
    for _ in range(MAX_EARLY_WAKEUPS):
        delay_s = at_s - time.monotonic()
        if delay_s <= 0:
            return
        await asyncio.sleep(delay_s)


async def preload(options: PerfOptions, target: Target) -> tuple[int, dict[str, int]]:
    """Write every key once, `options.concurrency` at a time: (written, errors by type)."""
    keys = KeySpace(options.key_prefix, options.keys).keys()
    value = value_of(options)
    written = 0
    errors: dict[str, int] = {}

    async def writer() -> None:
        nonlocal written
        for key in keys:  # one shared iterator: each key is taken once
            try:
                await target.put(key, value)
            except Exception as error:  # counted, like the run's own failures
                name = error_type(error)
                errors[name] = errors.get(name, 0) + 1
                await asyncio.sleep(0)
            else:
                written += 1

    await asyncio.gather(*(writer() for _ in range(min(options.concurrency, options.keys))))
    return written, errors


def settings_of(options: PerfOptions) -> dict[str, Any]:
    settings = dataclasses.asdict(options)
    settings.pop("json")
    return settings


async def run(
    options: PerfOptions,
    sink: LineSink,
    note: Callable[[str], None],
    target: Target | None = None,
) -> Summary:
    """Run the load and return the measured window's summary. `sink` gets each
    interval's line as it ends; `note` gets progress remarks. `target` is opened
    from the options unless given (and closed at the end either way)."""
    if target is None:
        target = await open_target(options)
    try:
        if options.preload:
            note(f"preloading {options.keys} keys")
            written, errors = await preload(options, target)
            note(f"preloaded {written} keys" + (f", errors: {errors}" if errors else ""))
        window = Window.starting_at(
            time.monotonic() + START_DELAY_S,
            options.warmup_s,
            options.duration_s,
            options.drain_timeout_s,
        )
        state = _Run(options, target, window)
        lines: list[IntervalLine] = []
        callers = [asyncio.create_task(state.caller(n)) for n in range(options.concurrency)]
        reporter = asyncio.create_task(state.report(sink, lines))
        cpu_marks = asyncio.create_task(state.mark_cpu())
        _, still_running = await asyncio.wait(
            callers, timeout=max(0.0, window.drain_deadline_s - time.monotonic())
        )
        for task in still_running:
            task.cancel()
        for task in callers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        unfinished = state.in_flight
        if state.schedule is not None:
            unfinished += state.schedule.count_before(window.end_s)
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        # Ends at the window's end at the latest (callers may finish a little before).
        used = await cpu_marks
        recorder = state.recorder
        # Throughput over the measured window, stretched to the last answer of an
        # operation started in it (open loop, a backlog may finish well after the end).
        elapsed_s = max(window.end_s, recorder.last_measured_s) - window.measure_start_s
        return summarize(
            recorder.measured,
            target=options.target,
            mode=mode_of(options),
            elapsed_s=elapsed_s,
            warmup=recorder.warmup,
            unfinished=unfinished,
            client_cpu_s=used.client_s,
            server_cpu_s=dict(zip(options.server_pids, used.servers_s, strict=True)),
            settings=settings_of(options),
            intervals=tuple(lines),
        )
    finally:
        await target.close()
