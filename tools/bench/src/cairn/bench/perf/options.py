"""`cairn perf`'s settings: one frozen object, every quantity with its unit, and the
command-line flags that fill it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# Callers are tasks, each holding one operation: a bound keeps a typo from
# starting a million of them.
MAX_CONCURRENCY = 10_000
MAX_VALUE_SIZE_BYTES = 4 * 1024 * 1024  # the server's value limit
MAX_KEYS = 1_000_000_000
MAX_INTERVALS = 100_000  # interval lines kept for the JSON summary


def is_http_target(target: str) -> bool:
    return target.startswith(("http://", "https://"))


@dataclass(frozen=True, slots=True)
class PerfOptions:
    # "host:port" (gRPC, any Oxia-compatible server; a comma-separated list is
    # several bootstrap addresses) or "http://host:port" (the REST gateway).
    target: str
    namespace: str = "default"
    # Operations per second over all callers; 0 runs flat out (closed loop).
    rate_ops_s: float = 0.0
    # Share of operations that are gets; the rest are puts.
    read_ratio: float = 0.0
    value_size_bytes: int = 100
    # Keys are `key_prefix` + a zero-padded number below `keys`, chosen uniformly.
    keys: int = 10_000
    key_prefix: str = "/perf/"
    # Callers, each doing one operation at a time.
    concurrency: int = 64
    # Off: every operation is its own request (max_batch_ops=1), with as many
    # requests in flight per shard as there are callers.
    batching: bool = True
    linger_ms: float = 0.0
    max_batch_ops: int = 1000
    # Batches out per shard at once (None: the client's default).
    max_inflight_batches: int | None = None
    duration_s: float = 10.0
    # Operations started during the warmup are reported per interval but left out
    # of the summary.
    warmup_s: float = 2.0
    interval_s: float = 1.0
    # After the end, operations in flight (and, open loop, ones scheduled before
    # the end) get this long to finish; the rest are counted as unfinished.
    drain_timeout_s: float = 10.0
    # Each operation (with the client's retries) fails after this long.
    request_timeout_s: float = 10.0
    # Write every key once before the run, so that gets find their records.
    preload: bool = False
    seed: int = 0
    # HTTP only: the connection pool's bound (default: one per caller).
    http_connections: int | None = None
    # Server processes (each with its descendants: a gateway's workers) whose CPU
    # over the measured window is reported per operation, beside the client's.
    server_pids: tuple[int, ...] = ()
    json: bool = False

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("a target is needed")
        if self.rate_ops_s < 0:
            raise ValueError("--rate must not be negative (0 runs flat out)")
        if not 0.0 <= self.read_ratio <= 1.0:
            raise ValueError("--read-ratio must be within [0, 1]")
        if not 0 <= self.value_size_bytes <= MAX_VALUE_SIZE_BYTES:
            raise ValueError(f"--value-size must be within [0, {MAX_VALUE_SIZE_BYTES}] bytes")
        if not 1 <= self.keys <= MAX_KEYS:
            raise ValueError(f"--keys must be within [1, {MAX_KEYS}]")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"--concurrency must be within [1, {MAX_CONCURRENCY}]")
        if self.linger_ms < 0:
            raise ValueError("--linger-ms must not be negative")
        if self.max_batch_ops < 1:
            raise ValueError("--max-batch-ops must be at least 1")
        if self.max_inflight_batches is not None and self.max_inflight_batches < 1:
            raise ValueError("--max-inflight-batches must be at least 1")
        if self.duration_s <= 0 or self.interval_s <= 0:
            raise ValueError("--duration-s and --interval-s must be positive")
        if self.warmup_s < 0 or self.drain_timeout_s < 0:
            raise ValueError("--warmup-s and --drain-timeout-s must not be negative")
        if (
            self.warmup_s + self.duration_s + self.drain_timeout_s
        ) / self.interval_s > MAX_INTERVALS:
            raise ValueError(f"more than {MAX_INTERVALS} intervals: raise --interval-s")
        if self.request_timeout_s <= 0:
            raise ValueError("--request-timeout-s must be positive")
        if self.http_connections is not None and self.http_connections < 1:
            raise ValueError("--http-connections must be at least 1")
        if any(pid < 1 for pid in self.server_pids):
            raise ValueError("--server-pid must be a process id")

    @property
    def is_http(self) -> bool:
        return is_http_target(self.target)

    @property
    def open_loop(self) -> bool:
        return self.rate_ops_s > 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `cairn perf` (the target defaults to the global --address)."""
    add = parser.add_argument
    add(
        "--target",
        help="host:port (gRPC, any Oxia-compatible server) or http://host:port (the REST "
        "gateway); default: --address",
    )
    add("--rate", type=float, default=0.0, help="operations/s over all callers; 0: flat out")
    add("--read-ratio", type=float, default=0.0, help="share of gets, 0..1 (default 0: puts)")
    add("--value-size", type=int, default=100, help="value bytes per put (default 100)")
    add("--keys", type=int, default=10_000, help="key cardinality (default 10000)")
    add("--key-prefix", default="/perf/", help="key prefix (default /perf/)")
    add("--concurrency", type=int, default=64, help="callers, one operation each (default 64)")
    add(
        "--batching",
        choices=("on", "off"),
        default="on",
        help="client-side batching; off: one operation per request (default on)",
    )
    add("--linger-ms", type=float, default=0.0, help="batch linger (default 0)")
    add("--max-batch-ops", type=int, default=1000, help="operations per batch (default 1000)")
    add(
        "--max-inflight-batches",
        type=int,
        default=None,
        help="batches out per shard at once (default: the client's)",
    )
    add("--duration-s", type=float, default=10.0, help="measured seconds (default 10)")
    add("--warmup-s", type=float, default=2.0, help="seconds before measuring (default 2)")
    add("--interval-s", type=float, default=1.0, help="seconds per report line (default 1)")
    add(
        "--drain-timeout-s",
        type=float,
        default=10.0,
        help="how long operations still running at the end may finish (default 10)",
    )
    add(
        "--request-timeout-s",
        type=float,
        default=None,
        help="deadline per operation (default: --timeout-s)",
    )
    add("--preload", action="store_true", help="write every key once before the run")
    add("--seed", type=int, default=0, help="random seed of key and operation choice")
    add("--http-connections", type=int, default=None, help="HTTP pool bound (default: callers)")
    add(
        "--server-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="a server process on this machine whose CPU per operation to report, its "
        "child processes included (a gateway's workers); repeatable",
    )


def options_from(args: argparse.Namespace) -> PerfOptions:
    """PerfOptions from parsed flags (and the global --address, --namespace,
    --timeout-s, --json)."""
    return PerfOptions(
        target=args.target or args.address,
        namespace=args.namespace,
        rate_ops_s=args.rate,
        read_ratio=args.read_ratio,
        value_size_bytes=args.value_size,
        keys=args.keys,
        key_prefix=args.key_prefix,
        concurrency=args.concurrency,
        batching=args.batching == "on",
        linger_ms=args.linger_ms,
        max_batch_ops=args.max_batch_ops,
        max_inflight_batches=args.max_inflight_batches,
        duration_s=args.duration_s,
        warmup_s=args.warmup_s,
        interval_s=args.interval_s,
        drain_timeout_s=args.drain_timeout_s,
        request_timeout_s=(
            args.request_timeout_s if args.request_timeout_s is not None else args.timeout_s
        ),
        preload=args.preload,
        seed=args.seed,
        http_connections=args.http_connections,
        server_pids=tuple(args.server_pid),
        json=args.json,
    )
