"""Storage pod settings: one frozen object, every limit with its unit."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cairn.common.keyorder import KeyOrder

MiB = 1024 * 1024


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
    # Version headers kept in memory per shard (about 150 bytes each).
    max_cached_headers_per_shard: int = 200_000


@dataclass(frozen=True, slots=True)
class NamespaceConfig:
    name: str = "default"
    initial_shard_count: int = 1
    key_order: KeyOrder = KeyOrder.HIERARCHICAL


@dataclass(frozen=True, slots=True)
class StandaloneConfig:
    data_dir: Path
    bind_host: str = "127.0.0.1"
    port: int = 0
    # The address clients are told to dial; derived from the bound port if None.
    advertised_address: str | None = None
    namespaces: tuple[NamespaceConfig, ...] = (NamespaceConfig(),)
    limits: Limits = field(default_factory=Limits)
    wal_segment_size_bytes: int = 64 * MiB
