"""`cairn-bench`: drive a Cairn storage server over gRPC and print figures.

    cairn-bench --spawn put                      # a throwaway standalone server
    cairn-bench --address 127.0.0.1:6648 get --batch 1 --concurrency 32
    cairn-bench --data-dir /var/lib/cairn fsync  # the disk's own ceiling
    cairn-bench ceiling --batch 1                # what bare grpc.aio carries here
    cairn-bench --spawn notify --subscribers 8   # notification fan-out
    cairn-bench --spawn ephemeral --sessions 4   # puts tied to sessions
    cairn-bench --spawn all --duration-s 5       # the table the team quotes
    cairn-bench --spawn unary                    # one operation per unary call
    cairn-bench --spawn unary --etcd /usr/bin/etcd  # ... and the same load against etcd
    cairn-bench replication --duration-s 10      # rf=1 vs rf=3 clusters of pods spawned here
    cairn-bench snapshot --snapshot-sizes 256M,1G  # snapshot transfer rate and memory

Workloads: `put` (WriteStream pipelined, or unary Write with --mode unary),
`get` (Read calls on keys preloaded first), `fsync` (the disk alone: one
100 B record per fdatasync, and 100 records per fdatasync), `ceiling` (the put
load against a null server: grpc.aio on uvloop answering every write unstored,
spawned for the run, announcing --shards shards; no real server needed),
`notify` (--subscribers GetNotifications streams per shard, opened before the
window, while the put load writes; notification rows count the notifications
every subscriber received (map entries, not batches), the share of those expected
that came (each subscriber gets each key change of each write started in the
window once; counted after a bounded drain, --drain-s, once the writer stops),
and the lag from a write's send to its notification's receipt, matched by log
offset; writer and subscribers share this process's asyncio loop), `ephemeral`
(the put load with every put tied to one of --sessions sessions per shard,
opened first, kept alive every 3 s, closed at the end: the close time is a
figure; these puts take the server's general put path, not its plain fast path),
`all` (fsync; for batch 100 and batch 1 a ceiling row, with as many shards as the
server, right before its put row; batch 1 once more from as many clients as
requests in flight (a stream and a connection each, label `streams=N`: one stream
carries a message at a time each way, so one pipelining client is capped below what
the server serves to many); get batched and single-op; in open loop at half of
the measured batched peaks, put alone, get alone, then put+get together at a quarter
of each peak (half the server's capacity between them); notify
and ephemeral at batch 100, flat out, for half the duration; a summary table, and each
put row's ops/s as a share of its ceiling: quote that share, which the noise of
a shared machine moves less than absolute figures; one line each for the
notification fan-out and the ephemeral puts as a share of plain puts).
`unary` (what clients sending one operation per call cost, like the oxia 0.2.1
Python client: with 1 and then 64 callers, each with one call in flight, put as
unary Write and get as Read, one operation each, 64 callers from max(4, --procs)
load processes; each row right after its ceiling, the same load against the null
server (which answers Read too); a summary table, and each row's ops/s and server
CPU per request beside its ceiling's). With `--etcd BINARY` (Debian: etcd-server),
a single-member etcd is spawned too (plaintext, no auth, loopback, a temp data
dir), preloaded with the same keys and values, and each row is followed by the
same load against it: rows `etcd put callers=N` (Put) and `etcd get callers=N`
(Range, linearizable), etcd's CPU read from /proc like the server's (bench/etcd.py);
then each Cairn row's ops/s as a share of etcd's, and both servers' CPU per request.
`replication` and `snapshot` spawn clusters of storage pods (`cairn-storage
node`) on this machine and play the controller (bench/cluster.py); they are
separate, longer runs, not part of `all`. `replication`: the put load (--mode
and --batch: by default batched on WriteStream; `--mode unary --batch 1` is one
operation per unary Write) against a one-pod cluster (rf=1) and then a three-pod
cluster (rf=3), --shards shards led by the first pod, each flat out with each of
--peak-concurrencies requests in flight (default 16,32,64: a closed loop's
throughput is its requests in flight over their latency, so the longer commit
path of rf=3 needs more of them to reach its peak; each phase's load comes from
min(--procs, its requests in flight) processes), and then at half its peak
(the best of those, with its requests in flight as the bound); rows `rf=1
... c=N`/`rf=3 ... c=N`, server CPU summed over the cluster's pods (pod_cores:
each pod's, leader first), requests_per_entry (the phase's write requests per
log entry of the leader: above 1 when it folds requests that arrive while entries
wait for their commit), and a summary line: rf=3's peak as a share of rf=1's
peak, and at each concurrency both ran, latencies at half peak. Every row with
a known server pid also has thread_cores: its cores by thread group, pods leader
first: main (the event loop), rocksdb (RocksDB's flushes and compactions), grpc
(gRPC core's I/O and timer threads), other (the WAL's sync thread, executors,
and threads that ended); and main_runq: the share of the window each pod's
event loop thread was runnable but waiting for a CPU (the kernel's run-queue
delay), which shows when pods, load and RocksDB contend for too few cores.
`snapshot`: per size (--snapshot-bytes, default 1G, or --snapshot-sizes
256M,1G), a one-pod cluster with a small WAL
retention is loaded with that much data (--value-size values, default 1024 B
here), then an empty pod is added as a follower, which the leader must bring up
by snapshot; printed: data bytes (keys + values), seconds from AddFollower to the
follower's commit offset reaching the leader's, MB/s (10^6 B), and the sender's
and receiver's RSS (MiB) before, peak during (VmRSS every 50 ms, and VmHWM after a
reset), and the increase; the follower's log line shows it was a snapshot.

Figures: ops/s counts operations (puts or gets) answered OK, req/s answered
requests; latency is per request (a 100-put request is one sample) in ms, from
its start, or in open loop (`--rate`) from its SCHEDULED start, so queueing is
not hidden (send_lag and from_send split that up). Warmup is excluded. errors
counts failed operations: a non-OK status, a failed or unanswered RPC, or (open
loop) a request never sent. CPU per op is CPU time in the measured window over
the ops in it: the client's is this program's own (all threads, all --procs),
the server's is read from /proc for a spawned server (real or null) or
--server-pid. The exit code is 1 when any operation failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from cairn.bench import DISTRIBUTION
from cairn.bench.storage import security
from cairn.bench.storage.cluster import Cluster, ClusterError, running_cluster
from cairn.bench.storage.etcd import etcd_shards, preload_etcd, spawned_etcd
from cairn.bench.storage.fsync_probe import FsyncSpec, run_fsync_probe
from cairn.bench.storage.load import CONNECT_TIMEOUT_S
from cairn.bench.storage.notify import MAX_SUBSCRIBERS, NotifyProbe
from cairn.bench.storage.preload import preload
from cairn.bench.storage.procs import Target, execute_phase
from cairn.bench.storage.report import (
    HALF_PREFIX,
    NOTIFY_PREFIX,
    Row,
    ceiling_label,
    ceiling_shares,
    concurrency_label,
    etcd_pairs,
    format_ceiling_shares,
    format_ephemeral_summary,
    format_etcd_shares,
    format_notify_summary,
    format_replication_summary,
    format_row_line,
    format_table,
    fsync_row,
    load_row,
    notify_row,
    replication_label,
    with_ceiling_shares,
    with_sessions,
)
from cairn.bench.storage.rpc import fetch_shards
from cairn.bench.storage.server import ServerStartError, spawned_null_server, spawned_server
from cairn.bench.storage.sessions import (
    KEEP_ALIVE_INTERVAL_S,
    MAX_SESSIONS_PER_SHARD,
    SESSION_TIMEOUT_MS,
    SessionHold,
)
from cairn.bench.storage.snapshot_transfer import (
    SnapshotSpec,
    format_snapshot_line,
    format_snapshot_table,
    measure_snapshot,
    parse_size,
    parse_sizes,
    size_label,
    snapshot_row,
)
from cairn.bench.storage.specs import LoadSpec, PhaseSpec
from cairn.common.version import add_version_option

# Streams per shard, and channels per server: each is a stream or a connection the
# load generator keeps open.
MAX_STREAMS = 64
WORKLOADS = (
    "put",
    "get",
    "fsync",
    "ceiling",
    "notify",
    "ephemeral",
    "all",
    "unary",
    "replication",
    "snapshot",
)
CLUSTER_WORKLOADS = ("replication", "snapshot")  # spawn their own pods
REPLICATION_FACTORS = (1, 3)
CATCH_UP_TIMEOUT_S = 60.0
DEFAULT_VALUE_SIZE_BYTES = 100
# `unary`: callers each with one request in flight, one operation per unary Write or
# Read (what the oxia 0.2.1 Python client sends); many callers come from several
# load processes, so that the load generator is not what saturates.
UNARY_CALLERS = (1, 64)
UNARY_LOAD_PROCS = 4
SNAPSHOT_VALUE_SIZE_BYTES = 1024
DEFAULT_SNAPSHOT_BYTES = 1024**3
MAX_SNAPSHOT_BYTES = 1024**4
DEFAULT_WAL_SEGMENT_BYTES = 4 * 1024 * 1024
DEFAULT_WAL_RETENTION_BYTES = 16 * 1024 * 1024
PROBLEM_LINES_SHOWN = 3
MAX_DURATION_S = 3600.0
MAX_CONCURRENCY = 4096
DEFAULT_CONCURRENCY = 16
DEFAULT_PEAK_CONCURRENCIES = (16, 32, 64)
MAX_PEAK_CONCURRENCIES = 8
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


def _bounded_size(size: int) -> int:
    if size > MAX_SNAPSHOT_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most {size_label(MAX_SNAPSHOT_BYTES)}")
    return size


def _concurrencies(text: str) -> tuple[int, ...]:
    parse = _positive(int, MAX_CONCURRENCY)
    try:
        values = tuple(parse(part) for part in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if len(set(values)) != len(values) or len(values) > MAX_PEAK_CONCURRENCIES:
        raise argparse.ArgumentTypeError(
            f"give 1 to {MAX_PEAK_CONCURRENCIES} different concurrencies, got {text}"
        )
    return values


def _size(text: str) -> int:
    try:
        return _bounded_size(parse_size(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(_bounded_size(size) for size in parse_sizes(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn-bench",
        description=__doc__.split("\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(__doc__ or "").split("\n", 2)[2],
    )
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("workload", choices=WORKLOADS)
    target = parser.add_argument_group("server")
    where = target.add_mutually_exclusive_group()
    where.add_argument("--address", help="HOST:PORT of a running server")
    where.add_argument(
        "--spawn", action="store_true", help="start a standalone server for the run, then stop it"
    )
    target.add_argument(
        "--shards",
        type=_positive(int, 1024),
        default=1,
        help="with --spawn, and replication's clusters; for ceiling, the shards the null "
        "server announces",
    )
    target.add_argument(
        "--data-dir",
        type=Path,
        help="server data dir for --spawn (kept; default a temp dir, removed), "
        "or where the fsync probe writes; replication/snapshot: the pods' (one subdir each run)",
    )
    target.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the spawned server or pods (repeatable; use --server-arg=--flag)",
    )
    target.add_argument(
        "--server-pid", type=int, help="pid of the --address server, to report its CPU per op"
    )
    security_options = target.add_mutually_exclusive_group()
    security_options.add_argument(
        "--tls",
        nargs="?",
        const="all",
        choices=security.TLS_MODES,
        default=None,
        help="spawned server/pods with a throwaway CA: TLS client ports and mutual TLS "
        "between pods ('all', the default), or mutual TLS between pods only ('internal')",
    )
    security_options.add_argument(
        "--tls-dir",
        type=Path,
        default=None,
        help="dial the --address server over TLS with this directory's ca.crt "
        "(and tls.crt/tls.key if present)",
    )
    target.add_argument("--spawn-timeout-s", type=_positive(float, 600), default=60.0)
    target.add_argument("--stop-timeout-s", type=_positive(float, 600), default=10.0)
    target.add_argument("--fsync-dir", type=Path, help="where the fsync probe writes")
    target.add_argument(
        "--etcd",
        metavar="BINARY",
        help="unary: also run each load against a single-member etcd spawned from "
        "BINARY (e.g. /usr/bin/etcd, Debian package etcd-server)",
    )

    timing = parser.add_argument_group("timing (all bounded)")
    timing.add_argument("--duration-s", type=_positive(float, MAX_DURATION_S), default=10.0)
    timing.add_argument("--warmup-s", type=_non_negative_s, default=2.0, help="excluded")
    timing.add_argument(
        "--drain-s",
        type=_non_negative_s,
        default=10.0,
        help="bound on finishing in-flight work (notify: and then on subscribers catching up)",
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
        help=f"requests in flight in total (spread over the streams in stream mode; default "
        f"{DEFAULT_CONCURRENCY}); replication runs at --peak-concurrencies instead",
    )
    load.add_argument(
        "--batch", type=_positive(int, MAX_BATCH), default=100, help="ops per request"
    )
    load.add_argument(
        "--value-size",
        type=_positive(int, MAX_VALUE_SIZE_BYTES),
        help=f"bytes (default {DEFAULT_VALUE_SIZE_BYTES}; snapshot: {SNAPSHOT_VALUE_SIZE_BYTES})",
    )
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
    load.add_argument(
        "--peak-concurrencies",
        type=_concurrencies,
        default=DEFAULT_PEAK_CONCURRENCIES,
        help="replication: the requests in flight of each flat-out phase, comma-separated "
        "(default %(default)s); the best is the peak",
    )
    load.add_argument("--streams-per-shard", type=_positive(int, MAX_STREAMS), default=1)
    load.add_argument("--channels", type=_positive(int, MAX_STREAMS), default=1, help="per server")
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
    load.add_argument(
        "--subscribers",
        type=_positive(int, MAX_SUBSCRIBERS),
        default=4,
        help="notify: subscribers, each with one GetNotifications stream per shard",
    )
    load.add_argument(
        "--watch-prefix",
        metavar="TEMPLATE",
        help="notify: subscriber i watches only keys with the prefix TEMPLATE.format(i=i), "
        "filtered on the server (keys are /bench/%%010d: '/bench/00000{i:02d}' gives each "
        "of 100 subscribers 1%% of --keys 100000); then only bytes and batches are counted",
    )
    load.add_argument(
        "--sessions",
        type=_positive(int, MAX_SESSIONS_PER_SHARD),
        default=4,
        help="ephemeral: sessions per shard the puts are tied to",
    )
    snapshot = parser.add_argument_group("snapshot")
    sizes = snapshot.add_mutually_exclusive_group()
    sizes.add_argument(
        "--snapshot-bytes",
        type=_size,
        help="values written before the follower is added (default 1G; K, M, G are binary)",
    )
    sizes.add_argument(
        "--snapshot-sizes",
        type=_sizes,
        metavar="SIZE,SIZE",
        help="several --snapshot-bytes in one run, each on a fresh cluster (e.g. 256M,1G)",
    )
    snapshot.add_argument(
        "--wal-segment-bytes",
        type=_positive(int, 1 << 40),
        default=DEFAULT_WAL_SEGMENT_BYTES,
        help="the pods' WAL segment size (small: the leader trims early)",
    )
    snapshot.add_argument(
        "--wal-retention-bytes",
        type=_positive(int, 1 << 40),
        default=DEFAULT_WAL_RETENTION_BYTES,
        help="the pods' WAL retention (below the data size, so a snapshot is needed)",
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON result line")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed arguments with workload-dependent defaults filled in."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = DEFAULT_CONCURRENCY
    elif args.workload == "replication":
        parser.error("replication runs at --peak-concurrencies: drop --concurrency")
    if args.value_size is None:
        snapshot = args.workload == "snapshot"
        args.value_size = SNAPSHOT_VALUE_SIZE_BYTES if snapshot else DEFAULT_VALUE_SIZE_BYTES
    return args


# ---------------------------------------------------------------------------
# Workloads


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


def _phase(
    args: argparse.Namespace,
    *loads: LoadSpec,
    duration_s: float | None = None,
    channels: int | None = None,
) -> PhaseSpec:
    return PhaseSpec(
        loads=loads,
        duration_s=args.duration_s if duration_s is None else duration_s,
        warmup_s=args.warmup_s,
        drain_s=args.drain_s,
        rpc_timeout_s=args.rpc_timeout_s,
        pool_max_ops=args.pool_max_ops,
        channels=args.channels if channels is None else channels,
    )


def _header(workload: str, args: argparse.Namespace, target: Target | None) -> str:
    fields = [f"# cairn-bench {workload}:"]
    if workload != "fsync":
        fields += [
            f"mode={args.mode}",
            f"batch={args.batch}",
            f"value={args.value_size}B",
            f"keys={args.keys}",
            (
                f"peak_concurrencies={','.join(map(str, args.peak_concurrencies))}"
                if workload == "replication"
                else f"concurrency={args.concurrency}"
            ),
            f"streams_per_shard={args.streams_per_shard}",
            f"channels={args.channels}",
            f"rate={'max' if args.rate is None else f'{args.rate:g}'}",
            f"procs={args.procs}",
        ]
        if workload in ("get", "all", "unary"):
            fields.append(f"preload={_preload_keys(args)}")
        if workload in ("notify", "all"):
            fields += [f"subscribers={args.subscribers}/shard", "subscribers_run_in=writer-loop"]
        if workload in ("ephemeral", "all"):
            fields += [
                f"sessions={args.sessions}/shard",
                f"session_timeout={SESSION_TIMEOUT_MS}ms",
                f"keep_alive={KEEP_ALIVE_INTERVAL_S:g}s",
            ]
    fields += [f"duration={args.duration_s:g}s", f"warmup={args.warmup_s:g}s"]
    if target is not None:
        spawned = " (spawned)" if target.spawned else ""
        fields += [f"shards={len(target.shards)}", f"server={target.address}{spawned}"]
    fields.append(f"cpus={os.cpu_count()}")
    return " ".join(fields)


def _preload_keys(args: argparse.Namespace) -> int:
    return int(args.preload if args.preload is not None else min(args.keys, MAX_PRELOAD_KEYS))


def _preload_timeout_s(keys: int) -> float:
    return 60.0 + keys / PRELOAD_RATE_FLOOR_OPS_PER_S


async def _do_preload(args: argparse.Namespace, target: Target) -> None:
    keys = _preload_keys(args)
    timeout_s = _preload_timeout_s(keys)
    seconds = await preload(target.shards, keys, args.value_size, timeout_s, args.seed)
    print(f"# preloaded {keys} keys in {seconds:.1f} s", flush=True)


async def _fsync_rows(args: argparse.Namespace, directory: Path) -> list[Row]:
    rows = []
    # Appends, and writes over zero-filled room (what the WAL does, see cairn.storage.wal).
    for zero_filled in (False, True):
        for records in (1, FSYNC_GROUP_RECORDS):
            spec = FsyncSpec(
                directory,
                args.duration_s,
                args.warmup_s,
                args.value_size,
                records,
                zero_filled=zero_filled,
            )
            result = await asyncio.to_thread(run_fsync_probe, spec)
            how = " over zeros" if zero_filled else ""
            name = f"fsync {records} x {args.value_size}B/sync{how}"
            rows.append(fsync_row(name, result))
            print(format_row_line(rows[-1]), flush=True)
    return rows


async def _run_load_phase(
    args: argparse.Namespace,
    target: Target,
    phase: PhaseSpec,
    names: Sequence[str],
    procs: int | None = None,
    completed: Callable[[Row], Awaitable[Row]] | None = None,
) -> list[Row]:
    """The phase's rows, each printed once `completed` (if given) added its figures."""
    result = await execute_phase(phase, target, args.procs if procs is None else procs)
    rows = [load_row(n, r, result) for n, r in zip(names, result.loads, strict=True)]
    if completed is not None:
        rows = [await completed(row) for row in rows]
    for row in rows:
        print(format_row_line(row), flush=True)
    return rows


