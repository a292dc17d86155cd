"""The write buffer: entries a replica logged and has not applied yet, decoded and
held in memory for its apply step and its followers' streams.

A leader holds every entry it logs until it is applied; a follower holds the run
of entries it receives while it fits the buffer's bounds, and its apply step
reads the rest back from the log (ShardCore.keeps_in_memory says which). What
the buffer holds is what backpressure bounds (ShardCore.has_room).

`W` is what a writer waits on, the driver's (an asyncio future in the storage
pod): set for the entries this replica logged as leader in its current term.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from cairn.storage.core.entries import CLIENT_WRITE, FOLDED_WRITES, Folded, LogEntry, decode_entry
from cairn.storage.core.fastpath import folds_only_plain_puts, has_plain_puts

W = TypeVar("W")


@dataclass(slots=True)
class PendingEntry(Generic[W]):
    """A logged entry not applied yet, decoded once."""

    entry: LogEntry
    kind: int
    body: Message | Folded
    # Only plain puts (the apply step's fast path, fastpath.py).
    plain_puts: bool
    waiter: W | None = None
    # With tracing on: the contexts of the sampled writes it carries, for the
    # followers' spans.
    traces: tuple[Any, ...] = ()

    @property
    def offset(self) -> int:
        return self.entry.offset

    @property
    def size_bytes(self) -> int:
        return len(self.entry.payload)


def decoded(entry: LogEntry, waiter: W | None = None) -> PendingEntry[W]:
    kind, body = decode_entry(entry.payload)
    if kind == CLIENT_WRITE:
        plain = has_plain_puts(entry.payload[1:])
    else:
        plain = kind == FOLDED_WRITES and folds_only_plain_puts(entry.payload[1:])
    return PendingEntry(entry, kind, body, plain, waiter)


@dataclass(frozen=True, slots=True)
class ReadLog:
    """The next entries to apply are not held in memory: read `first..last` from
    the log, then cut them to a group (ShardCore.group_of)."""

    first: int
    last: int


class PendingQueue(Generic[W]):
    """Consecutive logged entries, oldest first, and their payloads' total size."""

    __slots__ = ("_held", "size_bytes")

    def __init__(self) -> None:
        self._held: deque[PendingEntry[W]] = deque()
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def __bool__(self) -> bool:
        return bool(self._held)

    def __iter__(self) -> Iterator[PendingEntry[W]]:
        return iter(self._held)

    @property
    def first_offset(self) -> int | None:
        return self._held[0].offset if self._held else None

    @property
    def last_offset(self) -> int | None:
        return self._held[-1].offset if self._held else None

    def append(self, pending: PendingEntry[W]) -> None:
        held = self._held
        assert not held or pending.offset == held[-1].offset + 1, (pending.offset, held[-1].offset)
        held.append(pending)
        self.size_bytes += pending.size_bytes

    def take(self, count: int) -> list[PendingEntry[W]]:
        """The oldest `count` entries, no longer held."""
        held = self._held
        taken = [held.popleft() for _ in range(count)]
        self.size_bytes -= sum(pending.size_bytes for pending in taken)
        return taken

    def take_through(self, offset: int) -> list[PendingEntry[W]]:
        """Every entry up to `offset`, no longer held."""
        held = self._held
        count = 0
        while count < len(held) and held[count].offset <= offset:
            count += 1
        return self.take(count)

    def drop_after(self, offset: int) -> list[PendingEntry[W]]:
        """Entries past `offset` (the log was cut there), newest first."""
        held = self._held
        dropped = []
        while held and held[-1].offset > offset:
            dropped.append(held.pop())
            self.size_bytes -= dropped[-1].size_bytes
        return dropped

    def drop_all(self) -> list[PendingEntry[W]]:
        dropped = list(self._held)
        self._held.clear()
        self.size_bytes = 0
        return dropped

    def held_from(self, first: int, last: int) -> Iterator[PendingEntry[W]]:
        """The entries held within `first..last`, in order."""
        held = self._held
        if not held or held[-1].offset < first:
            return
        index = max(first - held[0].offset, 0)
        while index < len(held) and held[index].offset <= last:
            yield held[index]
            index += 1
