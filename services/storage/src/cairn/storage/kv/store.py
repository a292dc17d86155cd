"""The KV interface a shard replica needs, and its durability contract.

Keys are already encoded (see cairn.common.keyorder), so every implementation
orders them bytewise. User records live in `Column.RECORDS` and nothing else
does; internal state (commit offset, term, and later sessions, indexes,
notifications) lives in other columns, so an internal key can never show up
in a client's list, scan or floor/ceiling answer.

Two kinds of write, with two durability contracts:

- `write`: the changes are applied atomically (all or none, across columns) and
  survive a crash of the process once `write` returns; they may be lost on power
  loss until `sync` returns. For state nothing else can rebuild (the term, a
  snapshot's log base).
- `write_unlogged`: as atomic, but the changes may be lost in any crash until
  `persist` returns. What a crash keeps is a prefix of these writes, in the order
  they were made (never a later batch without an earlier one). For the apply
  step, whose writes the replica's WAL can redo: the commit offset is written in
  the same atomic batch as the data it covers, and WAL entries past it are
  re-applied on restart, so the WAL must keep every entry past the last
  `persist` (trimming calls it first).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol


class Column(enum.Enum):
    RECORDS = "records"
    META = "meta"


# (column, key, value); value None deletes the key.
Change = tuple[Column, bytes, bytes | None]
# The same per column: key -> value (None deletes the key). The apply step's form:
# its pending state already holds one dict per column, handed over as they are.
ColumnChanges = Mapping[Column, Mapping[bytes, bytes | None]]


class KvReader(Protocol):
    def get(self, column: Column, key: bytes) -> bytes | None: ...

    def get_many(self, column: Column, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of `keys` (None where absent), in order, all read from one
        consistent view."""
        ...

    def scan(
        self, column: Column, start: bytes, end: bytes | None, *, bulk: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with start <= key < end (no upper bound if end is None), ascending.

        The iterator reads one consistent view, taken when it is created. `bulk`: a
        read of much of the column (a snapshot), kept out of the block cache so that
        it neither evicts what point reads use nor grows the process with the data."""
        ...

    def floor(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        """The item with the highest key <= `key` (< `key` if not inclusive)."""
        ...

    def ceiling(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        """The item with the lowest key >= `key` (> `key` if not inclusive)."""
        ...


class KvStore(KvReader, Protocol):
    def write(self, changes: Sequence[Change]) -> None: ...

    def write_unlogged(self, changes: ColumnChanges) -> None: ...

    def write_encoded_unlogged(self, encoded: bytes) -> None:
        """`write_unlogged` of changes in their encoded form (encoded_changes.py),
        all or nothing: malformed bytes raise EncodedChangesError and write nothing."""
        ...

    def sync(self) -> None:
        """Make every `write` that returned durable against power loss."""
        ...

    def persist(self) -> None:
        """Make every write that returned, `write_unlogged` ones included, durable
        against power loss."""
        ...

    def close(self) -> None: ...
