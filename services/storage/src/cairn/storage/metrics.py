"""A storage pod's metrics: read from its shard replicas when a scrape (or an OTLP
export) collects, never counted through OTel on the request path.

The replicas count in plain ints and `LatencyCounter`s (shard.py, rpc/client_api.py,
rpc/status.py); once per collection a snapshot of every replica is taken on the event
loop (`LoopSnapshot`: the loop is what changes them), and the observable callbacks read
that. Labels: `namespace` and `shard` (bounded by the shards this pod hosts), `follower`
(bounded by the ensemble), `reason` (bounded by the error tree).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from cairn.common.errors import CairnError
from cairn.common.telemetry import LatencyCounter, LoopSnapshot, Telemetry
from cairn.proto import replication_pb2 as rpb
from cairn.storage.directory import ShardDirectory
from cairn.storage.rpc.client_api import ClientService
from cairn.storage.rpc.status import REJECTED_BY_REASON
from cairn.storage.shard import ShardReplica

log = logging.getLogger(__name__)

_ROLES = {1: "fenced", 2: "follower", 3: "leader"}
# RocksDB properties summed over a shard's column families (bytes, except stalls).
ROCKSDB_PROPERTIES = {
    "memtable": "rocksdb.cur-size-all-mem-tables",
    "pending_compaction": "rocksdb.estimate-pending-compaction-bytes",
    "live_data": "rocksdb.estimate-live-data-size",
    "write_stopped": "rocksdb.is-write-stopped",
    "delayed_write_rate": "rocksdb.actual-delayed-write-rate",
}
# Of the database as a whole: its block cache.
ROCKSDB_BLOCK_CACHE = "rocksdb.block-cache-usage"


def _reasons(error: type[CairnError]) -> set[str]:
    found = {error.reason}
    for subclass in error.__subclasses__():
        found |= _reasons(subclass)
    return found


# Every reason of the error tree at 0, so that each has a series before its first
# rejection (rate() and alerts see the first one too).
_NO_REJECTIONS = dict.fromkeys(sorted(_reasons(CairnError)), 0)


@dataclass
class ShardSample:
    """One replica's figures at one collection."""

    labels: dict[str, Any]
    role: str
    term: int
    head_offset: int
    commit_offset: int
    durable_offset: int
    applied_offset: int
    first_offset: int
    write_requests: int
    write_operations: int
    read_requests: int
    read_gets: int
    scan_requests: int
    scan_records: int
    notification_batches_sent: int
    notification_bytes_sent: int
    sessions: int
    read_cache_entries: int
    read_cache_bytes: int
    read_cache_lookups: int
    read_cache_misses: int
    wal_bytes: int
    wal_segments: int
    wal_trims: int
    sessions_created: int
    sessions_expired: int
    folds: int
    folded_requests: int
    folded_operations: int
    snapshots_started: int
    snapshots_completed: int
    snapshot_bytes: int
    snapshots_sent_started: int
    snapshots_sent_completed: int
    snapshots_sent_failed: int
    snapshot_sent_bytes: int
    # follower internal address -> (lag in entries, lag in seconds)
    followers: dict[str, tuple[int, float]] = field(default_factory=dict)
    rocksdb: dict[str, int] = field(default_factory=dict)


def _follower_lag(
    replica: ShardReplica, follower: rpb.FollowerStatus, now_ms: int
) -> tuple[int, float]:
    """Entries the leader holds that the follower has not acknowledged as durable,
    and the age of the oldest of them (0 when caught up)."""
    head = replica.core.head.offset
    lag = max(0, head - follower.acked_offset)
    if not lag:
        return 0, 0.0
    try:
        (oldest,) = replica.entries(follower.acked_offset + 1, follower.acked_offset + 1, 0)[:1]
    except (ValueError, KeyError):  # trimmed (the follower needs a snapshot)
        return lag, 0.0
    return lag, max(0.0, (now_ms - oldest.timestamp_ms) / 1000.0)


def _rocksdb(replica: ShardReplica) -> dict[str, int]:
    properties: Callable[..., int | None] | None = getattr(replica.kv, "int_property", None)
    if properties is None:  # an in-memory KV (tests)
        return {}
    found: dict[str, int] = {}
    for name, rocks_name in ROCKSDB_PROPERTIES.items():
        value = properties(rocks_name)
        if value is not None:
            found[name] = value
    block_cache = properties(ROCKSDB_BLOCK_CACHE, True)
    if block_cache is not None:
        found["block_cache"] = block_cache
    return found


