"""What a shard replica counts, for GetStatus and the pod's metrics (metrics.py).

Plain ints and fixed-bucket latency counters: one add per event, on the event
loop, read by a scrape."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn.common.telemetry import LatencyCounter

# Snapshot transfers last seconds to minutes: their own bucket bounds, in seconds.
SNAPSHOT_DURATION_BOUNDS_S = (1.0, 5.0, 15.0, 60.0, 300.0, 1800.0)


def _snapshot_durations() -> LatencyCounter:
    return LatencyCounter(SNAPSHOT_DURATION_BOUNDS_S)


@dataclass(slots=True)
class ShardCounters:
    # Client requests taken in since the replica started, and the operations in
    # them: operations per request is what client-side batching achieves, seen
    # from the server.
    write_requests: int = 0
    write_operations: int = 0
    read_requests: int = 0
    read_gets: int = 0
    # Range scans served and the records they sent (primary or through an index):
    # what a reader that pushes a key range down is seen to read.
    scan_requests: int = 0
    scan_records: int = 0
    # Notification batches sent to subscribers, and their serialized bytes: a
    # filtered subscriber (key prefixes) is sent fewer.
    notification_batches_sent: int = 0
    notification_bytes_sent: int = 0
    write_latency: LatencyCounter = field(default_factory=LatencyCounter)
    read_latency: LatencyCounter = field(default_factory=LatencyCounter)
    # WAL appends (the write into the page cache; the fsync is wal_sync_latency):
    # one per entry as leader, one per received batch as follower.
    wal_append_latency: LatencyCounter = field(default_factory=LatencyCounter)
    wal_sync_latency: LatencyCounter = field(default_factory=LatencyCounter)
    wal_trims: int = 0
    # Entries that folded client writes, the writes and their operations (folding.py).
    folds: int = 0
    folded_requests: int = 0
    folded_operations: int = 0
    # Snapshots this replica installed.
    snapshots_started: int = 0
    snapshots_completed: int = 0
    snapshot_bytes: int = 0
    snapshot_latency: LatencyCounter = field(default_factory=_snapshot_durations)
    # Snapshots it sent as leader (replication/sender.py counts them here, on the
    # replica, so that they outlive the leader role that sent them).
    snapshots_sent_started: int = 0
    snapshots_sent_completed: int = 0
    snapshots_sent_failed: int = 0
    snapshot_sent_bytes: int = 0
    snapshot_send_latency: LatencyCounter = field(default_factory=_snapshot_durations)
