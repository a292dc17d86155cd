"""The `snapshot` workload: how fast a leader brings a new, empty follower up to
date by snapshot, and how much memory that costs the sender and the receiver.

Per size: a one-pod cluster (shard 0 led by pod 0) with a small WAL retention;
`size` bytes of values written in large batches (keys `/bench/%010d`); then wait
until the leader trimmed its WAL (GetStatus first_offset > 0), so an empty
follower cannot be brought up from the log and must be sent a snapshot. Both
RSS are taken at rest (the receiver is a freshly started pod), their VmHWM reset
(`/proc/PID/clear_refs` 5), then the new pod is fenced at the leader's term and
added as a follower, and VmRSS of both pids is sampled every 50 ms until the
follower's commit offset reaches the leader's. The peak is the highest sample,
or VmHWM read at the end when the reset worked (it catches spikes between
samples). The transfer counts as a snapshot when the follower logged
`installed a snapshot`.

Rates are in MB/s (10^6 bytes) of record data (keys + values); memory in MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.bench.storage.cluster import Cluster, Pod, running_cluster
from cairn.bench.storage.pools import key_name
from cairn.bench.storage.preload import preload
from cairn.bench.storage.report import Row
from cairn.bench.storage.rpc import fetch_shards

SHARD = 0
SAMPLE_INTERVAL_S = 0.05
PROGRESS_POLL_S = 0.05
PRELOAD_REQUEST_BYTES = 1024 * 1024  # values per preload request (large: fewer requests)
PRELOAD_MAX_BATCH = 10_000
PRELOAD_RATE_FLOOR_BYTES_PER_S = 1_000_000  # for the preload's time bound
TRANSFER_RATE_FLOOR_BYTES_PER_S = 1_000_000  # for the transfer's time bound
TRIM_TIMEOUT_S = 120.0
LOG_WAIT_S = 5.0
SNAPSHOT_PREFIX = "snapshot "
STREAMING = "streaming"
INSTALLED = re.compile(r"installed a snapshot up to .*")
SENDING = re.compile(r"sending a snapshot up to .*")
MiB = 1024 * 1024
MB = 1_000_000
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


# ---------------------------------------------------------------------------
# Sizes and /proc


def parse_size(text: str) -> int:
    """`256M`, `1G`, `1GiB`, `2MB`, `4096`: bytes (K, M, G, T are binary multiples)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size like 4096, 256M or 1G")
    number, unit = match.groups()
    value = float(number) * _UNITS[unit.upper()]
    if value < 1 or value != math.floor(value):
        raise ValueError(f"{text!r} is not a whole number of bytes above zero")
    return int(value)


def parse_sizes(text: str) -> tuple[int, ...]:
    """`256M,1G` -> (268435456, 1073741824)."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("no sizes given")
    return tuple(parse_size(part) for part in parts)


def size_label(size_bytes: int) -> str:
    """1073741824 -> `1GiB`, 268435456 -> `256MiB`, 1536 -> `1.5KiB`, 1000 -> `1000B`."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if size_bytes >= scale and (size_bytes * 10) % scale == 0:
            return f"{size_bytes / scale:g}{unit}iB"
    return f"{size_bytes}B"


def status_field_bytes(status_text: str, field: str) -> int | None:
    """A `kB` field of /proc/PID/status (`VmRSS:\\t  123 kB`) in bytes; None if absent."""
    for line in status_text.splitlines():
        name, _, rest = line.partition(":")
        if name == field:
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                return int(parts[0]) * 1024
            return None
    return None


def read_status(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux 4.0+); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    before_bytes: int
    peak_bytes: int  # highest VmRSS sample, or VmHWM since the reset when higher
    samples: int
    hwm_bytes: int | None = None  # VmHWM at the end, if it was reset before
    after_bytes: int | None = None  # VmRSS once the follower caught up

    @property
    def increase_bytes(self) -> int:
        return self.peak_bytes - self.before_bytes