def sample(replica: ShardReplica, now_ms: int) -> ShardSample:
    core = replica.core
    cache = replica.read_cache
    wal = replica.wal
    followers: dict[str, tuple[int, float]] = {}
    leader = replica.leader_role
    if leader is not None:
        for follower in leader.follower_status():
            followers[follower.node.internal_address] = _follower_lag(replica, follower, now_ms)
    return ShardSample(
        labels={"namespace": replica.namespace, "shard": replica.shard_id},
        role=_ROLES.get(int(core.role), "not_member"),
        term=core.term,
        head_offset=core.head.offset,
        commit_offset=core.commit_offset,
        durable_offset=replica.durable_offset,
        applied_offset=replica.applied_offset,
        first_offset=core.log.first_offset,
        write_requests=replica.counters.write_requests,
        write_operations=replica.counters.write_operations,
        read_requests=replica.counters.read_requests,
        read_gets=replica.counters.read_gets,
        scan_requests=replica.counters.scan_requests,
        scan_records=replica.counters.scan_records,
        notification_batches_sent=replica.counters.notification_batches_sent,
        notification_bytes_sent=replica.counters.notification_bytes_sent,
        sessions=len(replica.sessions),
        read_cache_entries=len(cache),
        read_cache_bytes=cache.held_bytes,
        read_cache_lookups=cache.lookups,
        read_cache_misses=cache.misses,
        wal_bytes=wal.total_size_bytes(),
        wal_segments=wal.segment_count(),
        wal_trims=replica.counters.wal_trims,
        sessions_created=replica.sessions.created,
        sessions_expired=replica.sessions.expired,
        folds=replica.counters.folds,
        folded_requests=replica.counters.folded_requests,
        folded_operations=replica.counters.folded_operations,
        snapshots_started=replica.counters.snapshots_started,
        snapshots_completed=replica.counters.snapshots_completed,
        snapshot_bytes=replica.counters.snapshot_bytes,
        snapshots_sent_started=replica.counters.snapshots_sent_started,
        snapshots_sent_completed=replica.counters.snapshots_sent_completed,
        snapshots_sent_failed=replica.counters.snapshots_sent_failed,
        snapshot_sent_bytes=replica.counters.snapshot_sent_bytes,
        followers=followers,
        rocksdb=_rocksdb(replica),
    )


@dataclass
class PodSample:
    shards: list[ShardSample]
    notification_subscribers: dict[int, int]
    sequence_subscribers: dict[int, int]
    misrouted_writes: dict[int, int]
    rejected: dict[str, int]
    shard_labels: dict[int, dict[str, Any]]


