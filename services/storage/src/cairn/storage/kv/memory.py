"""An in-memory KvStore: the reference the RocksDB store is tested against."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from cairn.storage.kv.encoded_changes import decode_changes
from cairn.storage.kv.store import Change, Column, ColumnChanges


class _SortedColumn:
    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: dict[bytes, bytes] = {}

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = value

    def delete(self, key: bytes) -> None:
        if self.values.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]


class MemoryKv:
    def __init__(self) -> None:
        self._columns = {column: _SortedColumn() for column in Column}

    def get(self, column: Column, key: bytes) -> bytes | None:
        return self._columns[column].values.get(key)

    def get_many(self, column: Column, keys: Sequence[bytes]) -> list[bytes | None]:
        values = self._columns[column].values
        return [values.get(key) for key in keys]

    def scan(
        self, column: Column, start: bytes, end: bytes | None, *, bulk: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        data = self._columns[column]
        low = bisect.bisect_left(data.keys, start)
        high = len(data.keys) if end is None else bisect.bisect_left(data.keys, end)
        # Copy now: the iterator must show the state at creation.
        items = [(key, data.values[key]) for key in data.keys[low:high]]
        return iter(items)

    def floor(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        data = self._columns[column]
        index = (bisect.bisect_right if inclusive else bisect.bisect_left)(data.keys, key) - 1
        if index < 0:
            return None
        found = data.keys[index]
        return found, data.values[found]

    def ceiling(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        data = self._columns[column]
        index = (bisect.bisect_left if inclusive else bisect.bisect_right)(data.keys, key)
        if index >= len(data.keys):
            return None
        found = data.keys[index]
        return found, data.values[found]

    def write(self, changes: Sequence[Change]) -> None:
        for column, key, value in changes:
            if value is None:
                self._columns[column].delete(key)
            else:
                self._columns[column].put(key, value)

    def write_unlogged(self, changes: ColumnChanges) -> None:
        # One write, as the contract's atomicity across columns reads.
        self.write(
            [
                (column, key, value)
                for column, items in changes.items()
                for key, value in items.items()
            ]
        )

    def write_encoded_unlogged(self, encoded: bytes) -> None:
        self.write(list(decode_changes(encoded)))

    def sync(self) -> None:
        pass

    def persist(self) -> None:
        pass

    def close(self) -> None:
        pass
