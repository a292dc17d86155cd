"""The storage pod's I/O as a shard's driver (shard.py) uses it: small ports, so
that one driver runs over the real WAL, RocksDB and worker threads, or over a
simulated disk on a virtual clock (tests/simulation).

    LogStore   the write-ahead log (wal/log.py's Wal)
    KvStore    the key-value store (kv/store.py; RocksKv, MemoryKv)
    DiskWork   where blocking disk work runs (fsync, a cut, a trim) off the loop
    Peers      channels to the other pods (replication/peers.py)
    ReplicaFiles  where the KV and log live, opened again after a snapshot
               install replaced them (shard_files.py)
    LeaderRole what a replica runs while it leads: its followers' streams and
               the lease (replication/leader.py's ReplicatingLeader)
    clocks     plain callables returning milliseconds (clock.py)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import grpc

from cairn.proto.replication_pb2 import FollowerStatus, SnapshotChunk
from cairn.storage.core.entries import LogEntry
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.kv.store import KvStore

T = TypeVar("T")


class LogStore(Protocol):
    """Entries at consecutive offsets; appends are volatile until `sync`, every
    other change is durable when it returns (the contract of wal/log.py)."""

    @property
    def first_offset(self) -> int:
        """The first entry's offset; -1 if the log is empty."""

    @property
    def last_offset(self) -> int:
        """The last entry's offset; -1 if empty, next offset - 1 after a reset."""

    @property
    def last_term(self) -> int: ...

    @property
    def synced_offset(self) -> int:
        """Every entry up to here survives a power loss."""

    def append(self, entry: LogEntry) -> None: ...

    def append_many(self, entries: Sequence[LogEntry]) -> None: ...

    def sync(self) -> int:
        """Make everything appended so far durable; returns the synced offset."""

    def truncate_after(self, offset: int) -> None: ...

    def trim_before(self, offset: int) -> int:
        """Forget entries before `offset` (as far as whole segments allow);
        returns the new first offset."""

    def reset(self, next_offset: int) -> None:
        """Drop every entry; the next one appended is at `next_offset`."""

    def read(self, from_offset: int, to_offset: int | None = None) -> Iterator[LogEntry]: ...

    def get(self, offset: int) -> LogEntry:
        """The entry at `offset`; KeyError if there is none."""

    def total_size_bytes(self) -> int: ...

    def segment_count(self) -> int: ...

    def close(self) -> None: ...


class DiskWork(Protocol):
    """Runs blocking disk work and waits for it without blocking the loop."""

    async def run(self, work: Callable[[], T]) -> T: ...

    def close(self) -> None:
        """Wait for work under way, take no more."""


class ThreadDiskWork:
    """Disk work in worker threads of its own: one per shard for its syncs, so
    that a sync never waits behind another shard's."""

    def __init__(self, name: str, threads: int = 1) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)

    async def run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class Peers(Protocol):
    """A channel to each other pod, by internal address, reused."""

    def get(self, address: str) -> grpc.aio.Channel: ...


class SnapshotInstall(Protocol):
    """One snapshot stream being received (snapshot.py's SnapshotInstaller)."""

    def add(self, chunk: SnapshotChunk) -> None: ...

    def finish(self) -> EntryId:
        """Verify the stream and install it (the replica's KV and log closed);
        the last entry it includes."""
        ...

    def abort(self) -> None: ...


class ReplicaFiles(Protocol):
    """Where a replica's KV and log live (shard_files.py's ShardFiles on a pod):
    opened again after a snapshot replaced them."""

    def open(self) -> tuple[KvStore, LogStore]: ...

    def installer(self, local_meta: Sequence[tuple[bytes, bytes]]) -> SnapshotInstall:
        """A snapshot install; `local_meta`: this replica's own META records,
        kept through it."""
        ...


class LeaderRole(Protocol):
    """What a replica runs while it leads (replication/leader.py): its
    followers' streams, woken when there is more to send, and the lease. The
    term's quorum (LeaderCore) is the shard core's (ShardCore.leading); what
    the followers acknowledge comes back through `commit_counted`."""

    # When it may serve (any older leader's lease is over), by `clock_ms`.
    serves_from_ms: int

    def clock_ms(self) -> int: ...

    def lease_holds(self) -> bool: ...

    async def renew_lease(self, timeout_s: float) -> bool: ...

    def entries_appended(self) -> None: ...

    def own_durability_counted(self) -> None: ...

    async def stop(self) -> None: ...

    def follower_status(self) -> list[FollowerStatus]: ...