class StorageMetrics:
    """Registers a pod's instruments on `telemetry`; `replicas()` lists its replicas."""

    def __init__(
        self,
        telemetry: Telemetry,
        directory: ShardDirectory,
        service: ClientService,
        loop: Any,
        data_dir: Path | None = None,
    ) -> None:
        """`data_dir`: the pod's data directory, whose file system's space is published
        (what "disk nearly full" is measured on)."""
        self.directory = directory
        self.service = service
        self.data_dir = data_dir
        self._snapshot = LoopSnapshot(self._take, loop)
        telemetry.before_collect(self._snapshot.invalidate)
        self._register(telemetry)

    def _take(self) -> PodSample:
        now_ms = int(time.time() * 1000)
        shards: list[ShardSample] = []
        for replica in self.directory.replicas():
            try:
                shards.append(sample(replica, now_ms))
            except Exception:  # a replica closing meanwhile: skip it this time
                log.debug("shard %d: no metrics sample", replica.shard_id, exc_info=True)
        return PodSample(
            shards=shards,
            notification_subscribers=dict(self.service.notification_subscribers),
            sequence_subscribers=dict(self.service.sequence_subscribers),
            misrouted_writes=dict(self.service.misrouted_writes),
            rejected={**_NO_REJECTIONS, **REJECTED_BY_REASON},
            shard_labels={s.labels["shard"]: s.labels for s in shards},
        )

    # -- registration --------------------------------------------------------------------

    def _per_shard(self, value: Callable[[ShardSample], float]) -> Callable[..., Any]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value(s), s.labels) for s in self._snapshot.get().shards]

        return callback

    def _register(self, telemetry: Telemetry) -> None:
        meter = telemetry.meter
        gauges: list[tuple[str, str, str, Callable[[ShardSample], float]]] = [
            ("cairn.shard.term", "{term}", "the replica's term", lambda s: s.term),
            (
                "cairn.shard.head_offset",
                "{offset}",
                "last offset in the log",
                lambda s: s.head_offset,
            ),
            (
                "cairn.shard.commit_offset",
                "{offset}",
                "highest offset known committed",
                lambda s: s.commit_offset,
            ),
            (
                "cairn.shard.durable_offset",
                "{offset}",
                "highest offset fsynced in the WAL",
                lambda s: s.durable_offset,
            ),
            (
                "cairn.shard.applied_offset",
                "{offset}",
                "highest offset applied to the KV",
                lambda s: s.applied_offset,
            ),
            (
                "cairn.session.active",
                "{session}",
                "sessions the replica tracks",
                lambda s: s.sessions,
            ),
            (
                "cairn.read_cache.entries",
                "{record}",
                "answers the leader's read cache holds",
                lambda s: s.read_cache_entries,
            ),
            (
                "cairn.read_cache.size",
                "By",
                "bytes of answers the leader's read cache holds",
                lambda s: s.read_cache_bytes,
            ),
            ("cairn.wal.size", "By", "bytes in the WAL's segments", lambda s: s.wal_bytes),
            ("cairn.wal.segments", "{segment}", "WAL segment files", lambda s: s.wal_segments),
            (
                "cairn.wal.first_offset",
                "{offset}",
                "first offset the WAL still holds (-1: empty)",
                lambda s: s.first_offset,
            ),
        ]
        for name, unit, description, value in gauges:
            meter.create_observable_gauge(
                name, [self._per_shard(value)], unit=unit, description=description
            )
        counters: list[tuple[str, str, str, Callable[[ShardSample], float]]] = [
            (
                "cairn.shard.write.requests",
                "{request}",
                "client write requests taken in (since the replica opened)",
                lambda s: s.write_requests,
            ),
            (
                "cairn.shard.write.operations",
                "{operation}",
                "puts, deletes and delete ranges in those requests",
                lambda s: s.write_operations,
            ),
            (
                "cairn.shard.read.requests",
                "{request}",
                "client read requests served",
                lambda s: s.read_requests,
            ),
            (
                "cairn.shard.read.operations",
                "{operation}",
                "gets in those requests",
                lambda s: s.read_gets,
            ),
            (
                "cairn.shard.scan.requests",
                "{request}",
                "range scans served",
                lambda s: s.scan_requests,
            ),
            (
                "cairn.shard.scan.records",
                "{record}",
                "records those range scans sent",
                lambda s: s.scan_records,
            ),
            (
                "cairn.notification.batches_sent",
                "{batch}",
                "notification batches sent to subscribers (filtered ones get fewer)",
                lambda s: s.notification_batches_sent,
            ),
            (
                "cairn.notification.sent_bytes",
                "By",
                "serialized bytes of those notification batches",
                lambda s: s.notification_bytes_sent,
            ),
            (
                "cairn.read_cache.hits",
                "{lookup}",
                "gets the read cache answered",
                lambda s: s.read_cache_lookups - s.read_cache_misses,
            ),
            (
                "cairn.read_cache.misses",
                "{lookup}",
                "gets the read cache sent to RocksDB",
                lambda s: s.read_cache_misses,
            ),
            ("cairn.wal.trims", "{trim}", "WAL prefix trims", lambda s: s.wal_trims),
            (
                "cairn.session.created",
                "{session}",
                "sessions created (by this replica as leader)",
                lambda s: s.sessions_created,
            ),
            (
                "cairn.session.expired",
                "{session}",
                "sessions this replica's leader closed for want of heartbeats",
                lambda s: s.sessions_expired,
            ),
            (
                "cairn.snapshot.received",
                "{snapshot}",
                "snapshots this replica began to receive from its leader",
                lambda s: s.snapshots_started,
            ),
            (
                "cairn.snapshot.installed",
                "{snapshot}",
                "snapshots received and installed (the rest of those begun failed or "
                "are in progress)",
                lambda s: s.snapshots_completed,
            ),
            (
                "cairn.snapshot.received_bytes",
                "By",
                "snapshot chunk bytes received",
                lambda s: s.snapshot_bytes,
            ),
            (
                "cairn.snapshot.sent",
                "{snapshot}",
                "snapshots this replica, as leader, began to send to a follower",
                lambda s: s.snapshots_sent_started,
            ),
            (
                "cairn.snapshot.sent_completed",
                "{snapshot}",
                "snapshots sent and installed by the follower",
                lambda s: s.snapshots_sent_completed,
            ),
            (
                "cairn.snapshot.sent_failed",
                "{snapshot}",
                "snapshots whose sending failed (the follower gets a new one)",
                lambda s: s.snapshots_sent_failed,
            ),
            (
                "cairn.snapshot.sent_bytes",
                "By",
                "snapshot chunk bytes sent",
                lambda s: s.snapshot_sent_bytes,
            ),
            (
                "cairn.fold.entries",
                "{entry}",
                "log entries made of collected write requests (folding.py; one or more each)",
                lambda s: s.folds,
            ),
            (
                "cairn.fold.requests",
                "{request}",
                "write requests those entries carried (requests per fold: the ratio)",
                lambda s: s.folded_requests,
            ),
            (
                "cairn.fold.operations",
                "{operation}",
                "puts and deletes those entries carried",
                lambda s: s.folded_operations,
            ),
        ]
        for name, unit, description, value in counters:
            meter.create_observable_counter(
                name, [self._per_shard(value)], unit=unit, description=description
            )
        meter.create_observable_gauge(
            "cairn.shard.role",
            [self._roles],
            unit="1",
            description="1 for the replica's role (leader, follower, fenced)",
        )
        meter.create_observable_gauge(
            "cairn.shard.follower.lag",
            [self._follower_lag(0)],
            unit="{entry}",
            description="entries the leader holds that a follower has not made durable",
        )
        meter.create_observable_gauge(
            "cairn.shard.follower.lag_time",
            [self._follower_lag(1)],
            unit="s",
            description="age of the oldest entry a follower has not made durable",
        )
        meter.create_observable_gauge(
            "cairn.rocksdb.size",
            [self._rocksdb_sizes],
            unit="By",
            description="RocksDB memory and disk by kind (memtable, pending_compaction, "
            "live_data, block_cache)",
        )
        meter.create_observable_gauge(
            "cairn.rocksdb.write_stopped",
            [self._rocksdb_value("write_stopped")],
            unit="1",
            description="1 while RocksDB stops writes (a stall)",
        )
        meter.create_observable_gauge(
            "cairn.rocksdb.delayed_write_rate",
            [self._rocksdb_value("delayed_write_rate")],
            unit="By/s",
            description="the write rate RocksDB slows writes to (0: not delayed)",
        )
        meter.create_observable_up_down_counter(
            "cairn.notification.subscribers",
            [self._subscribers(lambda pod: pod.notification_subscribers)],
            unit="{stream}",
            description="open GetNotifications streams",
        )
        meter.create_observable_up_down_counter(
            "cairn.sequence_updates.subscribers",
            [self._subscribers(lambda pod: pod.sequence_subscribers)],
            unit="{stream}",
            description="open GetSequenceUpdates streams",
        )
        meter.create_observable_counter(
            "cairn.requests.misrouted",
            [self._subscribers(lambda pod: pod.misrouted_writes)],
            unit="{request}",
            description="write requests whose first key the shard map's XXH3 routes to "
            "another shard (a client hashing keys another way)",
        )
        meter.create_observable_counter(
            "cairn.requests.rejected",
            [self._rejected],
            unit="{request}",
            description="requests refused with an error, by reason",
        )
        telemetry.observe_histograms(
            "cairn.shard.write.duration",
            "s",
            "from a write request's arrival to its answer (committed and applied)",
            lambda: self._latencies(lambda r: r.counters.write_latency),
        )
        telemetry.observe_histograms(
            "cairn.shard.read.duration",
            "s",
            "time to answer a read request",
            lambda: self._latencies(lambda r: r.counters.read_latency),
        )
        telemetry.observe_histograms(
            "cairn.snapshot.duration",
            "s",
            "from a snapshot's first chunk to its install, on the receiving replica",
            lambda: self._latencies(lambda r: r.counters.snapshot_latency),
        )
        telemetry.observe_histograms(
            "cairn.snapshot.send.duration",
            "s",
            "from a snapshot's first chunk sent to the follower's answer that it installed it",
            lambda: self._latencies(lambda r: r.counters.snapshot_send_latency),
        )
        telemetry.observe_histograms(
            "cairn.wal.append.duration",
            "s",
            "WAL appends (written, not yet synced): an entry as leader, a batch as follower",
            lambda: self._latencies(lambda r: r.counters.wal_append_latency),
        )
        telemetry.observe_histograms(
            "cairn.wal.sync.duration",
            "s",
            "WAL group syncs (write and fdatasync of every record appended since the last)",
            lambda: self._latencies(lambda r: r.counters.wal_sync_latency),
        )
        telemetry.observe_histograms(
            "rpc.server.call.duration",
            "s",
            "duration of client calls, by method",
            lambda: [
                (
                    {
                        "rpc.system": "grpc",
                        "rpc.service": "io.oxia.proto.v1.OxiaClient",
                        "rpc.method": method,
                    },
                    counter,
                )
                for method, counter in self.service.call_latency.items()
            ],
        )
        telemetry.observe_histograms(
            "cairn.rpc.server.stream.request.duration",
            "s",
            "each request's duration on a client stream (a WriteStream lives as long as "
            "its client: its call duration says nothing), by method",
            lambda: [
                (
                    {
                        "rpc.system": "grpc",
                        "rpc.service": "io.oxia.proto.v1.OxiaClient",
                        "rpc.method": method,
                    },
                    counter,
                )
                for method, counter in self.service.stream_request_latency.items()
            ],
        )
        if self.data_dir is not None:
            meter.create_observable_up_down_counter(
                "cairn.disk.available",
                [self._disk(lambda st: st.f_bavail * st.f_frsize)],
                unit="By",
                description="bytes free for the pod on the file system of its data directory",
            )
            meter.create_observable_up_down_counter(
                "cairn.disk.capacity",
                [self._disk(lambda st: st.f_blocks * st.f_frsize)],
                unit="By",
                description="size of the file system of the pod's data directory",
            )

    def _latencies(
        self, counter: Callable[[ShardReplica], LatencyCounter]
    ) -> list[tuple[dict[str, Any], LatencyCounter]]:
        # The counters themselves are read as they are (lists of ints): their labels
        # come from the snapshot.
        labels = self._snapshot.get().shard_labels
        return [
            (labels[replica.shard_id], counter(replica))
            for replica in self.directory.replicas()
            if replica.shard_id in labels
        ]

    def _roles(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1, {**s.labels, "role": s.role}) for s in self._snapshot.get().shards]

    def _follower_lag(self, index: int) -> Callable[..., Any]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(lag[index], {**s.labels, "follower": follower})
                for s in self._snapshot.get().shards
                for follower, lag in s.followers.items()
            ]

        return callback

    def _rocksdb_sizes(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.rocksdb[kind], {**s.labels, "kind": kind})
            for s in self._snapshot.get().shards
            for kind in ("memtable", "pending_compaction", "live_data", "block_cache")
            if kind in s.rocksdb
        ]

    def _rocksdb_value(self, kind: str) -> Callable[..., Any]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(s.rocksdb[kind], s.labels)
                for s in self._snapshot.get().shards
                if kind in s.rocksdb
            ]

        return callback

    def _subscribers(self, counts: Callable[[PodSample], dict[int, int]]) -> Callable[..., Any]:
        """Counts the service keeps by shard id (open streams, misrouted writes),
        labelled as the shard."""

        def callback(_: CallbackOptions) -> Iterable[Observation]:
            pod = self._snapshot.get()
            # Every hosted shard, 0 when none: a series that appears only with the
            # first event reads as "no data" on a dashboard and hides that event
            # from rate().
            by_shard = counts(pod)
            return [
                Observation(by_shard.get(shard_id, 0), labels)
                for shard_id, labels in pod.shard_labels.items()
            ]

        return callback

    def _disk(self, value: Callable[[os.statvfs_result], int]) -> Callable[..., Any]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            # statvfs is a system call of a few microseconds, on the scrape's thread.
            assert self.data_dir is not None
            try:
                return [Observation(value(os.statvfs(self.data_dir)))]
            except OSError:
                return []

        return callback

    def _rejected(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {"reason": reason})
            for reason, count in self._snapshot.get().rejected.items()
        ]