class RssSampler:
    """VmRSS of some processes, sampled every SAMPLE_INTERVAL_S in a task."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self.before: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.samples = 0
        self.last: dict[str, int] = {}
        self.reset: dict[str, bool] = {}
        self._task: asyncio.Task[None] | None = None

    def rss(self, name: str) -> int:
        value = status_field_bytes(read_status(self.pids[name]), "VmRSS")
        if value is None:
            raise RuntimeError(f"no VmRSS for the {name} (pid {self.pids[name]}): gone?")
        return value

    def start(self) -> None:
        """Take the `before` figures, reset the peaks, start sampling."""
        for name in self.pids:
            self.before[name] = self.peak[name] = self.rss(name)
            self.reset[name] = reset_peak(self.pids[name])
        self._task = asyncio.get_running_loop().create_task(self._run())

    def sample(self) -> None:
        for name, pid in self.pids.items():
            value = status_field_bytes(read_status(pid), "VmRSS")
            if value is not None:
                self.peak[name] = max(self.peak[name], value)
                self.last[name] = value
        self.samples += 1

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    async def stop(self) -> dict[str, MemoryFigures]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()
        figures = {}
        for name, pid in self.pids.items():
            hwm = status_field_bytes(read_status(pid), "VmHWM") if self.reset[name] else None
            peak = max(self.peak[name], hwm or 0)
            figures[name] = MemoryFigures(
                self.before[name], peak, self.samples, hwm, self.last.get(name)
            )
        return figures


# ---------------------------------------------------------------------------
# One measurement


@dataclass(frozen=True, slots=True)
class SnapshotSpec:
    size_bytes: int  # of values
    value_size_bytes: int
    node_args: tuple[str, ...]
    start_timeout_s: float
    stop_timeout_s: float
    rpc_timeout_s: float
    seed: int = 1

    @property
    def records(self) -> int:
        return math.ceil(self.size_bytes / self.value_size_bytes)

    @property
    def value_bytes(self) -> int:
        return self.records * self.value_size_bytes

    @property
    def key_bytes(self) -> int:
        return self.records * len(key_name(0))  # zero-padded: every key the same length

    @property
    def data_bytes(self) -> int:
        return self.value_bytes + self.key_bytes

    @property
    def preload_batch(self) -> int:
        return max(1, min(PRELOAD_MAX_BATCH, PRELOAD_REQUEST_BYTES // self.value_size_bytes))

    @property
    def preload_timeout_s(self) -> float:
        return 60.0 + self.data_bytes / PRELOAD_RATE_FLOOR_BYTES_PER_S

    @property
    def transfer_timeout_s(self) -> float:
        return 60.0 + self.data_bytes / TRANSFER_RATE_FLOOR_BYTES_PER_S

    def bound_s(self) -> float:
        """An upper bound on one measurement: two pods, preload, trim, transfer."""
        pods_s = 2 * (self.start_timeout_s + self.stop_timeout_s)
        return pods_s + self.preload_timeout_s + TRIM_TIMEOUT_S + self.transfer_timeout_s


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    spec: SnapshotSpec
    preload_s: float
    seconds: float  # from AddFollower to the follower's commit offset reaching the leader's
    leader_head: int
    leader_first_offset: int  # of its WAL when the follower was added
    sender: MemoryFigures
    receiver: MemoryFigures
    installed: str | None  # the follower's "installed a snapshot up to ..." log line
    snapshots_sent: int  # "sending a snapshot" lines in the leader's log
    follower_head: int
    follower_first_offset: int
    follower_states: tuple[str, ...]  # as the leader saw the follower, in order
    problems: dict[int, list[str]]  # pod index -> warning/error lines of its log

    @property
    def verified(self) -> bool:
        return self.installed is not None

    @property
    def mb_per_s(self) -> float:
        return self.spec.data_bytes / MB / self.seconds if self.seconds > 0 else 0.0


async def _wait_trimmed(cluster: Cluster, timeout_s: float) -> Any:
    """The leader's status once its WAL no longer starts at offset 0."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        status = await cluster.status(cluster.leader, SHARD)
        if status.first_offset > 0:
            return status
        if time.monotonic() > deadline_s:
            raise RuntimeError(
                f"the leader's WAL was not trimmed within {timeout_s:.0f} s (first offset "
                f"{status.first_offset}, head {status.head.offset}): write more than "
                "--wal-retention-bytes, or lower it"
            )
        await asyncio.sleep(0.2)


def _follower_state(leader_status: Any, pod: Pod) -> str | None:
    for follower in leader_status.followers:
        if follower.node.internal_address == pod.internal_address:
            return str(follower.state)
    return None


