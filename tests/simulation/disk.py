"""A simulated disk for the storage pod's own driver (shard.py) on the virtual
loop: a WAL and a KV with the real ones' contracts that lose on a power loss
what those contracts do not promise to keep, and disk work that takes virtual
time.

- The WAL (wal/log.py): appends are volatile until `sync`; `truncate_after`,
  `trim_before` and `reset` are durable when they return (and a cut leaves
  everything before it durable).
- The KV (RocksDB as kv/rocks.py uses it): a `write` goes through RocksDB's own
  log and is durable once `sync` returns; `write_unlogged` (how entries are
  applied) only once `persist` (a memtable flush) returns.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from cairn.common.errors import CairnError
from cairn.storage.core.entries import LogEntry
from cairn.storage.core.replication.terms import NO_OFFSET, NO_TERM
from cairn.storage.kv import MemoryKv
from cairn.storage.kv.encoded_changes import decode_changes
from cairn.storage.kv.store import Change, Column, ColumnChanges

T = TypeVar("T")


class DiskGone(Exception):
    """The process that used this disk is gone (it lost power)."""


def ignore_lost_power(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The exception handler of a pod's loop: its tasks are dropped where they
    stood when it loses power, and calls that failed because a peer is gone
    are the sender's to retry; anything else is reported."""
    if not isinstance(context.get("exception"), DiskGone | CairnError | None):
        loop.default_exception_handler(context)


class SimWal:
    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        # The offset of the next entry, once known (a new log takes any).
        self._next_offset: int | None = None
        self._synced_offset = NO_OFFSET
        self._open = True
        # Set while a sync that started earlier finishes: what it covers.
        self.sync_limit: int | None = None
        # Set while its syncs are held back (a stalled disk, in scripted runs).
        self.syncs_held = False

    # -- state --------------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        return self._entries[0].offset if self._entries else NO_OFFSET

    @property
    def last_offset(self) -> int:
        if self._entries:
            return self._entries[-1].offset
        return NO_OFFSET if self._next_offset is None else self._next_offset - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else NO_TERM

    @property
    def synced_offset(self) -> int:
        return self._synced_offset

    def total_size_bytes(self) -> int:
        return sum(len(entry.payload) for entry in self._entries)

    def segment_count(self) -> int:
        return 1

    # -- writes -------------------------------------------------------------------------

    def append(self, entry: LogEntry) -> None:
        self.append_many((entry,))

    def append_many(self, entries: Sequence[LogEntry]) -> None:
        self._check_open()
        expected = self._next_offset
        for entry in entries:
            if expected is not None and entry.offset != expected:
                raise ValueError(f"entry at {entry.offset}, the log expects {expected}")
            expected = entry.offset + 1
        self._entries.extend(entries)
        self._next_offset = expected

    def sync(self) -> int:
        self._check_open()
        covered = self.last_offset if self.sync_limit is None else self.sync_limit
        self._synced_offset = max(self._synced_offset, min(covered, self.last_offset))
        return self._synced_offset

    def truncate_after(self, offset: int) -> None:
        self._check_open()
        if offset >= self.last_offset:
            return
        first = self.first_offset
        del self._entries[max(0, offset + 1 - first) if self._entries else 0 :]
        self._next_offset = offset + 1
        self._synced_offset = self.last_offset

    def trim_before(self, offset: int) -> int:
        """Entries before `offset` go; the last one always stays (the real WAL
        never trims its active segment)."""
        self._check_open()
        while len(self._entries) > 1 and self._entries[0].offset < offset:
            del self._entries[0]
        return self.first_offset

    def reset(self, next_offset: int) -> None:
        self._check_open()
        self._entries.clear()
        self._next_offset = next_offset
        self._synced_offset = next_offset - 1

    def close(self) -> None:
        self._open = False

    def reopen(self) -> SimWal:
        """The same disk, opened again by a restarted process."""
        self._open = True
        return self

    def lose_power(self) -> None:
        """What was appended and not synced is gone; the process using the disk
        is gone too (its calls fail)."""
        self._entries = [entry for entry in self._entries if entry.offset <= self._synced_offset]
        if self._entries:
            self._next_offset = self._entries[-1].offset + 1
        elif self._next_offset is not None:
            self._next_offset = self._synced_offset + 1
        self._open = False

    # -- reads --------------------------------------------------------------------------

    def read(self, from_offset: int, to_offset: int | None = None) -> Iterator[LogEntry]:
        self._check_open()
        if self._entries and from_offset < self.first_offset:
            raise ValueError(f"offset {from_offset} is before the start of the log")
        last = self.last_offset if to_offset is None else min(to_offset, self.last_offset)
        return iter([self.get(offset) for offset in range(from_offset, last + 1)])

    def get(self, offset: int) -> LogEntry:
        self._check_open()
        if not self._entries or not self.first_offset <= offset <= self.last_offset:
            raise KeyError(offset)
        return self._entries[offset - self.first_offset]

    def _check_open(self) -> None:
        if not self._open:
            raise DiskGone("the WAL is closed")


