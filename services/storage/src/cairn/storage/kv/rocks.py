"""The RocksDB KvStore (rocksdict, raw mode), one database per shard replica."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from cairn.storage.kv.background import lower_background_priority
from cairn.storage.kv.store import Change, Column

# A small memtable: inserting random keys into a large skiplist is cache-miss bound
# and RocksDB holds the GIL while it writes; at 4 MiB a batch write blocks the event
# loop about half as long as at the 64 MiB default (measured with 1600-put batches
# of random keys), and flushes and compactions run on RocksDB's background threads.
RECORDS_MEMTABLE_BYTES = 4 * 1024 * 1024
MAX_MEMTABLES = 4
BLOOM_BITS_PER_KEY = 10
BACKGROUND_JOBS = 2
# RocksDB keeps a log file until every column family with data in it has flushed.
# The meta column gets a few bytes with every batch and almost never fills its
# memtable, so it pinned every log: a shard kept ~1 GiB of them (RocksDB's default
# bound, 4x the memtable budget), all replayed by a restart and then deleted at once.
# Past this bound RocksDB flushes the column holding the oldest log instead.
MAX_TOTAL_LOG_BYTES = 32 * 1024 * 1024
# Obsolete logs are reused rather than deleted: on a disk mounted with `discard` each
# deletion stalls the device for 5-20 ms, our WAL's fsyncs included (measured with a
# probe that fsyncs one file while another thread creates and deletes files).
RECYCLED_LOG_FILES = 16


def _options() -> Any:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(BACKGROUND_JOBS)
    options.set_max_total_wal_size(MAX_TOTAL_LOG_BYTES)
    options.set_recycle_log_file_num(RECYCLED_LOG_FILES)
    return options


def _column_options(column: Column) -> Any:
    options = rocksdict.Options(raw_mode=True)
    if column is Column.RECORDS:
        options.set_write_buffer_size(RECORDS_MEMTABLE_BYTES)
        options.set_max_write_buffer_number(MAX_MEMTABLES)
        # More, smaller L0 files: bloom filters keep point reads of absent keys cheap.
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
        options.set_block_based_table_factory(table)
    return options


class RocksKv:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        column_options = {column.value: _column_options(column) for column in Column}
        self._db: Any = rocksdict.Rdict(
            str(path), options=_options(), column_families=column_options
        )
        self._columns: dict[Column, Any] = {
            column: self._db.get_column_family(column.value) for column in Column
        }
        self._handles: dict[Column, Any] = {
            column: self._db.get_column_family_handle(column.value) for column in Column
        }
        lower_background_priority()
        # RocksDB's own WAL stays on (unsynced): it makes each batch atomic across
        # columns and survive a process crash; our WAL covers power loss.
        self._write_options = rocksdict.WriteOptions()
        self._read = rocksdict.ReadOptions()
        # Measured: a snapshot of a 1 GiB shard grew its sender by 47 MiB (26 MiB at
        # 256 MiB), all of it blocks the scan loaded into the cache; 0 MiB without.
        self._bulk_read = rocksdict.ReadOptions()
        # (rocksdict's stub declares fill_cache without its argument; it takes one.)
        self._bulk_read.fill_cache(False)  # type: ignore[call-arg]

    def get(self, column: Column, key: bytes) -> bytes | None:
        value: bytes | None = self._columns[column].get(key)
        return value

    def scan(
        self, column: Column, start: bytes, end: bytes | None, *, bulk: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        if end is not None and end <= start:
            return iter(())
        # A plain iterator reads the implicit snapshot taken at its creation. The
        # end bound is checked here: rocksdict's iterate_upper_bound was seen to end
        # scans early (a property test found a key it skipped).
        iterator = self._columns[column].iter(self._bulk_read if bulk else self._read)
        iterator.seek(start)
        return _forward(iterator, end)

    def floor(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        iterator = self._columns[column].iter()
        iterator.seek_for_prev(key)
        if iterator.valid() and not inclusive and iterator.key() == key:
            iterator.prev()
        if not iterator.valid():
            return None
        return iterator.key(), iterator.value()

    def ceiling(self, column: Column, key: bytes, inclusive: bool) -> tuple[bytes, bytes] | None:
        iterator = self._columns[column].iter()
        iterator.seek(key)
        if iterator.valid() and not inclusive and iterator.key() == key:
            iterator.next()
        if not iterator.valid():
            return None
        return iterator.key(), iterator.value()

    def write(self, changes: Sequence[Change]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        handles = self._handles
        for column, key, value in changes:
            if value is None:
                batch.delete(key, handles[column])
            else:
                batch.put(key, value, handles[column])
        self._db.write(batch, self._write_options)

    def sync(self) -> None:
        self._db.flush_wal(True)

    def close(self) -> None:
        # Column objects hold the database open: drop them before closing.
        self._columns.clear()
        self._handles.clear()
        self._db.close()


def _forward(iterator: Any, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    while iterator.valid():
        key = iterator.key()
        if end is not None and key >= end:
            return
        yield key, iterator.value()
        iterator.next()
