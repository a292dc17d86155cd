"""What a load is (LoadSpec), what runs together (PhaseSpec), and what they measured.

Results cross process boundaries (`--procs`) as plain dicts, and merge by
adding counts and histograms, so N load processes report as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cairn.common.histogram import Histogram

Kind = Literal["put", "get"]
Mode = Literal["stream", "unary"]
# The server's API: Cairn's (Oxia's client API), or etcd's v3 KV (etcd.py), for
# the comparison `unary --etcd` prints.
Api = Literal["oxia", "etcd"]


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A session opened for ephemeral puts (see sessions.py)."""

    shard_id: int
    session_id: int
    client_identity: str


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One load generator. Get keys are drawn from the preloaded [0, keys)."""

    kind: Kind
    mode: Mode  # get always uses Read calls (a server stream per request)
    batch: int  # ops per request
    value_size_bytes: int
    keys: int  # key space [0, keys)
    concurrency: int  # in-flight requests in total
    rate_ops_per_s: float | None  # None: closed loop, flat out
    streams_per_shard: int = 1
    seed: int = 1
    # Puts only: when given, every put is ephemeral, tied to one of its shard's
    # sessions (a fixed one per key, see pools.build_pool).
    sessions: tuple[SessionRef, ...] = ()
    api: Api = "oxia"

    def label(self) -> str:
        rate = "" if self.rate_ops_per_s is None else f" @{self.rate_ops_per_s:.0f}/s"
        if self.api == "etcd":
            return f"etcd {self.kind}{rate}"  # always one op per unary call
        how = "read" if self.kind == "get" else self.mode
        ephemeral = "ephemeral " if self.sessions else ""
        streams = f" streams={self.streams_per_shard}" if self.streams_per_shard > 1 else ""
        return f"{ephemeral}{self.kind} {how} b={self.batch}{streams}{rate}"


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """Loads run together in one timed window."""

    loads: tuple[LoadSpec, ...]
    duration_s: float
    warmup_s: float
    drain_s: float  # bound on finishing in-flight work after the window
    rpc_timeout_s: float
    pool_max_ops: int  # bound on pre-built ops per load (memory)
    channels: int = 1  # per leader address


@dataclass(slots=True)
class LoadResult:
    spec: LoadSpec
    latency: Histogram = field(default_factory=Histogram)  # per request, from its start
    send_lag: Histogram = field(default_factory=Histogram)  # open loop: sent - scheduled
    from_send: Histogram = field(default_factory=Histogram)  # open loop: answered - sent
    requests: int = 0
    ops_ok: int = 0
    ops_failed: int = 0
    rpc_errors: int = 0
    unsent_requests: int = 0
    elapsed_s: float = 0.0
    first_error: str | None = None
    pool_requests: int = 0

    @property
    def ops_per_s(self) -> float:
        return self.ops_ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def errors(self) -> int:
        return self.ops_failed + self.unsent_requests * self.spec.batch

    def merge(self, other: LoadResult) -> None:
        self.latency.merge(other.latency)
        self.send_lag.merge(other.send_lag)
        self.from_send.merge(other.from_send)
        self.requests += other.requests
        self.ops_ok += other.ops_ok
        self.ops_failed += other.ops_failed
        self.rpc_errors += other.rpc_errors
        self.unsent_requests += other.unsent_requests
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        self.first_error = self.first_error or other.first_error
        self.pool_requests += other.pool_requests

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency": self.latency.to_dict(),
            "send_lag": self.send_lag.to_dict(),
            "from_send": self.from_send.to_dict(),
            "requests": self.requests,
            "ops_ok": self.ops_ok,
            "ops_failed": self.ops_failed,
            "rpc_errors": self.rpc_errors,
            "unsent_requests": self.unsent_requests,
            "elapsed_s": self.elapsed_s,
            "first_error": self.first_error,
            "pool_requests": self.pool_requests,
        }

    @classmethod
    def from_dict(cls, spec: LoadSpec, data: dict[str, Any]) -> LoadResult:
        return cls(
            spec=spec,
            latency=Histogram.from_dict(data["latency"]),
            send_lag=Histogram.from_dict(data["send_lag"]),
            from_send=Histogram.from_dict(data["from_send"]),
            requests=int(data["requests"]),
            ops_ok=int(data["ops_ok"]),
            ops_failed=int(data["ops_failed"]),
            rpc_errors=int(data["rpc_errors"]),
            unsent_requests=int(data["unsent_requests"]),
            elapsed_s=float(data["elapsed_s"]),
            first_error=data["first_error"],
            pool_requests=int(data["pool_requests"]),
        )


@dataclass(slots=True)
class PhaseResult:
    """A phase's loads plus its CPU accounting: CPU time over the ops of the window."""

    loads: list[LoadResult]
    window_s: float  # the measured window (duration)
    client_cpu_s: float  # load process(es) CPU during the window
    server_cpu_s: float | None  # the server's CPU during the window, if known
    build_s: float  # time spent pre-building request pools (not measured)
    # Per server process when known (a cluster's pods, leader first); sums to server_cpu_s.
    pod_cpu_s: tuple[float, ...] | None = None
    # The same by thread group (server.THREAD_GROUPS), per server process.
    pod_thread_cpu_s: tuple[dict[str, float], ...] | None = None
    # Per server process: seconds its main thread was runnable but had no CPU.
    pod_main_wait_s: tuple[float, ...] | None = None

    @property
    def ops_per_s(self) -> float:
        return sum(r.ops_per_s for r in self.loads)

    def client_cpu_us_per_op(self) -> float:
        ops = self.ops_per_s * self.window_s
        return self.client_cpu_s / ops * 1e6 if ops > 0 else 0.0

    def server_cpu_us_per_op(self) -> float | None:
        ops = self.ops_per_s * self.window_s
        if self.server_cpu_s is None or ops <= 0:
            return None
        return self.server_cpu_s / ops * 1e6