@asynccontextmanager
async def _null_target(args: argparse.Namespace, shards: int) -> AsyncIterator[Target]:
    """A null server spawned for one ceiling phase, so it sits idle through no other."""
    async with spawned_null_server(
        shards, args.value_size, args.spawn_timeout_s, args.stop_timeout_s
    ) as null:
        found = await fetch_shards(null.address, args.rpc_timeout_s)
        yield Target(null.address, found, null.pid, spawned=True)


async def _ceiling_rows(
    args: argparse.Namespace,
    spec: LoadSpec,
    shards: int,
    channels: int | None = None,
    procs: int | None = None,
    suffix: str = "",
) -> list[Row]:
    """The load `spec` against a null server announcing `shards` shards."""
    async with _null_target(args, shards) as target:
        phase = _phase(args, spec, channels=channels)
        return await _run_load_phase(args, target, phase, [ceiling_label(spec, suffix)], procs)


def _notify_stream_timeout_s(phase: PhaseSpec) -> float:
    """A deadline for a notification stream: never reached unless something hangs."""
    return CONNECT_TIMEOUT_S + phase.warmup_s + phase.duration_s + 2 * phase.drain_s + 60.0


async def _notify_rows(args: argparse.Namespace, target: Target, phase: PhaseSpec) -> list[Row]:
    """The writer's row and the subscribers' row of one notify phase (one process)."""
    (spec,) = phase.loads
    probe = NotifyProbe(
        target.shards,
        args.subscribers,
        phase.drain_s,
        _notify_stream_timeout_s(phase),
        args.watch_prefix,
    )
    result = await execute_phase(phase, target, 1, observer=probe.observe, companion=probe)
    rows = [
        load_row(f"{NOTIFY_PREFIX}{spec.label()}", result.loads[0], result),
        notify_row(probe.result(), result),
    ]
    for row in rows:
        print(format_row_line(row), flush=True)
    return rows


