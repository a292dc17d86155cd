"""`cairn-bench`: drive a Cairn storage server over gRPC and print figures.

    cairn-bench --spawn put                      # a throwaway standalone server
    cairn-bench --address 127.0.0.1:6648 get --batch 1 --concurrency 32
    cairn-bench --data-dir /var/lib/cairn fsync  # the disk's own ceiling
    cairn-bench --spawn all --duration-s 5       # the table the team quotes

Workloads: `put` (WriteStream pipelined, or unary Write with --mode unary),
`get` (Read calls on keys preloaded first), `fsync` (the disk alone: one
100 B record per fdatasync, and 100 records per fdatasync), `all` (fsync, put
batched and single-op, get batched and single-op, then put+get together in
open loop at half of the measured batched peaks, and a summary table).

Figures: ops/s counts operations (puts or gets) answered OK, req/s answered
requests; latency is per request (a 100-put request is one sample) in ms, from
its start, or in open loop (`--rate`) from its SCHEDULED start, so queueing is
not hidden (send_lag and from_send split that up). Warmup is excluded. errors
counts failed operations: a non-OK status, a failed or unanswered RPC, or (open
loop) a request never sent. CPU per op is CPU time in the measured window over
the ops in it: the client's is this program's own (all threads, all --procs),
the server's is read from /proc for a spawned server or --server-pid. The exit
code is 1 when any operation failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cairn.storage.bench.fsync_probe import FsyncResult, FsyncSpec, run_fsync_probe
from cairn.storage.bench.load import (
    CHILD_SETUP_TIMEOUT_S,
    LoadResult,
    LoadSpec,
    PhaseResult,
    PhaseSpec,
    ShardInfo,
    fetch_shards,
    preload,
    run_phase,
    run_phase_in_child,
)
from cairn.storage.bench.server import ServerStartError, cpu_seconds, spawned_server

WORKLOADS = ("put", "get", "fsync", "all")
MAX_DURATION_S = 3600.0
MAX_CONCURRENCY = 4096
MAX_BATCH = 100_000
MAX_VALUE_SIZE_BYTES = 16 * 1024 * 1024
MAX_KEYS = 100_000_000
MAX_PRELOAD_KEYS = 10_000_000
MAX_PROCS = 32
HARD_TIMEOUT_MARGIN_S = 120.0
PRELOAD_RATE_FLOOR_OPS_PER_S = 5_000  # for the preload's time bound
FSYNC_GROUP_RECORDS = 100


class UsageError(Exception):
    """A bad combination of options."""


def _positive(kind: type[int] | type[float], upper: float) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if not 0 < value <= upper:
            raise argparse.ArgumentTypeError(f"must be in (0, {upper:g}], got {text}")
        return value

    return parse


def _non_negative_s(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_DURATION_S:g}], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn-bench",
        description=__doc__.split("\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(__doc__ or "").split("\n", 2)[2],
    )
    parser.add_argument("workload", choices=WORKLOADS)
    target = parser.add_argument_group("server")
    where = target.add_mutually_exclusive_group()
    where.add_argument("--address", help="HOST:PORT of a running server")
    where.add_argument(
        "--spawn", action="store_true", help="start a standalone server for the run, then stop it"
    )
    target.add_argument("--shards", type=_positive(int, 1024), default=1, help="with --spawn")
    target.add_argument(
        "--data-dir",
        type=Path,
        help="server data dir for --spawn (kept; default a temp dir, removed), "
        "or where the fsync probe writes",
    )
    target.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the spawned server (repeatable; use --server-arg=--flag)",
    )
    target.add_argument(
        "--server-pid", type=int, help="pid of the --address server, to report its CPU per op"
    )
    target.add_argument("--spawn-timeout-s", type=_positive(float, 600), default=60.0)
    target.add_argument("--stop-timeout-s", type=_positive(float, 600), default=10.0)
    target.add_argument("--fsync-dir", type=Path, help="where the fsync probe writes")

    timing = parser.add_argument_group("timing (all bounded)")
    timing.add_argument("--duration-s", type=_positive(float, MAX_DURATION_S), default=10.0)
    timing.add_argument("--warmup-s", type=_non_negative_s, default=2.0, help="excluded")
    timing.add_argument(
        "--drain-s", type=_non_negative_s, default=10.0, help="bound on finishing in-flight work"
    )
    timing.add_argument("--rpc-timeout-s", type=_positive(float, 600), default=30.0)
    timing.add_argument(
        "--timeout-s",
        type=_positive(float, 24 * 3600),
        help="hard bound on the whole run (default: derived from the phases)",
    )

    load = parser.add_argument_group("load")
    load.add_argument(
        "--concurrency",
        type=_positive(int, MAX_CONCURRENCY),
        default=16,
        help="requests in flight in total (spread over the streams in stream mode)",
    )
    load.add_argument(
        "--batch", type=_positive(int, MAX_BATCH), default=100, help="ops per request"
    )
    load.add_argument("--value-size", type=_positive(int, MAX_VALUE_SIZE_BYTES), default=100)
    load.add_argument("--keys", type=_positive(int, MAX_KEYS), default=100_000, help="key space")
    load.add_argument(
        "--preload",
        type=_positive(int, MAX_PRELOAD_KEYS),
        help="keys written before a get workload (default --keys)",
    )
    load.add_argument(
        "--rate",
        type=_positive(float, 1e9),
        help="target ops/s, open loop (latency from the scheduled start); default flat out",
    )
    load.add_argument(
        "--mode",
        choices=("stream", "unary"),
        default="stream",
        help="put: pipelined WriteStream or unary Write (get always uses Read)",
    )
    load.add_argument("--streams-per-shard", type=_positive(int, 64), default=1)
    load.add_argument("--channels", type=_positive(int, 64), default=1, help="per server")
    load.add_argument(
        "--procs", type=_positive(int, MAX_PROCS), default=1, help="load processes (aggregated)"
    )
    load.add_argument(
        "--pool-max-ops",
        type=_positive(int, 10_000_000),
        default=1_000_000,
        help="bound on pre-serialized ops per load (memory)",
    )
    load.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print one JSON result line")
    return parser


# ---------------------------------------------------------------------------
# Result rows


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    ops_per_s: float
    requests_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    max_ms: float | None
    errors: int
    client_cpu_us_per_op: float | None = None
    server_cpu_us_per_op: float | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    ops_unit: str = "ops"  # fsync rows count records
    requests_unit: str = "req"  # fsync rows count syncs

    def to_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "ops_per_s": round(self.ops_per_s, 1),
            "requests_per_s": round(self.requests_per_s, 1),
            "p50_ms": _round(self.p50_ms),
            "p99_ms": _round(self.p99_ms),
            "p999_ms": _round(self.p999_ms),
            "max_ms": _round(self.max_ms),
            "errors": self.errors,
            "client_cpu_us_per_op": _round(self.client_cpu_us_per_op),
            "server_cpu_us_per_op": _round(self.server_cpu_us_per_op),
        }
        data.update(dict(self.extra))
        return data


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}" if value else "0"


def _load_row(name: str, result: LoadResult, phase: PhaseResult) -> Row:
    latency = result.latency
    has = latency.count > 0
    extra: list[tuple[str, Any]] = [
        ("requests", result.requests),
        ("ops", result.ops_ok),
        ("rpc_errors", result.rpc_errors),
        ("client_cores", round(phase.client_cpu_s / phase.window_s, 3)),
        ("pool_build_s", round(phase.build_s, 2)),
    ]
    if phase.server_cpu_s is not None:
        extra.append(("server_cores", round(phase.server_cpu_s / phase.window_s, 3)))
    if result.spec.rate_ops_per_s is not None:
        lag, from_send = result.send_lag, result.from_send
        extra += [
            ("target_ops_per_s", round(result.spec.rate_ops_per_s, 1)),
            ("send_lag_p50_ms", round(lag.percentile_ms(50), 4)),
            ("send_lag_p99_ms", round(lag.percentile_ms(99), 4)),
            ("from_send_p50_ms", round(from_send.percentile_ms(50), 4)),
            ("from_send_p99_ms", round(from_send.percentile_ms(99), 4)),
            ("unsent_requests", result.unsent_requests),
        ]
    if result.first_error:
        extra.append(("first_error", result.first_error))
    return Row(
        name=name,
        ops_per_s=result.ops_per_s,
        requests_per_s=result.requests_per_s,
        p50_ms=latency.percentile_ms(50) if has else None,
        p99_ms=latency.percentile_ms(99) if has else None,
        p999_ms=latency.percentile_ms(99.9) if has else None,
        max_ms=latency.percentile_ms(100) if has else None,
        errors=result.errors,
        client_cpu_us_per_op=phase.client_cpu_us_per_op() if result.ops_ok else None,
        server_cpu_us_per_op=phase.server_cpu_us_per_op(),
        extra=tuple(extra),
    )


def _fsync_row(name: str, result: FsyncResult) -> Row:
    latency = result.latency
    has = latency.count > 0
    return Row(
        name=name,
        ops_per_s=result.records_per_s,
        requests_per_s=result.syncs_per_s,
        p50_ms=latency.percentile_ms(50) if has else None,
        p99_ms=latency.percentile_ms(99) if has else None,
        p999_ms=latency.percentile_ms(99.9) if has else None,
        max_ms=latency.percentile_ms(100) if has else None,
        errors=0,
        ops_unit="records",
        requests_unit="syncs",
        extra=(
            ("records_per_sync", result.spec.records_per_sync),
            ("record_size_bytes", result.spec.record_size_bytes),
            ("syncs", result.syncs),
            ("directory", str(result.spec.directory)),
        ),
    )


def format_row_line(row: Row) -> str:
    """One `key=value` line per figure set; easy to read and to parse."""
    parts = [
        f"{row.ops_unit}/s={row.ops_per_s:.0f}",
        f"{row.requests_unit}/s={row.requests_per_s:.1f}",
        f"p50_ms={_fmt(row.p50_ms)}",
        f"p99_ms={_fmt(row.p99_ms)}",
        f"p999_ms={_fmt(row.p999_ms)}",
        f"max_ms={_fmt(row.max_ms)}",
        f"errors={row.errors}",
    ]
    if row.client_cpu_us_per_op is not None:
        parts.append(f"client_cpu_us/op={_fmt(row.client_cpu_us_per_op)}")
    if row.server_cpu_us_per_op is not None:
        parts.append(f"server_cpu_us/op={_fmt(row.server_cpu_us_per_op)}")
    for key, value in row.extra:
        if key in ("client_cores", "server_cores", "target_ops_per_s", "unsent_requests"):
            parts.append(f"{key}={value}")
        elif key.startswith(("send_lag", "from_send")):
            parts.append(f"{key}={_fmt(value)}")
    line = f"{row.name}: " + " ".join(parts)
    error = dict(row.extra).get("first_error")
    if error:
        line += f"\n  first error: {error}"
    return line


_TABLE_COLUMNS = (
    ("workload", 34),
    ("ops/s", 10),
    ("req/s", 9),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("p999 ms", 8),
    ("max ms", 8),
    ("errors", 8),
    ("cli us/op", 10),
    ("srv us/op", 10),
)


def format_table(rows: Sequence[Row]) -> str:
    head = "".join(
        name.ljust(width) if i == 0 else name.rjust(width)
        for i, (name, width) in enumerate(_TABLE_COLUMNS)
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = [
            row.name,
            f"{row.ops_per_s:.0f}",
            f"{row.requests_per_s:.0f}",
            _fmt(row.p50_ms),
            _fmt(row.p99_ms),
            _fmt(row.p999_ms),
            _fmt(row.max_ms),
            str(row.errors),
            _fmt(row.client_cpu_us_per_op),
            _fmt(row.server_cpu_us_per_op),
        ]
        lines.append(
            "".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, (_, width)) in enumerate(zip(cells, _TABLE_COLUMNS, strict=True))
            )
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Running phases


@dataclass(frozen=True, slots=True)
class Target:
    address: str
    shards: list[ShardInfo]
    server_pid: int | None
    spawned: bool


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


async def execute_phase(phase: PhaseSpec, target: Target, procs: int) -> PhaseResult:
    server_marks: dict[str, float | None] = {}

    def on_window(event: str) -> None:
        if target.server_pid is not None:
            server_marks[event] = cpu_seconds(target.server_pid)

    if procs == 1:
        results, client_cpu_s, build_s = await run_phase(phase, target.shards, on_window=on_window)
    else:
        results, client_cpu_s, build_s = await _run_phase_procs(
            phase, target.shards, procs, on_window
        )
    start, end = server_marks.get("measure_start"), server_marks.get("end")
    server_cpu_s = None if start is None or end is None else end - start
    return PhaseResult(results, phase.duration_s, client_cpu_s, server_cpu_s, build_s)


async def _run_phase_procs(
    phase: PhaseSpec,
    shards: list[ShardInfo],
    procs: int,
    on_window: Any,
) -> tuple[list[LoadResult], float, float]:
    """Load processes (spawned, not forked), started together by a barrier; results merged.

    The parent only keeps time (for the server CPU marks) and merges. Every wait is
    bounded, and on any failure the barrier is aborted and a sentinel queued so no
    helper thread stays blocked, then the children are terminated.
    """
    for spec in phase.loads:
        if spec.concurrency < procs:
            raise UsageError(f"--concurrency {spec.concurrency} is below --procs {procs}")
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
                output = await asyncio.to_thread(results_queue.get, True, phase_s + 60.0)
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
                await asyncio.to_thread(child.join, 5.0)
            if child.is_alive():
                child.terminate()
                await asyncio.to_thread(child.join, 5.0)
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


def _load_spec(args: argparse.Namespace, **changes: Any) -> LoadSpec:
    spec = LoadSpec(
        kind="put",
        mode=args.mode,
        batch=args.batch,
        value_size_bytes=args.value_size,
        keys=args.keys,
        concurrency=args.concurrency,
        rate_ops_per_s=args.rate,
        streams_per_shard=args.streams_per_shard,
        seed=args.seed,
    )
    return replace(spec, **changes)


def _phase(args: argparse.Namespace, *loads: LoadSpec) -> PhaseSpec:
    return PhaseSpec(
        loads=loads,
        duration_s=args.duration_s,
        warmup_s=args.warmup_s,
        drain_s=args.drain_s,
        rpc_timeout_s=args.rpc_timeout_s,
        pool_max_ops=args.pool_max_ops,
        channels=args.channels,
    )


def _header(workload: str, args: argparse.Namespace, target: Target | None) -> str:
    fields = [f"# cairn-bench {workload}:"]
    if workload != "fsync":
        fields += [
            f"mode={args.mode}",
            f"batch={args.batch}",
            f"value={args.value_size}B",
            f"keys={args.keys}",
            f"concurrency={args.concurrency}",
            f"streams_per_shard={args.streams_per_shard}",
            f"channels={args.channels}",
            f"rate={'max' if args.rate is None else f'{args.rate:g}'}",
            f"procs={args.procs}",
        ]
        if workload in ("get", "all"):
            fields.append(f"preload={_preload_keys(args)}")
    fields += [f"duration={args.duration_s:g}s", f"warmup={args.warmup_s:g}s"]
    if target is not None:
        spawned = " (spawned)" if target.spawned else ""
        fields += [f"shards={len(target.shards)}", f"server={target.address}{spawned}"]
    fields.append(f"cpus={os.cpu_count()}")
    return " ".join(fields)


def _preload_keys(args: argparse.Namespace) -> int:
    return int(args.preload if args.preload is not None else min(args.keys, MAX_PRELOAD_KEYS))


async def _do_preload(args: argparse.Namespace, target: Target) -> None:
    keys = _preload_keys(args)
    timeout_s = 60.0 + keys / PRELOAD_RATE_FLOOR_OPS_PER_S
    seconds = await preload(target.shards, keys, args.value_size, timeout_s, args.seed)
    print(f"# preloaded {keys} keys in {seconds:.1f} s", flush=True)


async def _fsync_rows(args: argparse.Namespace, directory: Path) -> list[Row]:
    rows = []
    for records in (1, FSYNC_GROUP_RECORDS):
        spec = FsyncSpec(directory, args.duration_s, args.warmup_s, args.value_size, records)
        result = await asyncio.to_thread(run_fsync_probe, spec)
        name = f"fsync {records} x {args.value_size}B/sync"
        rows.append(_fsync_row(name, result))
        print(format_row_line(rows[-1]), flush=True)
    return rows


async def _run_load_phase(
    args: argparse.Namespace, target: Target, phase: PhaseSpec, names: Sequence[str]
) -> list[Row]:
    result = await execute_phase(phase, target, args.procs)
    rows = [_load_row(n, r, result) for n, r in zip(names, result.loads, strict=True)]
    for row in rows:
        print(format_row_line(row), flush=True)
    return rows


async def run_workload(args: argparse.Namespace, target: Target, fsync_dir: Path) -> list[Row]:
    workload = args.workload
    if workload == "put":
        spec = _load_spec(args)
        return await _run_load_phase(args, target, _phase(args, spec), [spec.label()])
    if workload == "get":
        await _do_preload(args, target)
        spec = _load_spec(args, kind="get", keys=_preload_keys(args))
        return await _run_load_phase(args, target, _phase(args, spec), [spec.label()])
    assert workload == "all", workload
    rows = await _fsync_rows(args, fsync_dir)
    put_batched = _load_spec(args, mode="stream", rate_ops_per_s=None)
    put_single = replace(put_batched, batch=1)
    peak = await _run_load_phase(args, target, _phase(args, put_batched), [put_batched.label()])
    rows += peak
    rows += await _run_load_phase(args, target, _phase(args, put_single), [put_single.label()])
    await _do_preload(args, target)
    get_batched = replace(put_batched, kind="get", keys=_preload_keys(args))
    get_single = replace(get_batched, batch=1)
    get_rows = await _run_load_phase(args, target, _phase(args, get_batched), [get_batched.label()])
    rows += get_rows
    rows += await _run_load_phase(args, target, _phase(args, get_single), [get_single.label()])
    half_put = peak[0].ops_per_s / 2
    half_get = get_rows[0].ops_per_s / 2
    if half_put <= 0 or half_get <= 0:
        print("# skipping put+get: a peak rate was zero", flush=True)
        return rows
    mixed_put = replace(put_batched, rate_ops_per_s=half_put)
    mixed_get = replace(get_batched, rate_ops_per_s=half_get)
    rows += await _run_load_phase(
        args,
        target,
        _phase(args, mixed_put, mixed_get),
        [f"mix {mixed_put.label()}", f"mix {mixed_get.label()}"],
    )
    return rows


def _phase_count(workload: str) -> int:
    return {"put": 1, "get": 1, "fsync": 0, "all": 5}[workload]


def _hard_timeout_s(args: argparse.Namespace) -> float:
    if args.timeout_s is not None:
        return float(args.timeout_s)
    per_phase_s = float(args.warmup_s + args.duration_s + args.drain_s) + 30.0  # + pool build
    fsync_s = 2 * (args.warmup_s + args.duration_s) if args.workload in ("fsync", "all") else 0.0
    preload_s = 60.0 + _preload_keys(args) / PRELOAD_RATE_FLOOR_OPS_PER_S
    preload_s = preload_s if args.workload in ("get", "all") else 0.0
    phases = _phase_count(args.workload)
    spawn_s = float(args.spawn_timeout_s + args.stop_timeout_s)
    return phases * per_phase_s + fsync_s + preload_s + spawn_s + HARD_TIMEOUT_MARGIN_S


def _validate(args: argparse.Namespace) -> None:
    needs_server = args.workload != "fsync"
    if needs_server and not args.spawn and not args.address:
        raise UsageError(f"workload {args.workload!r} needs --address HOST:PORT or --spawn")
    if args.workload in ("get", "all") and _preload_keys(args) < 1:
        raise UsageError("get needs at least one preloaded key")
    if args.procs > args.concurrency:
        raise UsageError("--procs must not exceed --concurrency")
    if args.workload == "all" and (args.rate is not None or args.mode != "stream"):
        raise UsageError("all picks its own rates and modes: drop --rate and --mode")


async def amain(args: argparse.Namespace) -> list[Row]:
    async with AsyncExitStack() as stack:
        hard_timeout_s = _hard_timeout_s(args)
        await stack.enter_async_context(asyncio.timeout(hard_timeout_s))
        target: Target | None = None
        fsync_dir: Path
        if args.workload == "fsync":
            fsync_dir = args.fsync_dir or args.data_dir or Path(tempfile.gettempdir())
            fsync_dir.mkdir(parents=True, exist_ok=True)
            print(_header("fsync", args, None) + f" dir={fsync_dir}", flush=True)
            return await _fsync_rows(args, fsync_dir)
        if args.spawn:
            server = await stack.enter_async_context(
                spawned_server(
                    shards=args.shards,
                    data_dir=args.data_dir,
                    extra_args=["--log-level", "WARNING", *args.server_arg],
                    start_timeout_s=args.spawn_timeout_s,
                    stop_timeout_s=args.stop_timeout_s,
                )
            )
            address, server_pid = server.address, server.pid
            default_fsync_dir = server.work_dir if args.data_dir is None else server.data_dir.parent
        else:
            address, server_pid = args.address, args.server_pid
            default_fsync_dir = args.data_dir or Path(tempfile.gettempdir())
        fsync_dir = args.fsync_dir or default_fsync_dir
        shards = await fetch_shards(address, args.rpc_timeout_s)
        target = Target(address, shards, server_pid, args.spawn)
        print(_header(args.workload, args, target), flush=True)
        if args.workload == "all":
            print(f"# fsync probe dir={fsync_dir}", flush=True)
        return await run_workload(args, target, fsync_dir)
    raise AssertionError("unreachable")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _validate(args)
    except UsageError as error:
        parser.error(str(error))
    started_s = time.monotonic()
    try:
        rows = asyncio.run(amain(args))
    except TimeoutError:
        print(f"cairn-bench: hard timeout of {_hard_timeout_s(args):.0f} s hit", file=sys.stderr)
        return 3
    except (ServerStartError, UsageError, RuntimeError, OSError) as error:
        print(f"cairn-bench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if args.workload == "all":
        print()
        print(format_table(rows))
    if args.json:
        document = {
            "tool": "cairn-bench",
            "workload": args.workload,
            "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "wall_s": round(time.monotonic() - started_s, 2),
            "results": [row.to_dict() for row in rows],
        }
        print(json.dumps(document, sort_keys=True))
    failed = sum(row.errors for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
