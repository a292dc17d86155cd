"""A replica's durable parts in the simulation: a WAL that loses its unsynced tail
on a crash, and a MemoryKv that keeps a running digest of its contents.

Durability contract (the one the runtime must meet, see replica.py):
- `SimLog.append` is volatile until `sync`; a crash drops every entry after
  `synced_offset`.
- `truncate_after`, `trim_before` and `reset` are durable when they return (the
  WAL rewrites its segment index and syncs).
- a KV `write` is atomic and survives a crash (a process crash; power loss is
  what the WAL guards against, and the KV only ever holds synced entries).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cairn.common.keyorder import KeyOrder
from cairn.storage.core.entries import LogEntry
from cairn.storage.core.entry_apply import ShardRules
from cairn.storage.core.meta import COMMIT_OFFSET_KEY, decode_i64
from cairn.storage.core.replication.terms import (
    NO_ENTRY,
    NO_OFFSET,
    EntryId,
    TermHistory,
    history_of,
)
from cairn.storage.kv import MemoryKv
from cairn.storage.kv.store import Change, Column

_DIGEST_MODULUS = 1 << 64


def shard_rules(notification_retention_ms: int) -> ShardRules:
    return ShardRules(
        shard_id=0,
        key_order=KeyOrder.HIERARCHICAL,
        notifications_enabled=True,
        notification_retention_ms=notification_retention_ms,
        max_notification_batches_trimmed_per_entry=1000,  # the default in config.py
    )


class SimLog:
    """Entries `first_offset..last_offset` after `base` (the entry before the first,
    known from a trim or a snapshot)."""

    def __init__(self) -> None:
        self.base: EntryId = NO_ENTRY
        self.entries: list[LogEntry] = []
        self.synced_offset = NO_OFFSET
        # Bumped whenever entries may have been replaced (truncation, crash, reset):
        # checkers re-read the log then.
        self.generation = 0
        # The last rebuilt history and the log's shape it was rebuilt from: checker
        # (e) asks for it after every step, and most steps leave a log unchanged.
        self._history: tuple[tuple[int, EntryId, int, int], TermHistory] | None = None

    @property
    def first_offset(self) -> int:
        return self.entries[0].offset if self.entries else NO_OFFSET

    @property
    def last_offset(self) -> int:
        return self.entries[-1].offset if self.entries else self.base.offset

    @property
    def head(self) -> EntryId:
        if not self.entries:
            return self.base
        return EntryId(self.entries[-1].term, self.entries[-1].offset)

    def entry(self, offset: int) -> LogEntry | None:
        if not self.entries:
            return None
        index = offset - self.entries[0].offset
        return self.entries[index] if 0 <= index < len(self.entries) else None

    def term_at(self, offset: int) -> int | None:
        if offset == self.base.offset and offset != NO_OFFSET:
            return self.base.term
        entry = self.entry(offset)
        return None if entry is None else entry.term

    def slice(self, first: int, last: int) -> list[LogEntry]:
        start = self.entries[0].offset
        return self.entries[first - start : last - start + 1]

    def history(self) -> TermHistory:
        """The term history of what the log holds, rebuilt as after a restart (a
        copy the caller may change). Rebuilt again whenever the entries may differ:
        entries change only by the methods below, each of which moves the last or
        first offset or the base, or bumps `generation`."""
        shape = (self.generation, self.base, self.first_offset, self.last_offset)
        if self._history is None or self._history[0] != shape:

            def term_at(offset: int) -> int:
                term = self.term_at(offset)
                assert term is not None
                return term

            rebuilt = history_of(self.first_offset, self.last_offset, term_at, self.base)
            self._history = (shape, rebuilt)
        return self._history[1].copy()

    # -- changes -----------------------------------------------------------------------

    def append(self, entry: LogEntry) -> None:
        assert entry.offset == self.last_offset + 1, (entry.offset, self.last_offset)
        self.entries.append(entry)

    def sync(self) -> int:
        self.synced_offset = self.last_offset
        return self.synced_offset

    def truncate_after(self, offset: int) -> None:
        assert offset >= self.base.offset, (offset, self.base)
        if offset < self.last_offset:
            self.generation += 1
            del self.entries[max(0, offset + 1 - self.entries[0].offset) :]
        self.synced_offset = min(self.synced_offset, offset)

    def trim_before(self, offset: int) -> None:
        if not self.entries or offset <= self.entries[0].offset:
            return
        assert offset <= self.last_offset
        before = self.entry(offset - 1)
        assert before is not None
        self.base = EntryId(before.term, before.offset)
        del self.entries[: offset - self.entries[0].offset]

    def reset(self, base: EntryId) -> None:
        self.generation += 1
        self.entries = []
        self.base = base
        self.synced_offset = base.offset

    def crash(self) -> None:
        """Lose the unsynced tail."""
        self.truncate_after(max(self.synced_offset, self.base.offset))


def _item_hash(column: Column, key: bytes, value: bytes) -> int:
    digest = hashlib.blake2b(digest_size=8)
    digest.update(column.value.encode())
    digest.update(len(key).to_bytes(4, "little"))
    digest.update(key)
    digest.update(value)
    return int.from_bytes(digest.digest(), "little")


class DigestKv(MemoryKv):
    """A MemoryKv with a digest of its contents kept up to date on every write, so
    that replicas' states compare in O(1) after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.digest = 0
        # Decoded from the commit offset record whenever a write changes it: the
        # runtime and the checkers ask for it many times a step.
        self._applied_offset = NO_OFFSET

    def write(self, changes: Sequence[Change]) -> None:
        for column, key, value in changes:
            old = self.get(column, key)
            if old is not None:
                self.digest = (self.digest - _item_hash(column, key, old)) % _DIGEST_MODULUS
            if value is not None:
                self.digest = (self.digest + _item_hash(column, key, value)) % _DIGEST_MODULUS
            super().write([(column, key, value)])
            if column is Column.META and key == COMMIT_OFFSET_KEY:
                self._applied_offset = decode_i64(value, NO_OFFSET)

    @property
    def applied_offset(self) -> int:
        return self._applied_offset

    def dump(self) -> tuple[tuple[Column, bytes, bytes], ...]:
        return tuple(
            (column, key, value) for column in Column for key, value in self.scan(column, b"", None)
        )

    @classmethod
    def from_dump(cls, records: Sequence[tuple[Column, bytes, bytes]]) -> DigestKv:
        kv = cls()
        kv.write(list(records))
        return kv