async def _ephemeral_rows(
    args: argparse.Namespace, target: Target, spec: LoadSpec, duration_s: float | None = None
) -> list[Row]:
    """The put load with every put tied to a session; sessions opened, kept alive and
    closed here (this process), whatever --procs drives the puts."""
    hold = SessionHold(target.shards, args.sessions, args.rpc_timeout_s)
    closed = False
    try:
        sessions = await hold.open()
        print(
            f"# opened {len(sessions)} sessions ({args.sessions} per shard) "
            f"in {hold.figures.create_s * 1000:.0f} ms",
            flush=True,
        )
        hold.start_keep_alive()
        ephemeral = replace(spec, sessions=tuple(sessions))
        phase = _phase(args, ephemeral, duration_s=duration_s)
        result = await execute_phase(phase, target, args.procs)
        figures = await hold.close()
        closed = True
    finally:
        if not closed and hold.sessions:
            with contextlib.suppress(Exception):
                await hold.close()  # leave nothing behind; the run failed anyway
        await hold.release()
    row = with_sessions(load_row(ephemeral.label(), result.loads[0], result), figures)
    ids = [[s.shard_id, s.session_id] for s in sessions]
    row = replace(row, extra=(*row.extra, ("session_ids", ids)))
    print(format_row_line(row), flush=True)
    return [row]


