"""The RocksDB KvStore (rocksdict, raw mode), one database per shard replica."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from cairn.storage.kv.background import lower_background_priority
from cairn.storage.kv.encoded_changes import (
    CHANGE_HEADER,
    COLUMNS,
    DELETION,
    KNOWN_FLAGS,
    EncodedChangesError,
)
from cairn.storage.kv.store import Change, Column, ColumnChanges

# A small memtable: inserting random keys into a large skiplist is cache-miss bound
# and RocksDB holds the GIL while it writes, so a batch write blocks the event loop
# for less time than at the 64 MiB default; flushes and compactions run on RocksDB's
# background threads (measurements: docs/performance.md, "RocksDB memtable size").
RECORDS_MEMTABLE_BYTES = 4 * 1024 * 1024
# Each replica's memtable is that size times a factor drawn at open from 1 +- this.
# The replicas of a shard write the same batches (followers write their leader's
# applied changes), so with equal memtables they flushed in lockstep, and the flush
# I/O of all three slowed all three WAL fdatasyncs in the same few milliseconds: the
# commit, which needs two of three, had no fast pair to take. With a disk per pod,
# the reasoning still holds for the commit: a replica flushing alone leaves two that
# are not (measurements: docs/performance.md, "RocksDB memtable spread").
RECORDS_MEMTABLE_SPREAD = 0.4
MAX_MEMTABLES = 4
BLOOM_BITS_PER_KEY = 10
BACKGROUND_JOBS = 2
# Background work: RocksDB's flushes and compactions take a share of a pod's CPU,
# and at replication factor 3 every pod pays it on the same cores. Two settings cut
# it: L0 files are merged 12 at a time rather than 4, so that records rewritten
# meanwhile are written out once, and the lower level is rewritten a third as often;
# and L0 plus the level it compacts into (with dynamic level sizes, the bottom level
# until a shard outgrows it) are not compressed: their data passes through every
# flush and compaction, and compressing it was much of the work.
# Levels below, which only a grown shard has and which hold most of its data, use LZ4.
# The meta column merges L0 4 files at a time (RocksDB's default) on purpose: more
# at a time cut its merges' CPU (its small flushed files all span the commit offset
# to the newest notification, so every merge rewrites the notifications kept), but
# raised rf=3 write p99 at half peak.
# Its level below L0 is kept small, in small files, for the same reason: each merge of
# L0 into it rewrites it whole, and at RocksDB's sizes it held every notification kept
# (up to an hour of them). The older batches move further down, where merges take a
# file at a time, and the meta merges write fewer bytes than with the defaults.
# Its top two levels are not compressed either, as the records' are not: they are the
# ones its merges keep rewriting, and compressing them cost RocksDB's threads CPU
# that rf=3, bound by the CPU the pods share, took from its peak.
# (Measurements: docs/performance.md, "RocksDB background work and compression".)
META_BASE_LEVEL_BYTES = 16 * 1024 * 1024
META_FILE_BYTES = 4 * 1024 * 1024
L0_FILES_PER_COMPACTION = 12
L0_FILES_SLOWING_WRITES = 36
L0_FILES_STOPPING_WRITES = 60
UNCOMPRESSED_TOP_LEVELS = 2
LEVELS = 7
# The apply step's batches skip RocksDB's own log (`write_unlogged`); only rare
# writes (the term, a snapshot's log base) go through it. Unlogged batches need
# atomic flushes: every flush takes all columns at one point, so that what a crash
# keeps never has the records of a batch without its commit offset, or the reverse.
# Why skip the log: each automatic flush first fsyncs the log it closes (RocksDB
# does so when a database has several columns), megabytes at once, and on a shared
# disk that held every WAL fsync of ours up, once per memtable, which raised rf=3
# write p99 (measurements: docs/performance.md, "Unlogged apply writes"). It also
# spares a copy of every batch.
# RocksDB keeps a log file until every column with data in it has flushed; this
# bounds what the logged writes can pin.
MAX_TOTAL_LOG_BYTES = 32 * 1024 * 1024
# `persist` flushes through a checkpoint (the one rocksdict call that flushes every
# column atomically), made here beside the database and deleted at once.
PERSIST_DIR_SUFFIX = ".persist"


def _options() -> Any:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(BACKGROUND_JOBS)
    options.set_max_total_wal_size(MAX_TOTAL_LOG_BYTES)
    options.set_atomic_flush(True)
    return options


def records_memtable_bytes(draw: random.Random) -> int:
    """This replica's records memtable size (see RECORDS_MEMTABLE_SPREAD)."""
    spread = draw.uniform(-RECORDS_MEMTABLE_SPREAD, RECORDS_MEMTABLE_SPREAD)
    return round(RECORDS_MEMTABLE_BYTES * (1 + spread))


def _column_options(column: Column) -> Any:
    options = rocksdict.Options(raw_mode=True)
    _compress_only_lower_levels(options)
    if column is Column.RECORDS:
        options.set_write_buffer_size(records_memtable_bytes(random.Random()))
        options.set_max_write_buffer_number(MAX_MEMTABLES)
        options.set_level_zero_file_num_compaction_trigger(L0_FILES_PER_COMPACTION)
        options.set_level_zero_slowdown_writes_trigger(L0_FILES_SLOWING_WRITES)
        options.set_level_zero_stop_writes_trigger(L0_FILES_STOPPING_WRITES)
        # More, smaller L0 files: bloom filters keep point reads of absent keys cheap.
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
        options.set_block_based_table_factory(table)
    else:
        options.set_max_bytes_for_level_base(META_BASE_LEVEL_BYTES)
        options.set_target_file_size_base(META_FILE_BYTES)
    return options


