"""Tallies of a run, per interval and for the measured window, and how they print.
Pure: times come in as monotonic seconds.

Every finished operation lands in exactly one interval (the one it finished in)
and in exactly one of "warmup" or "measured" (by the time it started, or was
scheduled to start), so the interval counts add up to warmup + measured. An
operation that fails is counted by error type and gives no latency sample; a get
of a key with no record is an answer (counted apart), not an error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cairn.common.histogram import Histogram

PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))


@dataclass(slots=True)
class Tally:
    """Operations that finished, with their latencies."""

    puts: int = 0
    gets: int = 0
    gets_not_found: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latency: Histogram = field(default_factory=Histogram)

    @property
    def ops(self) -> int:
        """Answered operations (errors excluded)."""
        return self.puts + self.gets

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def answered(self, is_get: bool, latency_s: float, found: bool = True) -> None:
        if is_get:
            self.gets += 1
            if not found:
                self.gets_not_found += 1
        else:
            self.puts += 1
        # record_ns directly (not record_s): one call less per operation.
        self.latency.record_ns(int(latency_s * 1e9))

    def failed(self, error_type: str) -> None:
        self.errors[error_type] += 1

    def latency_ms(self) -> dict[str, float]:
        figures = {name: self.latency.percentile_ms(p) for name, p in PERCENTILES}
        figures["max"] = self.latency.max_ns / 1e6
        figures["mean"] = self.latency.mean_ns / 1e6
        return figures

    def merge(self, other: Tally) -> None:
        self.puts += other.puts
        self.gets += other.gets
        self.gets_not_found += other.gets_not_found
        self.errors.update(other.errors)
        self.latency.merge(other.latency)


@dataclass(frozen=True, slots=True)
class Window:
    """The run's phases on the monotonic clock: warmup from `start_s`, measured
    from `measure_start_s` to `end_s`, then at most until `drain_deadline_s` for
    what is still running."""

    start_s: float
    measure_start_s: float
    end_s: float
    drain_deadline_s: float

    @classmethod
    def starting_at(
        cls, start_s: float, warmup_s: float, duration_s: float, drain_timeout_s: float
    ) -> Window:
        measure_start_s = start_s + warmup_s
        end_s = measure_start_s + duration_s
        return cls(start_s, measure_start_s, end_s, end_s + drain_timeout_s)

    def measured(self, started_s: float) -> bool:
        return self.measure_start_s <= started_s < self.end_s

    def phase(self, at_s: float) -> str:
        if at_s < self.measure_start_s:
            return "warmup"
        if at_s < self.end_s:
            return "measure"
        return "drain"


class Recorder:
    """Where callers report finished operations. Each goes into the current
    interval, in its warmup or measured part (by start time); taking the interval
    folds those parts into the warmup and measured totals. One histogram sample
    per operation: this runs in the process being measured."""

    __slots__ = (
        "_interval_measured",
        "_interval_warmup",
        "_measure_start_s",
        "last_measured_s",
        "measured",
        "warmup",
    )

    def __init__(self, window: Window) -> None:
        self._measure_start_s = window.measure_start_s
        self._interval_warmup = Tally()
        self._interval_measured = Tally()
        # Complete up to the last `take_interval`.
        self.warmup = Tally()
        self.measured = Tally()
        # When the last operation started in the measured window finished.
        self.last_measured_s = window.measure_start_s

    def answered(self, is_get: bool, started_s: float, now_s: float, found: bool = True) -> None:
        # Nothing starts at or after the window's end, so "not warmup" is "measured".
        if started_s < self._measure_start_s:
            self._interval_warmup.answered(is_get, now_s - started_s, found)
            return
        self._interval_measured.answered(is_get, now_s - started_s, found)
        if now_s > self.last_measured_s:
            self.last_measured_s = now_s

    def failed(self, error_type: str, started_s: float, now_s: float) -> None:
        if started_s < self._measure_start_s:
            self._interval_warmup.failed(error_type)
            return
        self._interval_measured.failed(error_type)
        if now_s > self.last_measured_s:
            self.last_measured_s = now_s

    @property
    def interval_is_empty(self) -> bool:
        parts = (self._interval_warmup, self._interval_measured)
        return not any(part.ops or part.errors for part in parts)

    def take_interval(self) -> Tally:
        """The interval's tally so far (a new one starts); its operations now count
        in the warmup and measured totals."""
        line = Tally()
        for part, total in (
            (self._interval_warmup, self.warmup),
            (self._interval_measured, self.measured),
        ):
            line.merge(part)
            total.merge(part)
        self._interval_warmup, self._interval_measured = Tally(), Tally()
        return line


@dataclass(frozen=True, slots=True)
class IntervalLine:
    """One interval's figures; `at_s` is the interval's end, since the run began."""

    at_s: float
    elapsed_s: float
    phase: str
    ops: int
    errors: int
    latency_ms: dict[str, float]

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @classmethod
    def of(cls, tally: Tally, at_s: float, elapsed_s: float, phase: str) -> IntervalLine:
        return cls(at_s, elapsed_s, phase, tally.ops, tally.error_count, tally.latency_ms())

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at_s, 3),
            "phase": self.phase,
            "ops": self.ops,
            "ops_per_s": round(self.ops_per_s, 1),
            "errors": self.errors,
            "latency_ms": _rounded(self.latency_ms),
        }


def interval_header() -> str:
    return (
        f"{'time_s':>8} {'phase':>7} {'ops':>9} {'ops/s':>9} {'errors':>7}"
        f" {'p50':>8} {'p95':>8} {'p99':>8} {'p999':>8} {'max':>8}  (latency ms)"
    )


def format_interval(line: IntervalLine) -> str:
    ms = line.latency_ms
    return (
        f"{line.at_s:8.1f} {line.phase:>7} {line.ops:9d} {line.ops_per_s:9.0f} {line.errors:7d}"
        f" {ms['p50']:8.2f} {ms['p95']:8.2f} {ms['p99']:8.2f} {ms['p999']:8.2f} {ms['max']:8.2f}"
    )


@dataclass(frozen=True, slots=True)
class Summary:
    """The measured window's figures. `ops` are answered operations started in the
    window; `warmup_ops` those started before it; `unfinished` the operations still
    running (or, open loop, scheduled but never started) when the drain ended."""

    target: str
    mode: str
    elapsed_s: float
    ops: int
    puts: int
    gets: int
    gets_not_found: int
    errors: dict[str, int]
    latency_ms: dict[str, float]
    warmup_ops: int
    warmup_errors: int
    unfinished: int
    settings: dict[str, Any]
    intervals: tuple[IntervalLine, ...] = ()
    # This process's CPU time over the measured window (None: not measured).
    client_cpu_s: float | None = None
    # The CPU time of each server process named (--server-pid), by pid, over the
    # same window (None: it could not be read).
    server_cpu_s: dict[int, float | None] = field(default_factory=dict)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def client_cpu_us_per_op(self) -> float | None:
        return self.per_op_us(self.client_cpu_s)

    def per_op_us(self, cpu_s: float | None) -> float | None:
        if cpu_s is None or not self.ops:
            return None
        return cpu_s / self.ops * 1e6

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "settings": self.settings,
            "elapsed_s": round(self.elapsed_s, 3),
            "ops": self.ops,
            "ops_per_s": round(self.ops_per_s, 1),
            "puts": self.puts,
            "gets": self.gets,
            "gets_not_found": self.gets_not_found,
            "errors": dict(sorted(self.errors.items())),
            "error_count": self.error_count,
            "latency_ms": _rounded(self.latency_ms),
            "warmup_ops": self.warmup_ops,
            "warmup_errors": self.warmup_errors,
            "unfinished": self.unfinished,
            "client_cpu_s": _rounded_or_none(self.client_cpu_s, 3),
            "client_cpu_us_per_op": _rounded_or_none(self.client_cpu_us_per_op, 2),
            "servers": [
                {
                    "pid": pid,
                    "cpu_s": _rounded_or_none(cpu_s, 3),
                    "cpu_us_per_op": _rounded_or_none(self.per_op_us(cpu_s), 2),
                }
                for pid, cpu_s in self.server_cpu_s.items()
            ],
            "intervals": [line.to_dict() for line in self.intervals],
        }


def summarize(
    tally: Tally,
    *,
    target: str,
    mode: str,
    elapsed_s: float,
    warmup: Tally,
    unfinished: int,
    settings: dict[str, Any],
    intervals: tuple[IntervalLine, ...] = (),
    client_cpu_s: float | None = None,
    server_cpu_s: dict[int, float | None] | None = None,
) -> Summary:
    return Summary(
        target=target,
        mode=mode,
        elapsed_s=elapsed_s,
        ops=tally.ops,
        puts=tally.puts,
        gets=tally.gets,
        gets_not_found=tally.gets_not_found,
        errors=dict(tally.errors),
        latency_ms=tally.latency_ms(),
        warmup_ops=warmup.ops,
        warmup_errors=warmup.error_count,
        unfinished=unfinished,
        settings=settings,
        intervals=intervals,
        client_cpu_s=client_cpu_s,
        server_cpu_s=server_cpu_s or {},
    )


def format_summary(summary: Summary) -> str:
    ms = summary.latency_ms
    lines = [
        f"summary: {summary.target} ({summary.mode})",
        f"  ops:      {summary.ops} in {summary.elapsed_s:.2f} s = {summary.ops_per_s:,.0f} ops/s"
        f" ({summary.puts} puts, {summary.gets} gets"
        + (f", {summary.gets_not_found} not found" if summary.gets_not_found else "")
        + ")",
        "  latency:  "
        + "  ".join(f"{name} {ms[name]:.2f}" for name, _ in PERCENTILES)
        + f"  max {ms['max']:.2f}  mean {ms['mean']:.2f} ms",
        f"  errors:   {summary.error_count}"
        + (
            " (" + ", ".join(f"{name} {n}" for name, n in sorted(summary.errors.items())) + ")"
            if summary.errors
            else ""
        ),
    ]
    if summary.client_cpu_s is not None:
        lines.append(f"  client:   {_cpu_used(summary, summary.client_cpu_s)}")
    for pid, cpu_s in summary.server_cpu_s.items():
        used = (
            "CPU not readable (the process was gone)"
            if cpu_s is None
            else _cpu_used(summary, cpu_s)
        )
        lines.append(f"  server {pid}: {used}")
    if summary.unfinished:
        lines.append(f"  unfinished at the end of the drain: {summary.unfinished}")
    lines.append(f"  warmup:   {summary.warmup_ops} ops, {summary.warmup_errors} errors")
    return "\n".join(lines)


def _cpu_used(summary: Summary, cpu_s: float) -> str:
    per_op = summary.per_op_us(cpu_s)
    return f"{cpu_s:.2f} CPU s in the window" + (
        f" = {per_op:.1f} us per op" if per_op is not None else ""
    )


def _rounded_or_none(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 3) for name, value in figures.items()}
