"""Running a phase against a target: in this process, or in `--procs` load
processes started together and merged; with the server's CPU time taken at the
edges of the measured window when its pid is known (summed over every pod of a
cluster, see Target.other_server_pids)."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from cairn.bench.storage.load import (
    CHILD_SETUP_TIMEOUT_S,
    Companion,
    WindowHook,
    run_phase,
    run_phase_in_child,
)
from cairn.bench.storage.rpc import ShardInfo
from cairn.bench.storage.server import cpu_seconds, main_thread_wait_s, thread_cpu_seconds
from cairn.bench.storage.specs import LoadResult, PhaseResult, PhaseSpec
from cairn.bench.storage.timing import AnswerObserver

# A CPU reading taken at the edges of the measured window.
_Mark = TypeVar("_Mark")

# Beyond its own phase time, how long the parent waits for a load process's result.
RESULT_MARGIN_S = 60.0
JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Target:
    address: str
    shards: list[ShardInfo]
    server_pid: int | None
    spawned: bool
    # A cluster's other pods (followers): their CPU counts as the server's too.
    other_server_pids: tuple[int, ...] = ()

    @property
    def server_pids(self) -> tuple[int, ...]:
        return () if self.server_pid is None else (self.server_pid, *self.other_server_pids)


def _split(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def _child_phase(phase: PhaseSpec, procs: int, index: int) -> PhaseSpec:
    loads = tuple(
        replace(
            spec,
            concurrency=_split(spec.concurrency, procs, index),
            rate_ops_per_s=None if spec.rate_ops_per_s is None else spec.rate_ops_per_s / procs,
            seed=spec.seed + 7919 * index,
        )
        for spec in phase.loads
    )
    return replace(phase, loads=loads)


async def execute_phase(
    phase: PhaseSpec,
    target: Target,
    procs: int,
    observer: AnswerObserver | None = None,
    companion: Companion | None = None,
) -> PhaseResult:
    """The phase in this process or `procs` load processes; an observer or companion
    (see run_phase) lives in this process, so it needs `procs == 1`."""
    if procs != 1 and (observer is not None or companion is not None):
        raise ValueError("an observer or companion runs in this process: procs must be 1")
    server_marks: dict[str, list[float | None]] = {}
    thread_marks: dict[str, list[dict[str, float] | None]] = {}
    wait_marks: dict[str, list[float | None]] = {}

    def on_window(event: str) -> None:
        if target.server_pids:
            server_marks[event] = [cpu_seconds(pid) for pid in target.server_pids]
            thread_marks[event] = [thread_cpu_seconds(pid) for pid in target.server_pids]
            wait_marks[event] = [main_thread_wait_s(pid) for pid in target.server_pids]

    if procs == 1:
        results, client_cpu_s, build_s = await run_phase(
            phase, target.shards, on_window=on_window, observer=observer, companion=companion
        )
    else:
        results, client_cpu_s, build_s = await run_phase_procs(
            phase, target.shards, procs, on_window
        )
    pod_cpu_s = _pod_seconds(server_marks.get("measure_start"), server_marks.get("end"))
    server_cpu_s = None if pod_cpu_s is None else sum(pod_cpu_s)
    return PhaseResult(
        results,
        phase.duration_s,
        client_cpu_s,
        server_cpu_s,
        build_s,
        pod_cpu_s=pod_cpu_s,
        pod_thread_cpu_s=_pod_thread_cpu_s(
            thread_marks.get("measure_start"), thread_marks.get("end")
        ),
        pod_main_wait_s=_pod_seconds(wait_marks.get("measure_start"), wait_marks.get("end")),
    )


def _marks_per_pod(
    start: list[_Mark | None] | None, end: list[_Mark | None] | None
) -> list[tuple[_Mark, _Mark]] | None:
    """(at the window's start, at its end) of each server process; None unless all
    were read."""
    if start is None or end is None:
        return None
    pairs = []
    for before, after in zip(start, end, strict=True):
        if before is None or after is None:
            return None
        pairs.append((before, after))
    return pairs


def _pod_seconds(
    start: list[float | None] | None, end: list[float | None] | None
) -> tuple[float, ...] | None:
    """What a per-process counter of seconds (CPU time, run-queue wait) grew by in
    the window, for each server process; None unless all were read."""
    pairs = _marks_per_pod(start, end)
    return None if pairs is None else tuple(after - before for before, after in pairs)


def _pod_thread_cpu_s(
    start: list[dict[str, float] | None] | None, end: list[dict[str, float] | None] | None
) -> tuple[dict[str, float], ...] | None:
    """CPU seconds of each server process's thread groups in the window; None unless
    all were read. `other` is what the process total has beyond its live threads,
    read a moment apart, so its difference can come out a hair below zero; CPU
    time never goes back, so no group's does."""
    pairs = _marks_per_pod(start, end)
    if pairs is None:
        return None
    return tuple(
        {group: max(0.0, after[group] - before[group]) for group in after}
        for before, after in pairs
    )


async def run_phase_procs(
    phase: PhaseSpec,
    shards: list[ShardInfo],
    procs: int,
    on_window: WindowHook,
) -> tuple[list[LoadResult], float, float]:
    """Load processes (spawned, not forked), started together by a barrier; results merged.

    The parent only keeps time (for the server CPU marks) and merges. Every wait is
    bounded, and on any failure the barrier is aborted and a sentinel queued so no
    helper thread stays blocked, then the children are terminated.
    """
    for spec in phase.loads:
        if spec.concurrency < procs:
            raise RuntimeError(f"--concurrency {spec.concurrency} is below --procs {procs}")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(procs + 1)
    results_queue = context.Queue()
    children = [
        context.Process(
            target=run_phase_in_child,
            args=(_child_phase(phase, procs, i), shards, barrier, results_queue),
            daemon=True,
        )
        for i in range(procs)
    ]
    for child in children:
        child.start()
    phase_s = phase.warmup_s + phase.duration_s + phase.drain_s
    outputs: list[dict[str, Any]] = []
    finished = False
    try:
        try:
            await asyncio.to_thread(barrier.wait, CHILD_SETUP_TIMEOUT_S)
        except threading.BrokenBarrierError:
            pass  # a child failed during setup: its error is on the queue
        else:
            started_s = time.monotonic()
            await asyncio.sleep(max(0.0, started_s + phase.warmup_s - time.monotonic()))
            on_window("measure_start")
            end_s = started_s + phase.warmup_s + phase.duration_s
            await asyncio.sleep(max(0.0, end_s - time.monotonic()))
            on_window("end")
        for _ in children:
            try:
                output = await asyncio.to_thread(results_queue.get, True, phase_s + RESULT_MARGIN_S)
            except queue.Empty:
                raise RuntimeError("a load process sent no result in time") from None
            outputs.append(output)
            if "error" in output:
                break
        finished = True
    finally:
        if not finished:
            barrier.abort()
            results_queue.put({"error": "cancelled"})  # frees a blocked get
        for child in children:
            if finished:
                await asyncio.to_thread(child.join, JOIN_TIMEOUT_S)
            if child.is_alive():
                child.terminate()
                await asyncio.to_thread(child.join, JOIN_TIMEOUT_S)
    merged = [LoadResult(spec=spec) for spec in phase.loads]
    client_cpu_s = 0.0
    build_s = 0.0
    for output in outputs:
        if "error" in output:
            raise RuntimeError(f"load process failed: {output['error']}")
        for total, data in zip(merged, output["loads"], strict=True):
            total.merge(LoadResult.from_dict(total.spec, data))
        client_cpu_s += output["client_cpu_s"]
        build_s = max(build_s, output["build_s"])
    return merged, client_cpu_s, build_s