async def _log_line(pod: Pod, pattern: re.Pattern[str], timeout_s: float) -> str | None:
    """The first match of `pattern` in the pod's log, waiting up to `timeout_s`."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        match = pattern.search(pod.log_text())
        if match is not None:
            return match.group(0).strip()
        if time.monotonic() > deadline_s:
            return None
        await asyncio.sleep(0.05)


async def measure_snapshot(
    spec: SnapshotSpec, work_dir: Path, say: Callable[[str], None]
) -> SnapshotResult:
    """One measurement in `work_dir` (pods' data and logs; the caller removes it)."""
    label = size_label(spec.size_bytes)
    async with running_cluster(
        1,
        1,
        work_dir,
        spec.node_args,
        spec.start_timeout_s,
        spec.stop_timeout_s,
        spec.rpc_timeout_s,
    ) as cluster:
        shards = await fetch_shards(cluster.leader.address, spec.rpc_timeout_s)
        preload_s = await preload(
            shards,
            spec.records,
            spec.value_size_bytes,
            spec.preload_timeout_s,
            spec.seed,
            batch=spec.preload_batch,
        )
        say(
            f"# snapshot {label}: preloaded {spec.records} records "
            f"({spec.data_bytes / MB:.1f} MB) in {preload_s:.1f} s "
            f"({spec.data_bytes / MB / preload_s:.1f} MB/s, {spec.preload_batch} per request)"
        )
        leader_status = await _wait_trimmed(cluster, TRIM_TIMEOUT_S)
        leader_head = int(leader_status.commit_offset)
        receiver = await cluster.spawn_pod()
        sampler = RssSampler({"sender": cluster.leader.pid, "receiver": receiver.pid})
        sampler.start()
        say(
            f"# snapshot {label}: leader head {leader_status.head.offset} commit "
            f"{leader_head} WAL first offset {leader_status.first_offset}; "
            f"RSS before: sender {sampler.before['sender'] / MiB:.1f} MiB, "
            f"receiver {sampler.before['receiver'] / MiB:.1f} MiB; adding the follower"
        )
        states: list[str] = []
        started_s = time.monotonic()
        try:
            await cluster.add_follower(receiver, SHARD)
            deadline_s = started_s + spec.transfer_timeout_s
            while True:
                follower = await cluster.status(receiver, SHARD)
                if follower.commit_offset >= leader_head:
                    seconds = time.monotonic() - started_s
                    break
                state = _follower_state(await cluster.status(cluster.leader, SHARD), receiver)
                if state is not None and (not states or states[-1] != state):
                    states.append(state)
                if time.monotonic() > deadline_s:
                    raise RuntimeError(
                        f"snapshot {label}: the follower was at commit offset "
                        f"{follower.commit_offset} of {leader_head} after "
                        f"{spec.transfer_timeout_s:.0f} s (states seen: {states})"
                    )
                await asyncio.sleep(PROGRESS_POLL_S)
        finally:
            memory = await sampler.stop()
        # Not timed: until the leader, too, sees the follower streaming (or a bound).
        settle_deadline_s = time.monotonic() + LOG_WAIT_S
        while time.monotonic() < settle_deadline_s:
            state = _follower_state(await cluster.status(cluster.leader, SHARD), receiver)
            if state is not None and (not states or states[-1] != state):
                states.append(state)
            if state == STREAMING:
                break
            await asyncio.sleep(PROGRESS_POLL_S)
        installed = await _log_line(receiver, INSTALLED, LOG_WAIT_S)
        sent = len(SENDING.findall(cluster.leader.log_text()))
        return SnapshotResult(
            spec=spec,
            preload_s=preload_s,
            seconds=seconds,
            leader_head=leader_head,
            leader_first_offset=int(leader_status.first_offset),
            sender=memory["sender"],
            receiver=memory["receiver"],
            installed=installed,
            snapshots_sent=sent,
            follower_head=int(follower.head.offset),
            follower_first_offset=int(follower.first_offset),
            follower_states=tuple(states),
            problems=cluster.problems(),
        )


# ---------------------------------------------------------------------------
# Rows and printing


def _mib(value: int) -> float:
    return round(value / MiB, 1)


def snapshot_row(result: SnapshotResult) -> Row:
    """A row for --json and the exit code: an unverified snapshot counts as an error."""
    spec = result.spec
    extra: list[tuple[str, Any]] = [
        ("size_bytes", spec.size_bytes),
        ("records", spec.records),
        ("value_size_bytes", spec.value_size_bytes),
        ("data_bytes", spec.data_bytes),
        ("seconds", round(result.seconds, 3)),
        ("mb_per_s", round(result.mb_per_s, 2)),
        ("preload_s", round(result.preload_s, 2)),
        ("leader_head", result.leader_head),
        ("leader_first_offset", result.leader_first_offset),
    ]
    for name, memory in (("sender", result.sender), ("receiver", result.receiver)):
        extra += [
            (f"{name}_rss_before_mib", _mib(memory.before_bytes)),
            (f"{name}_rss_peak_mib", _mib(memory.peak_bytes)),
            (f"{name}_rss_increase_mib", _mib(memory.increase_bytes)),
            (f"{name}_hwm_mib", None if memory.hwm_bytes is None else _mib(memory.hwm_bytes)),
            (
                f"{name}_rss_after_mib",
                None if memory.after_bytes is None else _mib(memory.after_bytes),
            ),
        ]
    extra += [
        ("rss_samples", result.sender.samples),
        ("snapshot", result.verified),
        ("installed", result.installed),
        ("snapshots_sent", result.snapshots_sent),
        ("follower_head", result.follower_head),
        ("follower_first_offset", result.follower_first_offset),
        ("follower_states", list(result.follower_states)),
        ("pod_log_problems", sum(len(lines) for lines in result.problems.values())),
    ]
    return Row(
        name=f"{SNAPSHOT_PREFIX}{size_label(spec.size_bytes)}",
        ops_per_s=spec.records / result.seconds if result.seconds > 0 else 0.0,
        requests_per_s=0.0,
        p50_ms=None,
        p99_ms=None,
        p999_ms=None,
        max_ms=None,
        errors=0 if result.verified else 1,
        ops_unit="records",
        extra=tuple(extra),
    )


def format_snapshot_line(row: Row) -> str:
    """`snapshot 256MiB: data_bytes=... seconds=... MB/s=... sender_rss_mib=a/b/+c ...`
    (RSS before/peak/+increase), then how the snapshot was verified."""
    x = dict(row.extra)
    parts = [
        f"data_bytes={x['data_bytes']}",
        f"records={x['records']}",
        f"seconds={x['seconds']:.2f}",
        f"MB/s={x['mb_per_s']:.1f}",
        f"records/s={row.ops_per_s:.0f}",
    ]
    for name in ("sender", "receiver"):
        parts += [
            f"{name}_rss_before_mib={x[f'{name}_rss_before_mib']:.1f}",
            f"{name}_rss_peak_mib={x[f'{name}_rss_peak_mib']:.1f}",
            f"{name}_rss_increase_mib={x[f'{name}_rss_increase_mib']:.1f}",
        ]
    parts.append(f"snapshot={'yes' if x['snapshot'] else 'NO'}")
    line = f"{row.name}: " + " ".join(parts)
    if x["snapshot"]:
        how = f'follower logged "{x["installed"]}"'
    else:
        how = 'NOT verified: the follower never logged "installed a snapshot"'
    states = " > ".join(x["follower_states"]) or "-"
    line += (
        f"\n  snapshot: {how}; follower head {x['follower_head']} first_offset "
        f"{x['follower_first_offset']} (leader WAL first offset {x['leader_first_offset']}); "
        f"leader saw the follower {states}; {x['snapshots_sent']} snapshot(s) sent"
    )
    return line


def format_snapshot_table(rows: Sequence[Row]) -> str:
    """Sizes side by side: rate and each side's RSS before, peak, increase (MiB)."""
    head = (
        f"{'snapshot':<10}{'data MB':>10}{'seconds':>9}{'MB/s':>8}"
        f"{'sender MiB before/peak/+':>28}{'receiver MiB before/peak/+':>30}{'verified':>10}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        if not row.name.startswith(SNAPSHOT_PREFIX):
            continue
        x = dict(row.extra)
        sides = [
            f"{x[f'{n}_rss_before_mib']:.0f}/{x[f'{n}_rss_peak_mib']:.0f}"
            f"/+{x[f'{n}_rss_increase_mib']:.0f}"
            for n in ("sender", "receiver")
        ]
        lines.append(
            f"{row.name.removeprefix(SNAPSHOT_PREFIX):<10}{x['data_bytes'] / MB:>10.1f}"
            f"{x['seconds']:>9.2f}{x['mb_per_s']:>8.1f}{sides[0]:>28}{sides[1]:>30}"
            f"{'yes' if x['snapshot'] else 'NO':>10}"
        )
    return "\n".join(lines)
