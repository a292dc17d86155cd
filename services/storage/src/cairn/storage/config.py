"""Storage pod settings: one frozen object, every limit with its unit."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cairn.common.auth.config import AuthConfig
from cairn.common.hashing import MAX_SHARDS_PER_NAMESPACE
from cairn.common.identity import DEFAULT_TRUST_DOMAIN
from cairn.common.keyorder import KeyOrder
from cairn.storage.core.retention import WalRetention
from cairn.storage.core.shard_core import PipelineLimits

MiB = 1024 * 1024
DEFAULT_WAL_SEGMENT_BYTES = 64 * MiB
# Zero-filled room kept ahead of each WAL's write position (see cairn.storage.wal):
# fdatasync of records written over it is much faster than of plain appends
# (measurements: docs/performance.md, "WAL zero-filled room").
DEFAULT_WAL_ZERO_FILL_BYTES = 1 * MiB
# Trimmed WAL segment files kept for reuse, per shard (see WalOptions).
DEFAULT_WAL_SPARE_SEGMENTS = 8
DEFAULT_WAL_RETENTION_BYTES = 256 * MiB
DEFAULT_WAL_RETENTION_MS = 60 * 60 * 1000

DEFAULT_NAMESPACE = "default"
MAX_NAMESPACE_NAME_CHARS = 128
# Letters, digits and `._-/` (Oxia users name namespaces like "dray/<cluster-id>"),
# starting with a letter or digit. No `:` (the --namespace-spec separator) and no `*`
# (the all-namespaces request, see ShardDirectory.assignments).
_NAMESPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what a client may send and on what the server holds in memory."""

    max_key_bytes: int = 16 * 1024
    max_value_bytes: int = 4 * MiB
    max_operations_per_request: int = 10_000
    # gRPC refuses larger messages before they reach us.
    max_message_bytes: int = 64 * MiB
    # Write requests accepted but not yet answered, per shard: further writers wait.
    max_pending_entries_per_shard: int = 4096
    max_pending_bytes_per_shard: int = 256 * MiB
    # Folding (folding.py): with at least this many entries uncommitted, a leader
    # collects plain writes into one entry logged at the next commit step, up to
    # these bounds. At 1 rather than 2, rf=3 peaked higher at less pod CPU a put
    # (more requests an entry), and half-rate p99 varied between runs more than
    # between the two (measurements: docs/performance.md, "Folding threshold").
    fold_writes_after_uncommitted_entries: int = 1
    max_operations_per_fold: int = 1000
    max_bytes_per_fold: int = 1 * MiB
    # Requests in flight on one WriteStream before it stops reading from the client.
    max_inflight_per_write_stream: int = 256
    # Entries applied to the KV in one RocksDB batch, and the operations in them: the
    # loop serves no read while it applies, so a group must stay short (~10 ms here).
    max_entries_per_apply_batch: int = 512
    max_operations_per_apply_batch: int = 2000
    # Stream chunking for List / RangeScan / Read.
    max_keys_per_list_chunk: int = 1000
    max_records_per_scan_chunk: int = 1000
    max_bytes_per_chunk: int = 1 * MiB
    max_gets_per_read_chunk: int = 100
    max_concurrent_rpcs: int = 10_000
    # Notifications are kept at least this long (judged by entry timestamps).
    notification_retention_ms: int = 60 * 60 * 1000
    max_notification_batches_trimmed_per_entry: int = 1000
    # Stored notification batches read per step of a GetNotifications stream.
    max_notification_batches_per_read: int = 256
    # A filtered subscription (notification_filter.py): its key prefixes (each at
    # most max_key_bytes), and how often at most it is told the offset reached past
    # entries it was not sent.
    max_prefixes_per_subscription: int = 64
    notification_progress_interval_ms: int = 1000
    # Version headers kept in memory per shard (about 150 bytes each).
    max_cached_headers_per_shard: int = 200_000
    # Answers to exact-key gets a leader keeps in memory per shard (read_cache.py),
    # bounded by count and by their serialized bytes; either at 0 turns it off. Each
    # entry also costs about 120 bytes plus its key's length that are not counted (two
    # bytes objects, a dict slot; measured with tracemalloc): some 30 MiB at the
    # default count with keys of about 20 bytes.
    max_read_cache_entries_per_shard: int = 200_000
    max_read_cache_bytes_per_shard: int = 64 * MiB
    # What one principal (an authenticated caller; everyone is "user:anonymous" with
    # auth off), and everyone together, may hold open on one pod: sessions (counted
    # on the shards this pod leads), GetNotifications and GetSequenceUpdates streams.
    # The pod totals stay under max_concurrent_rpcs, so one client filling its
    # streams still leaves room for other calls.
    max_sessions_per_principal: int = 10_000
    max_sessions_per_pod: int = 100_000
    max_notification_streams_per_principal: int = 1_000
    max_notification_streams_per_pod: int = 4_000
    max_sequence_streams_per_principal: int = 1_000
    max_sequence_streams_per_pod: int = 4_000

    def __post_init__(self) -> None:
        if (
            min(
                self.fold_writes_after_uncommitted_entries,
                self.max_operations_per_fold,
                self.max_bytes_per_fold,
            )
            < 1
        ):
            # 0 uncommitted entries would fold with nothing to commit: never logged.
            raise ValueError("folding bounds must be at least 1")
        if min(self.max_read_cache_entries_per_shard, self.max_read_cache_bytes_per_shard) < 0:
            raise ValueError("read cache bounds must be >= 0")

    def pipeline(self) -> PipelineLimits:
        """The per-shard bounds the shard core keeps to."""
        return PipelineLimits(
            max_pending_entries=self.max_pending_entries_per_shard,
            max_pending_bytes=self.max_pending_bytes_per_shard,
            max_entries_per_apply=self.max_entries_per_apply_batch,
            max_operations_per_apply=self.max_operations_per_apply_batch,
            fold_after_uncommitted_entries=self.fold_writes_after_uncommitted_entries,
            max_operations_per_fold=self.max_operations_per_fold,
            max_bytes_per_fold=self.max_bytes_per_fold,
        )


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """Bounds and timings of leader -> follower replication."""

    # Entries, and bytes of entries, in flight to a follower: sent beyond what it
    # acknowledged as durable. Never measured from what it applied or from the
    # commit offset (core/replication/leader.py says why).
    max_in_flight_entries: int = 1024
    max_in_flight_bytes: int = 64 * MiB
    # Bytes of entries in one Replicate message (one entry larger than this goes alone).
    max_entries_bytes_per_message: int = 4 * MiB
    # A leader's applied changes kept until every follower's stream carried them
    # (applied_changes.py), and a follower's stash of them: groups and bytes, per
    # shard. A follower further behind applies its entries itself.
    max_applied_changes_groups: int = 64
    max_applied_changes_bytes: int = 8 * MiB
    # Snapshot chunks: records and bytes per chunk.
    max_snapshot_chunk_records: int = 10_000
    max_snapshot_chunk_bytes: int = 1 * MiB
    # A follower that cannot be reached is retried after a delay that doubles from
    # the first value up to the second.
    reconnect_initial_delay_s: float = 0.05
    reconnect_max_delay_s: float = 1.0
    # Deadline of a Truncate call (a follower that hangs is retried).
    truncate_timeout_s: float = 5.0
    # How long RemoveFollower waits for the other members to catch up with
    # entries committed with the leaving one (core/replication/quorum.py) before
    # calling the removal off; below the controller's call deadline (5 s).
    removal_wait_s: float = 3.0
    # How long a read waits for a new leader to finish taking over (or for a
    # leader to renew its lease) before it answers UNAVAILABLE.
    leader_ready_timeout_s: float = 5.0
    # The leader's lease (core/replication/lease.py): it answers reads and session
    # keep-alives only while a majority of its voters answered a message it sent
    # within this long, and a new leader with followers serves only after
    # takeover_wait_ms of it. Idle streams carry a heartbeat this often.
    leader_lease_ms: int = 1000
    lease_heartbeat_ms: int = 250
    # The assumed bound on how far two pods' clock rates differ, each way.
    max_clock_drift: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.lease_heartbeat_ms < self.leader_lease_ms:
            raise ValueError("heartbeats must come more often than the lease lasts")


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """What a shard replica's data means, fixed when the shard is created."""

    namespace: str = "default"
    key_order: KeyOrder = KeyOrder.HIERARCHICAL
    # A serving switch, not part of the data: a restart may flip it.
    notifications_enabled: bool = True


