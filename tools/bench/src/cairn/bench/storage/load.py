"""Running a phase: its loads together in one timed window, in this process.

The pieces: request pools (`pools.py`), the window, schedule and tally
(`timing.py`, which also spells out what the figures mean), the pipelined put
driver (`write_stream.py`) and the one-request-per-call driver (`unary.py`),
which also sends etcd's calls (`etcd.py`: its pool and sender).
This module builds the pools, connects, starts the drivers, and takes this
process's CPU time at the edges of the measured window. `--procs` runs the same
thing in several processes (`procs.py`). A phase may also be given an observer of
every answered put and a companion run alongside in the same loop (notify's
subscribers, `notify.py`); those stay in this process.

No request is started after `end`; in-flight ones (and, in open loop, ones
scheduled before `end`) finish during the drain.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cairn.bench.storage.etcd import build_etcd_pool, etcd_sender
from cairn.bench.storage.pools import build_pool, interleave
from cairn.bench.storage.rpc import Channels, Router, ShardInfo, describe
from cairn.bench.storage.specs import LoadResult, LoadSpec, PhaseSpec
from cairn.bench.storage.timing import AnswerObserver, Schedule, Tally, Window, sleep_until
from cairn.bench.storage.unary import unary_sender, unary_worker
from cairn.bench.storage.write_stream import StreamSlots, write_stream

CHILD_SETUP_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0

WindowHook = Callable[[Literal["measure_start", "end"]], None]


class Companion(Protocol):
    """Work run next to a phase's loads, in the same loop: set up before the window
    (so it is in place when the first request goes out), told the window, and
    finished after the loads (so it can drain what they caused). Every step bounded."""

    async def start(self, timeout_s: float) -> None: ...

    def begin(self, window: Window) -> None: ...

    async def finish(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class PreparedLoad:
    spec: LoadSpec
    pool: dict[int, list[bytes]]
    result: LoadResult


def prepare_load(spec: LoadSpec, router: Router, pool_max_ops: int) -> PreparedLoad:
    if spec.batch < 1 or spec.concurrency < 1 or spec.keys < 1:
        raise ValueError("batch, concurrency and keys must be at least 1")
    build = build_etcd_pool if spec.api == "etcd" else build_pool
    pool = build(spec, router, pool_max_ops)
    result = LoadResult(spec=spec, pool_requests=sum(len(r) for r in pool.values()))
    return PreparedLoad(spec, pool, result)


def _start_load(
    load: PreparedLoad,
    channels: Channels,
    router: Router,
    phase: PhaseSpec,
    window: Window,
    observer: AnswerObserver | None,
) -> tuple[list[Awaitable[None]], Tally]:
    spec = load.spec
    tally = Tally(load.result, window)
    rng = random.Random(spec.seed ^ 0x5EED)
    tasks: list[Awaitable[None]] = []
    if spec.kind == "put" and spec.mode == "stream":
        streams = [
            (shard_id, requests)
            for shard_id, requests in load.pool.items()
            for _ in range(spec.streams_per_shard)
        ]
        per_stream = max(1, math.ceil(spec.concurrency / len(streams)))
        total_slots = asyncio.Semaphore(spec.concurrency)
        by_shard = {s.shard_id: s for s in router.shards}
        for number, (shard_id, requests) in enumerate(streams):
            schedule = None
            if spec.rate_ops_per_s is not None:
                interval_s = spec.batch * len(streams) / spec.rate_ops_per_s
                first_s = window.start_s + interval_s * number / len(streams)
                schedule = Schedule(first_s, interval_s)
            tasks.append(
                write_stream(
                    channels.get(by_shard[shard_id].leader),
                    shard_id,
                    requests,
                    rng.randrange(len(requests)),
                    spec,
                    window,
                    schedule,
                    StreamSlots(asyncio.Semaphore(per_stream), total_slots),
                    tally,
                    observer,
                )
            )
        return tasks, tally
    sender = etcd_sender if spec.api == "etcd" else unary_sender
    send = sender(channels, router, spec, phase.rpc_timeout_s)
    mixed = interleave(load.pool)
    cursor = [rng.randrange(len(mixed))]
    shared_schedule = None
    if spec.rate_ops_per_s is not None:
        shared_schedule = Schedule(window.start_s, spec.batch / spec.rate_ops_per_s)
    for _ in range(spec.concurrency):
        tasks.append(unary_worker(send, mixed, cursor, window, shared_schedule, tally, observer))
    return tasks, tally


async def run_phase(
    phase: PhaseSpec,
    shards: Sequence[ShardInfo],
    wait_to_start: Callable[[], Awaitable[None]] | None = None,
    on_window: WindowHook | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    observer: AnswerObserver | None = None,
    companion: Companion | None = None,
) -> tuple[list[LoadResult], float, float]:
    """Run the loads of a phase in this process: (results, client CPU s in window, build s).

    `wait_to_start` runs after the pools are built and channels are connected (a
    barrier across load processes); `on_window` is called at measure start and end.
    `observer` is told of every answered put; `companion` is started once the
    channels are up, and finished after the loads (see Companion).
    """
    router = Router(shards)
    build_start_s = time.monotonic()
    prepared = [prepare_load(spec, router, phase.pool_max_ops) for spec in phase.loads]
    build_s = time.monotonic() - build_start_s
    channels = Channels(phase.channels)
    try:
        for shard in router.shards:
            channels.get(shard.leader)
        await channels.ready(connect_timeout_s)
        if companion is not None:
            await companion.start(connect_timeout_s)
        if wait_to_start is not None:
            await wait_to_start()
        start_s = time.monotonic()
        window = Window(
            start_s=start_s,
            measure_start_s=start_s + phase.warmup_s,
            end_s=start_s + phase.warmup_s + phase.duration_s,
            drain_deadline_s=start_s + phase.warmup_s + phase.duration_s + phase.drain_s,
        )
        if companion is not None:
            companion.begin(window)
        cpu_marks: dict[str, float] = {}

        async def mark_window() -> None:
            await sleep_until(window.measure_start_s)
            cpu_marks["start"] = time.process_time()
            if on_window is not None:
                on_window("measure_start")
            await sleep_until(window.end_s)
            cpu_marks["end"] = time.process_time()
            if on_window is not None:
                on_window("end")

        tallies = []
        coroutines: list[Awaitable[None]] = [mark_window()]
        for load in prepared:
            tasks, tally = _start_load(load, channels, router, phase, window, observer)
            coroutines.extend(tasks)
            tallies.append(tally)
        await asyncio.gather(*coroutines)
        if companion is not None:
            await companion.finish()
        for tally in tallies:
            tally.finish()
        client_cpu_s = cpu_marks["end"] - cpu_marks["start"]
    finally:
        if companion is not None:
            await companion.close()
        await channels.close()
    return [load.result for load in prepared], client_cpu_s, build_s


def run_phase_in_child(
    phase: PhaseSpec, shards: Sequence[ShardInfo], barrier: Any, results: Any
) -> None:
    """Entry point of a `--procs` load process: run the phase, put a dict on `results`.

    `barrier` (a multiprocessing.Barrier shared with the parent) is passed once the
    pools are built and connected, so every process starts its window together.
    """

    async def wait_for_barrier() -> None:
        await asyncio.to_thread(barrier.wait, CHILD_SETUP_TIMEOUT_S)

    try:
        loads, client_cpu_s, build_s = asyncio.run(
            run_phase(phase, shards, wait_to_start=wait_for_barrier)
        )
    except BaseException as error:
        barrier.abort()
        results.put({"error": describe(error)})
        return
    results.put(
        {
            "loads": [load.to_dict() for load in loads],
            "client_cpu_s": client_cpu_s,
            "build_s": build_s,
        }
    )