# How often a held sync looks whether it may go (simulated time).
HELD_POLL_S = 0.001


class VirtualDiskWork:
    """Disk work on `wal`'s disk that takes `latency_ms` of virtual time (an
    fsync's) and acts when it ends: a power loss meanwhile means it did not
    happen. A sync covers what was appended before it started, not what is
    appended while it runs (as wal/log.py's does)."""

    def __init__(self, wal: SimWal, latency_ms: Callable[[], float]) -> None:
        self._wal = wal
        self._latency_ms = latency_ms

    async def run(self, work: Callable[[], T]) -> T:
        appended = self._wal.last_offset
        await asyncio.sleep(self._latency_ms() / 1000)
        # Polled: on simulated time that costs nothing, and an Event would belong
        # to one process's loop while the disk outlives them.
        while work == self._wal.sync and self._wal.syncs_held:  # noqa: ASYNC110
            await asyncio.sleep(HELD_POLL_S)
        self._wal.sync_limit = appended
        try:
            return work()
        finally:
            self._wal.sync_limit = None

    def close(self) -> None:
        pass


def _record_hash(key: bytes, value: bytes) -> int:
    digest = hashlib.blake2b(key, digest_size=8)
    digest.update(b"\0" + value)
    return int.from_bytes(digest.digest(), "big")


class SimKv(MemoryKv):
    """A power loss keeps the state as of the last `persist`, plus the logged
    writes synced since (RocksDB replays its own log over its flushed files).
    `records_digest` sums up the records column (kept as it changes), for
    comparing replicas' states at no cost."""

    def __init__(self) -> None:
        super().__init__()
        self.records_digest = 0
        self._open = True
        self._persisted: list[Change] = []
        # Logged writes since the last persist, and how many of them are synced.
        self._logged: list[list[Change]] = []
        self._synced = 0

    def write(self, changes: Sequence[Change]) -> None:
        self._check_open()
        self._apply(changes)
        self._logged.append(list(changes))

    def write_unlogged(self, changes: ColumnChanges) -> None:
        self._check_open()
        self._apply(
            [
                (column, key, value)
                for column, items in changes.items()
                for key, value in items.items()
            ]
        )

    def write_encoded_unlogged(self, encoded: bytes) -> None:
        self._check_open()
        self._apply(list(decode_changes(encoded)))

    def _apply(self, changes: Sequence[Change]) -> None:
        digest = self.records_digest
        # A key may change twice in one batch: its value before the second change
        # is the first's.
        batch: dict[bytes, bytes | None] = {}
        for column, key, value in changes:
            if column is not Column.RECORDS:
                continue
            old = batch[key] if key in batch else self.get(column, key)
            batch[key] = value
            if old is not None:
                digest ^= _record_hash(key, old)
            if value is not None:
                digest ^= _record_hash(key, value)
        self.records_digest = digest
        super().write(changes)

    def sync(self) -> None:
        self._check_open()
        self._synced = len(self._logged)

    def persist(self) -> None:
        self._check_open()
        self._persisted = [
            (column, key, value) for column in Column for key, value in self.scan(column, b"", None)
        ]
        self._logged.clear()
        self._synced = 0

    def lose_power(self) -> None:
        """What the contract does not keep is gone; so is the process that used
        the KV (its writes fail until `reopen`)."""
        kept = self._logged[: self._synced]
        MemoryKv.__init__(self)
        self.records_digest = 0
        self._apply(self._persisted)
        for changes in kept:
            self._apply(changes)
        self._logged = kept
        self._open = False

    def reopen(self) -> SimKv:
        self._open = True
        return self

    def _check_open(self) -> None:
        if not self._open:
            raise DiskGone("the KV is closed")