def namespace_name_problem(name: str) -> str | None:
    """Why `name` cannot name a namespace, or None if it can."""
    if not name:
        return "a namespace name must not be empty"
    if len(name) > MAX_NAMESPACE_NAME_CHARS:
        return f"namespace name {name[:20]!r}... is longer than {MAX_NAMESPACE_NAME_CHARS} chars"
    if _NAMESPACE_NAME.fullmatch(name) is None:
        return (
            f"namespace name {name!r} must start with a letter or digit and hold only "
            "letters, digits, '.', '_', '-' and '/'"
        )
    return None


@dataclass(frozen=True, slots=True)
class NamespaceConfig:
    name: str = DEFAULT_NAMESPACE
    initial_shard_count: int = 1
    key_order: KeyOrder = KeyOrder.HIERARCHICAL
    # Whether the shards record change notifications; a serving switch, not part of
    # the data layout, so a restart may flip it.
    notifications_enabled: bool = True

    def __post_init__(self) -> None:
        problem = namespace_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        if not 1 <= self.initial_shard_count <= MAX_SHARDS_PER_NAMESPACE:
            raise ValueError(
                f"namespace {self.name!r}: shard count must be between 1 and "
                f"{MAX_SHARDS_PER_NAMESPACE}, got {self.initial_shard_count}"
            )


