"""A bulk scan (a snapshot) reads through RocksDB without filling its block cache."""

from __future__ import annotations

from pathlib import Path

from cairn.storage.kv.rocks import RocksKv
from cairn.storage.kv.store import Column

RECORDS = 60_000  # ~13 MB: most of it flushed to tables (4 MiB memtables)
VALUE = b"v" * 200


def block_cache_bytes(kv: RocksKv) -> int:
    """The records column's block cache (its table options have their own)."""
    usage: int = kv._columns[Column.RECORDS].property_int_value("rocksdb.block-cache-usage")
    return usage


def test_a_bulk_scan_reads_everything_and_leaves_the_block_cache_alone(tmp_path: Path) -> None:
    kv = RocksKv(tmp_path / "kv")
    try:
        for start in range(0, RECORDS, 1000):
            kv.write([(Column.RECORDS, b"k%08d" % i, VALUE) for i in range(start, start + 1000)])
        kv.close()
        # Reopened: the tables are on disk and nothing of them is cached yet.
        kv = RocksKv(tmp_path / "kv")
        before = block_cache_bytes(kv)
        bulk = list(kv.scan(Column.RECORDS, b"", None, bulk=True))
        assert [key for key, _ in bulk] == [b"k%08d" % i for i in range(RECORDS)]
        assert all(value == VALUE for _, value in bulk)
        assert block_cache_bytes(kv) - before < 64 * 1024
        # The ordinary scan, for contrast, caches what it reads: the check can fail.
        assert list(kv.scan(Column.RECORDS, b"", None)) == bulk
        assert block_cache_bytes(kv) - before > len(VALUE) * RECORDS // 4
    finally:
        kv.close()