def _compress_only_lower_levels(options: Any) -> None:
    options.set_num_levels(LEVELS)
    none, lz4 = rocksdict.DBCompressionType.none(), rocksdict.DBCompressionType.lz4()
    options.set_compression_per_level(
        [none] * UNCOMPRESSED_TOP_LEVELS + [lz4] * (LEVELS - UNCOMPRESSED_TOP_LEVELS)
    )


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
        # Logged writes go through RocksDB's own log (unsynced until `sync`), and so
        # survive a process crash; unlogged ones only once flushed (see above).
        self._write_options = rocksdict.WriteOptions()
        self._unlogged_options = rocksdict.WriteOptions()
        # (rocksdict's stub declares disable_wal a method; it is a property.)
        self._unlogged_options.disable_wal = True  # type: ignore[method-assign, assignment]
        self._persist_dir = path.with_name(path.name + PERSIST_DIR_SUFFIX)
        # A crash during `persist` leaves its checkpoint behind.
        shutil.rmtree(self._persist_dir, ignore_errors=True)
        self._read = rocksdict.ReadOptions()
        # Bulk scans (a snapshot's) do not fill the block cache: a snapshot would
        # otherwise grow its sender by the blocks it loaded (measurements:
        # docs/performance.md, "Bulk scans that do not fill the block cache").
        self._bulk_read = rocksdict.ReadOptions()
        # (rocksdict's stub declares fill_cache without its argument; it takes one.)
        self._bulk_read.fill_cache(False)  # type: ignore[call-arg]

    def int_property(self, name: str, whole_db: bool = False) -> int | None:
        """An integer RocksDB property (metrics), summed over the column families,
        or of the database as a whole; None if RocksDB does not know it."""
        if whole_db:
            value: int | None = self._db.property_int_value(name)
            return value
        values = [column.property_int_value(name) for column in self._columns.values()]
        known = [value for value in values if value is not None]
        return sum(known) if known else None

    def get(self, column: Column, key: bytes) -> bytes | None:
        value: bytes | None = self._columns[column].get(key)
        return value

    def get_many(self, column: Column, keys: Sequence[bytes]) -> list[bytes | None]:
        # Given a list, rocksdict makes one MultiGet call for all the keys, read from
        # one implicit snapshot, cheaper a get than a call each (measurements:
        # docs/performance.md, "MultiGet for a Read's gets").
        values: list[bytes | None] = self._columns[column].get(list(keys))
        return values

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
        self._db.write(self._batch(changes), self._write_options)

    def write_unlogged(self, changes: ColumnChanges) -> None:
        # The apply step's write, for every entry of every replica: one column
        # handle per column and bound methods, rather than a (column, key, value)
        # tuple per change, which cost more a put (measurements: docs/performance.md,
        # "Building the apply batch by column handle").
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        delete = batch.delete
        for column, items in changes.items():
            handle = self._handles[column]
            for key, value in items.items():
                if value is None:
                    delete(key, handle)
                else:
                    put(key, value, handle)
        self._db.write(batch, self._unlogged_options)

    def write_encoded_unlogged(self, encoded: bytes) -> None:
        # decode_changes inlined: a follower runs this for every put it holds.
        # The whole batch is built before anything is written, so bytes that turn
        # out malformed write nothing.
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        delete = batch.delete
        handles = [self._handles[column] for column in COLUMNS]
        unpack = CHANGE_HEADER.unpack_from
        header_size = CHANGE_HEADER.size
        position, end = 0, len(encoded)
        while position < end:
            if position + header_size > end:
                raise EncodedChangesError(f"a change header cut short at byte {position}")
            flags, key_size, value_size = unpack(encoded, position)
            position += header_size
            stop = position + key_size + value_size
            if flags & ~KNOWN_FLAGS or (flags & DELETION and value_size) or stop > end:
                raise EncodedChangesError(f"a malformed change at byte {position}")
            key = encoded[position : position + key_size]
            if flags & DELETION:
                delete(key, handles[flags & 1])
            else:
                put(key, encoded[position + key_size : stop], handles[flags & 1])
            position = stop
        self._db.write(batch, self._unlogged_options)

    def _batch(self, changes: Sequence[Change]) -> Any:
        batch = rocksdict.WriteBatch(raw_mode=True)
        handles = self._handles
        for column, key, value in changes:
            if value is None:
                batch.delete(key, handles[column])
            else:
                batch.put(key, value, handles[column])
        return batch

    def sync(self) -> None:
        self._db.flush_wal(True)

    def persist(self) -> None:
        # Creating a checkpoint flushes every column's memtable, atomically with
        # atomic_flush on (a flush of one column would not: tested); the checkpoint
        # itself (hard links, a copy of the manifest) is of no further use.
        try:
            rocksdict.Checkpoint(self._db).create_checkpoint(str(self._persist_dir))
        finally:
            shutil.rmtree(self._persist_dir, ignore_errors=True)
        self.sync()

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