@dataclass(frozen=True, slots=True)
class StandaloneConfig:
    data_dir: Path
    bind_host: str = "127.0.0.1"
    port: int = 0
    # The address clients are told to dial; derived from the bound port if None.
    advertised_address: str | None = None
    # Namespaces to serve, in order; names unique. A namespace the data directory
    # already holds keeps being served even when it is missing here.
    namespaces: tuple[NamespaceConfig, ...] = (NamespaceConfig(),)
    limits: Limits = field(default_factory=Limits)
    # Who may call the public API (cairn.common.auth.config); off unless given.
    auth: AuthConfig = field(default_factory=AuthConfig)
    wal_segment_size_bytes: int = DEFAULT_WAL_SEGMENT_BYTES
    wal_zero_fill_bytes: int = DEFAULT_WAL_ZERO_FILL_BYTES
    wal_spare_segments: int = DEFAULT_WAL_SPARE_SEGMENTS
    # Once a shard's WAL is larger than this, or its entries older, the segments the
    # KV durably holds are deleted (the active segment always stays).
    wal_retention: WalRetention = field(
        default_factory=lambda: WalRetention(DEFAULT_WAL_RETENTION_BYTES, DEFAULT_WAL_RETENTION_MS)
    )
    # The server's certificate directory (cert-manager layout); None: plaintext.
    tls_dir: Path | None = None
    # Whose SPIFFE URIs name principals here (a client certificate of another trust
    # domain names nobody).
    trust_domain: str = DEFAULT_TRUST_DOMAIN

    def __post_init__(self) -> None:
        if self.wal_segment_size_bytes < 4096:
            raise ValueError("WAL segments must be at least 4096 bytes")
        if not self.namespaces:
            raise ValueError("at least one namespace must be configured")
        names = [namespace.name for namespace in self.namespaces]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"namespace names must be unique: {', '.join(duplicates)} repeated")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A storage pod in a cluster: its shards are handed out by the controller."""

    data_dir: Path
    bind_host: str = "127.0.0.1"
    # Client API (Oxia-compatible) and internal API (coordination, replication);
    # 0 picks a free port.
    port: int = 0
    internal_port: int = 0
    # What clients and other pods are told to dial; derived from the bound ports if None.
    advertised_address: str | None = None
    internal_advertised_address: str | None = None
    limits: Limits = field(default_factory=Limits)
    # Who may call the public API (cairn.common.auth.config); off unless given.
    auth: AuthConfig = field(default_factory=AuthConfig)
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)
    wal_segment_size_bytes: int = DEFAULT_WAL_SEGMENT_BYTES
    wal_zero_fill_bytes: int = DEFAULT_WAL_ZERO_FILL_BYTES
    wal_spare_segments: int = DEFAULT_WAL_SPARE_SEGMENTS
    wal_retention: WalRetention = field(
        default_factory=lambda: WalRetention(DEFAULT_WAL_RETENTION_BYTES, DEFAULT_WAL_RETENTION_MS)
    )
    # The pod's certificate directory (cert-manager layout: tls.crt, tls.key, ca.crt).
    # Given: the internal port is mutual TLS (callers need a certificate from the
    # CA, and their role decides what they may call) and the public port serves
    # TLS, unless `public_plaintext`. None: both ports plaintext (chosen
    # explicitly by the command line's --insecure; tests build it directly).
    tls_dir: Path | None = None
    public_plaintext: bool = False
    # Whose SPIFFE URIs name principals here, on both ports.
    trust_domain: str = DEFAULT_TRUST_DOMAIN