# ---------------------------------------------------------------------------
# Clusters of pods: replication and snapshot


@contextlib.contextmanager
def _cluster_work_dir(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """Where one cluster's pods keep data and logs: `--data-dir/<name>` (kept; must be
    new or empty) or a temp dir (removed)."""
    if args.data_dir is None:
        with tempfile.TemporaryDirectory(prefix=f"cairn-bench-{name}-") as work:
            yield Path(work)
        return
    work = args.data_dir / name
    if work.exists() and any(work.iterdir()):
        raise UsageError(f"{work} is not empty: give a new --data-dir")
    work.mkdir(parents=True, exist_ok=True)
    yield work


def _print_pod_problems(prefix: str, problems: dict[int, list[str]]) -> None:
    """Warning and error lines of the pods' logs: a count and the first few."""
    for index, lines in sorted(problems.items()):
        if not lines:
            continue
        print(f"# {prefix} pod {index} log: {len(lines)} warning/error line(s), first:", flush=True)
        for line in lines[:PROBLEM_LINES_SHOWN]:
            print(f"#   {line[:400]}", flush=True)
    if not any(problems.values()):
        print(f"# {prefix} pod logs: no warnings or errors", flush=True)


def _replication_node_args(args: argparse.Namespace) -> list[str]:
    return ["--log-level", "INFO", *args.server_arg]


def _note_stretched(args: argparse.Namespace, rows: Sequence[Row]) -> None:
    """Say so when a row's ops/s is over more than its window: an unanswered request
    ends at the drain deadline, and elapsed time runs to the last request's end."""
    for row in rows:
        ops = dict(row.extra).get("ops", 0)
        if row.ops_per_s <= 0 or not ops:
            continue
        elapsed_s = ops / row.ops_per_s
        if elapsed_s > 1.2 * args.duration_s:
            print(
                f"# note: {row.name}: ops/s is over {elapsed_s:.1f} s, not the "
                f"{args.duration_s:g} s window: {dict(row.extra).get('rpc_errors', 0)} "
                f"request(s) failed or went unanswered until the drain deadline; in the "
                f"window {ops / args.duration_s:.0f} ops/s were answered OK",
                flush=True,
            )


async def _followers_caught_up(args: argparse.Namespace, cluster: Any, factor: int) -> None:
    if factor > 1:
        seconds = await cluster.wait_caught_up(CATCH_UP_TIMEOUT_S)
        print(f"# rf={factor}: followers caught up {seconds:.2f} s after the phase", flush=True)


async def _log_counts(cluster: Cluster) -> tuple[int, int]:
    """(write requests taken in, log head offset), summed over the shards on the
    leader: across a phase, their changes give the requests folded per log entry."""
    requests = head = 0
    for shard in cluster.shards:
        status = await cluster.status(cluster.leader, shard)
        requests += status.write_requests
        head += status.head.offset
    return requests, head


def _with_requests_per_entry(row: Row, before: tuple[int, int], after: tuple[int, int]) -> Row:
    """The row with `requests_per_entry`: the phase's write requests over the log
    entries they made (1: none folded; warm-up and drain included, same load)."""
    requests, entries = after[0] - before[0], after[1] - before[1]
    if requests <= 0 or entries <= 0:
        return row
    return replace(row, extra=(*row.extra, ("requests_per_entry", round(requests / entries, 2))))


async def _counted_phase(
    args: argparse.Namespace, cluster: Cluster, target: Target, spec: LoadSpec, name: str
) -> list[Row]:
    before = await _log_counts(cluster)

    async def with_counts(row: Row) -> Row:
        return _with_requests_per_entry(row, before, await _log_counts(cluster))

    # Each phase from at most one load process per request in flight.
    procs = min(args.procs, spec.concurrency)
    return await _run_load_phase(
        args, target, _phase(args, spec), [name], procs, completed=with_counts
    )


async def _replication_cluster_rows(
    args: argparse.Namespace, factor: int, work_dir: Path
) -> list[Row]:
    """The peak and the half-peak row against a cluster of `factor` pods."""
    started_s = time.monotonic()
    async with running_cluster(
        factor,
        args.shards,
        work_dir,
        _replication_node_args(args),
        args.spawn_timeout_s,
        args.stop_timeout_s,
        args.rpc_timeout_s,
    ) as cluster:
        leader = cluster.leader
        shards = await fetch_shards(leader.address, args.rpc_timeout_s)
        target = Target(leader.address, shards, leader.pid, True, cluster.pids[1:])
        print(
            f"# rf={factor}: {factor} pod(s) (pids {','.join(map(str, cluster.pids))}), "
            f"{len(shards)} shard(s) led by pod 0 at {leader.address}; serving "
            f"{time.monotonic() - started_s:.1f} s after spawning",
            flush=True,
        )
        rows: list[Row] = []
        peak: tuple[Row, LoadSpec] | None = None
        for concurrency in args.peak_concurrencies:
            spec = _load_spec(args, rate_ops_per_s=None, concurrency=concurrency)
            name = replication_label(factor, concurrency_label(spec.label(), concurrency))
            phase_rows = await _counted_phase(args, cluster, target, spec, name)
            _note_stretched(args, phase_rows)
            await _followers_caught_up(args, cluster, factor)
            rows += phase_rows
            if peak is None or phase_rows[0].ops_per_s > peak[0].ops_per_s:
                peak = (phase_rows[0], spec)
        assert peak is not None  # at least one concurrency (argparse)
        half = peak[0].ops_per_s / 2
        if half > 0:
            half_spec = replace(peak[1], rate_ops_per_s=half)
            label = concurrency_label(HALF_PREFIX + half_spec.label(), half_spec.concurrency)
            phase_rows = await _counted_phase(
                args, cluster, target, half_spec, replication_label(factor, label)
            )
            _note_stretched(args, phase_rows)
            await _followers_caught_up(args, cluster, factor)
            rows += phase_rows
        else:
            print(f"# rf={factor}: skipping the half-peak phase: the peak was zero", flush=True)
        for shard in cluster.shards:
            status = await cluster.status(leader, shard)
            followers = ", ".join(
                f"{f.node.internal_address} {f.state} acked={f.acked_offset}"
                f"{' voting' if f.voting else ''}"
                for f in status.followers
            )
            print(
                f"# rf={factor} shard {shard}: leader head {status.head.offset} commit "
                f"{status.commit_offset} WAL first offset {status.first_offset}"
                + (f"; followers: {followers}" if followers else ""),
                flush=True,
            )
        _print_pod_problems(f"rf={factor}", cluster.problems())
    return rows


async def _replication_rows(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    for factor in REPLICATION_FACTORS:
        with _cluster_work_dir(args, f"rf{factor}") as work_dir:
            rows += await _replication_cluster_rows(args, factor, work_dir)
    return rows


def _snapshot_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    if args.snapshot_sizes:
        return tuple(args.snapshot_sizes)
    return (args.snapshot_bytes or DEFAULT_SNAPSHOT_BYTES,)


def _snapshot_specs(args: argparse.Namespace) -> list[SnapshotSpec]:
    node_args = (
        "--log-level",
        "INFO",
        "--wal-segment-bytes",
        str(args.wal_segment_bytes),
        "--wal-retention-bytes",
        str(args.wal_retention_bytes),
        *args.server_arg,
    )
    return [
        SnapshotSpec(
            size_bytes=size,
            value_size_bytes=args.value_size,
            node_args=node_args,
            start_timeout_s=args.spawn_timeout_s,
            stop_timeout_s=args.stop_timeout_s,
            rpc_timeout_s=args.rpc_timeout_s,
            seed=args.seed,
        )
        for size in _snapshot_sizes(args)
    ]


async def _snapshot_rows(args: argparse.Namespace) -> list[Row]:
    rows = []
    for spec in _snapshot_specs(args):
        with _cluster_work_dir(args, f"snapshot-{size_label(spec.size_bytes)}") as work_dir:
            result = await measure_snapshot(spec, work_dir, lambda line: print(line, flush=True))
        row = snapshot_row(result)
        print(format_snapshot_line(row), flush=True)
        _print_pod_problems(row.name, result.problems)
        rows.append(row)
    return rows


def _cluster_header(args: argparse.Namespace) -> str:
    if args.workload == "replication":
        factors = ",".join(map(str, REPLICATION_FACTORS))
        return (
            _header("replication", args, None).removesuffix(f" cpus={os.cpu_count()}")
            + f" shards={args.shards} replication_factors={factors} pods=local"
            + f" cpus={os.cpu_count()}"
        )
    sizes = ",".join(size_label(size) for size in _snapshot_sizes(args))
    return (
        f"# cairn-bench snapshot: sizes={sizes} value={args.value_size}B "
        f"wal_segment={args.wal_segment_bytes}B wal_retention={args.wal_retention_bytes}B "
        f"cpus={os.cpu_count()} (MB = 10^6 B; RSS in MiB = 2^20 B)"
    )


async def run_workload(args: argparse.Namespace, target: Target, fsync_dir: Path) -> list[Row]:
    workload = args.workload
    if workload == "put":
        spec = _load_spec(args)
        return await _run_load_phase(args, target, _phase(args, spec), [spec.label()])
    if workload == "notify":
        return await _notify_rows(args, target, _phase(args, _load_spec(args)))
    if workload == "ephemeral":
        return await _ephemeral_rows(args, target, _load_spec(args))
    if workload == "get":
        await _do_preload(args, target)
        spec = _load_spec(args, kind="get", keys=_preload_keys(args))
        return await _run_load_phase(args, target, _phase(args, spec), [spec.label()])
    if workload == "unary":
        return await _unary_rows(args, target)
    assert workload == "all", workload
    rows = await _fsync_rows(args, fsync_dir)
    put_batched = _load_spec(args, mode="stream", rate_ops_per_s=None)
    put_single = replace(put_batched, batch=1)
    # Each put row right after its ceiling, with as many shards (so as many
    # streams): the two are then as close in time and in shape as they can be.
    shards = len(target.shards)
    rows += await _ceiling_rows(args, put_batched, shards)
    peak = await _run_load_phase(args, target, _phase(args, put_batched), [put_batched.label()])
    rows += peak
    rows += await _ceiling_rows(args, put_single, shards)
    rows += await _run_load_phase(args, target, _phase(args, put_single), [put_single.label()])
    # The same single-op requests from as many clients as requests in flight: a
    # stream each, on its own connection, each waiting for its answer. One stream
    # carries one message at a time each way (gRPC's rule), so the row above shows
    # what one pipelining client gets; this one what the server serves to many.
    clients = min(MAX_STREAMS, math.ceil(put_single.concurrency / shards))
    if clients > put_single.streams_per_shard:
        put_clients = replace(put_single, streams_per_shard=clients)
        connections = clients * shards
        rows += await _ceiling_rows(args, put_clients, shards, channels=connections)
        phase = _phase(args, put_clients, channels=connections)
        rows += await _run_load_phase(args, target, phase, [put_clients.label()])
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
    half_put_load = replace(put_batched, rate_ops_per_s=half_put)
    half_get_load = replace(get_batched, rate_ops_per_s=half_get)
    # Each alone at half its peak (the latency targets), then both at once at a
    # quarter of theirs: puts and gets share the server's event loop, so that is half
    # of its capacity too (both at half their peaks would be all of it, and the row
    # would show queueing, not latency).
    rows += await _run_load_phase(
        args, target, _phase(args, half_put_load), [f"half {half_put_load.label()}"]
    )
    rows += await _run_load_phase(
        args, target, _phase(args, half_get_load), [f"half {half_get_load.label()}"]
    )
    mixed_put = replace(put_batched, rate_ops_per_s=half_put / 2)
    mixed_get = replace(get_batched, rate_ops_per_s=half_get / 2)
    rows += await _run_load_phase(
        args,
        target,
        _phase(args, mixed_put, mixed_get),
        [f"mix {mixed_put.label()}", f"mix {mixed_get.label()}"],
    )
    rows += await _all_notify_and_ephemeral(args, target, put_batched)
    return rows


async def _unary_rows(args: argparse.Namespace, target: Target) -> list[Row]:
    """Per number of callers (UNARY_CALLERS), put and get with one operation per unary
    call, each right after its ceiling: the same load against the null server; and
    with --etcd, right before the same load against etcd."""
    await _do_preload(args, target)
    shards = len(target.shards)
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        etcd = None
        if args.etcd is not None:
            etcd = await stack.enter_async_context(_etcd_target(args))
        for callers in UNARY_CALLERS:
            procs = min(callers, max(args.procs, UNARY_LOAD_PROCS))
            put = _load_spec(args, mode="unary", batch=1, concurrency=callers, rate_ops_per_s=None)
            get = replace(put, kind="get", keys=_preload_keys(args))
            suffix = f" callers={callers}"
            for spec in (put, get):
                rows += await _ceiling_rows(args, spec, shards, procs=procs, suffix=suffix)
                phase = _phase(args, spec)
                rows += await _run_load_phase(args, target, phase, [spec.label() + suffix], procs)
                if etcd is not None:
                    on_etcd = replace(spec, api="etcd")
                    phase = _phase(args, on_etcd)
                    rows += await _run_load_phase(
                        args, etcd, phase, [on_etcd.label() + suffix], procs
                    )
    return rows


@asynccontextmanager
async def _etcd_target(args: argparse.Namespace) -> AsyncIterator[Target]:
    """A single-member etcd for the run, preloaded like the server (see etcd.py)."""
    async with spawned_etcd(args.etcd, args.spawn_timeout_s, args.stop_timeout_s) as etcd:
        keys = _preload_keys(args)
        seconds = await preload_etcd(
            etcd.address, keys, args.value_size, _preload_timeout_s(keys), args.seed
        )
        print(
            f"# etcd {etcd.version} (pid {etcd.pid}) at {etcd.address}: "
            f"preloaded {keys} keys in {seconds:.1f} s",
            flush=True,
        )
        yield Target(etcd.address, etcd_shards(etcd.address), etcd.pid, spawned=True)


async def _all_notify_and_ephemeral(
    args: argparse.Namespace, target: Target, put_batched: LoadSpec
) -> list[Row]:
    """The fan-out and ephemeral rows of `all`: batch 100, flat out, half the duration
    (a steady state is reached within a second; this keeps `all` short)."""
    short_s = _short_duration_s(args)
    if args.procs != 1:
        print("# notify runs in one process: its subscribers observe the writer", flush=True)
    rows = await _notify_rows(args, target, _phase(args, put_batched, duration_s=short_s))
    rows += await _ephemeral_rows(args, target, put_batched, duration_s=short_s)
    return rows


def _short_duration_s(args: argparse.Namespace) -> float:
    return float(args.duration_s) / 2


_PHASES = {
    "put": 1,
    "get": 1,
    "fsync": 0,
    "ceiling": 1,
    "notify": 1,
    "ephemeral": 1,
    "all": 12,
    "unary": 4 * len(UNARY_CALLERS),
}
_SPAWNS = {
    "put": 1,
    "get": 1,
    "fsync": 0,
    "ceiling": 1,
    "notify": 1,
    "ephemeral": 1,
    "all": 4,
    "unary": 1 + 2 * len(UNARY_CALLERS),
}


def _phase_count(args: argparse.Namespace) -> float:
    """Phases of the full duration (`all` runs two at half of it)."""
    if args.workload == "replication":
        return _replication_phases(args) * len(REPLICATION_FACTORS)
    etcd_phases = 2 * len(UNARY_CALLERS) if args.etcd is not None else 0
    return _PHASES.get(args.workload, 0) + etcd_phases


def _replication_phases(args: argparse.Namespace) -> int:
    """Per cluster: a peak phase per concurrency, then the half-peak phase."""
    return len(args.peak_concurrencies) + 1


def _spawn_count(args: argparse.Namespace) -> int:
    """Servers started (and stopped) in the run: the real one, null ones for ceilings,
    the pods of each cluster, etcd."""
    if args.workload == "replication":
        return sum(REPLICATION_FACTORS)
    return _SPAWNS.get(args.workload, 0) + (1 if args.etcd is not None else 0)


def _companion_s(args: argparse.Namespace) -> float:
    """Beyond the phases: notify's subscribing and subscriber drain, ephemeral's session
    opening, closing and checking (each bounded by an RPC timeout)."""
    notify_s = CONNECT_TIMEOUT_S + float(args.drain_s)
    ephemeral_s = 3 * float(args.rpc_timeout_s)
    # replication: each cluster's wait for its leader to serve, followers' catch-up
    factors = len(REPLICATION_FACTORS)
    catch_ups = factors * _replication_phases(args)
    replication_s = factors * float(args.spawn_timeout_s) + catch_ups * CATCH_UP_TIMEOUT_S
    return {
        "notify": notify_s,
        "ephemeral": ephemeral_s,
        "all": notify_s + ephemeral_s,
        "replication": replication_s,
    }.get(args.workload, 0.0)


def _hard_timeout_s(args: argparse.Namespace) -> float:
    if args.timeout_s is not None:
        return float(args.timeout_s)
    if args.workload == "snapshot":
        return sum(spec.bound_s() for spec in _snapshot_specs(args)) + HARD_TIMEOUT_MARGIN_S
    per_phase_s = float(args.warmup_s + args.duration_s + args.drain_s) + 30.0  # + pool build
    fsync_s = 2 * (args.warmup_s + args.duration_s) if args.workload in ("fsync", "all") else 0.0
    preloads = 1 if args.workload in ("get", "all", "unary") else 0
    preloads += 1 if args.etcd is not None else 0
    preload_s = preloads * _preload_timeout_s(_preload_keys(args))
    phases = _phase_count(args)
    spawn_s = _spawn_count(args) * float(args.spawn_timeout_s + args.stop_timeout_s)
    companion_s = _companion_s(args)
    return (
        phases * per_phase_s + fsync_s + preload_s + spawn_s + companion_s + HARD_TIMEOUT_MARGIN_S
    )


def _validate(args: argparse.Namespace) -> None:
    needs_server = args.workload not in ("fsync", "ceiling", *CLUSTER_WORKLOADS)
    if args.workload == "ceiling" and args.address:
        raise UsageError("ceiling runs against its own null server: drop --address")
    if args.workload in CLUSTER_WORKLOADS:
        if args.address or args.server_pid is not None:
            raise UsageError(f"{args.workload} spawns its own pods: drop --address/--server-pid")
        if args.rate is not None:
            raise UsageError(f"{args.workload} picks its own rates: drop --rate")
        if args.workload == "snapshot" and args.mode != "stream":
            raise UsageError("snapshot picks its own load: drop --mode")
    if args.workload != "snapshot" and (args.snapshot_bytes or args.snapshot_sizes):
        raise UsageError("--snapshot-bytes and --snapshot-sizes are for the snapshot workload")
    if needs_server and not args.spawn and not args.address:
        raise UsageError(f"workload {args.workload!r} needs --address HOST:PORT or --spawn")
    if args.workload in ("get", "all", "unary") and _preload_keys(args) < 1:
        raise UsageError("get needs at least one preloaded key")
    if args.procs > args.concurrency:
        raise UsageError("--procs must not exceed --concurrency")
    if args.workload == "all" and (args.rate is not None or args.mode != "stream"):
        raise UsageError("all picks its own rates and modes: drop --rate and --mode")
    if args.workload == "notify" and args.procs != 1:
        raise UsageError("notify runs writer and subscribers in one process: drop --procs")
    if args.etcd is not None and args.workload != "unary":
        raise UsageError("--etcd is for the unary workload")
    if args.etcd is not None and (args.tls is not None or args.tls_dir is not None):
        raise UsageError("the etcd comparison is plaintext: drop --tls/--tls-dir")


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
        if args.workload in CLUSTER_WORKLOADS:
            print(_cluster_header(args), flush=True)
            if args.workload == "replication":
                return await _replication_rows(args)
            return await _snapshot_rows(args)
        if args.workload == "ceiling":
            async with _null_target(args, args.shards) as null:
                print(_header("ceiling", args, null), flush=True)
                spec = _load_spec(args)
                return await _run_load_phase(args, null, _phase(args, spec), [ceiling_label(spec)])
        if args.spawn:
            server = await stack.enter_async_context(
                spawned_server(
                    shards=args.shards,
                    data_dir=args.data_dir,
                    extra_args=[
                        "--log-level",
                        "WARNING",
                        *security.spawned_args("server", standalone=True),
                        *args.server_arg,
                    ],
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
    args = parse_args(argv)
    try:
        _validate(args)
    except UsageError as error:
        parser.error(str(error))
    if (args.tls is not None or args.tls_dir is not None) and args.procs > 1:
        # Load processes are spawned afresh and would not inherit the transport.
        parser.error("--tls and --tls-dir work with --procs 1 only")
    if args.tls is not None:
        security.enable_spawned_tls(args.tls)
    elif args.tls_dir is not None:
        security.enable_client_tls(args.tls_dir)
    print(f"# transport: {security.describe()}", flush=True)
    started_s = time.monotonic()
    try:
        rows = asyncio.run(amain(args))
    except TimeoutError:
        print(f"cairn-bench: hard timeout of {_hard_timeout_s(args):.0f} s hit", file=sys.stderr)
        return 3
    except (ServerStartError, ClusterError, UsageError, RuntimeError, OSError) as error:
        print(f"cairn-bench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if args.workload in ("all", "unary", "replication"):
        print()
        print(format_table(rows))
        shares = ceiling_shares(rows)
        if shares:
            print()
            print(format_ceiling_shares(shares))
        beside_etcd = etcd_pairs(rows)
        if beside_etcd:
            print()
            print(format_etcd_shares(beside_etcd))
    if args.workload == "snapshot":
        print()
        print(format_snapshot_table(rows))
    summary = (
        format_notify_summary(rows)
        + format_ephemeral_summary(rows)
        + format_replication_summary(rows)
    )
    if summary:
        print()
        print("\n".join(summary))
    if args.json:
        document = {
            "tool": "cairn-bench",
            "workload": args.workload,
            "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "wall_s": round(time.monotonic() - started_s, 2),
            "results": [row.to_dict() for row in with_ceiling_shares(rows)],
        }
        print(json.dumps(document, sort_keys=True))
    failed = sum(row.errors for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
