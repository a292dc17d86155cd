"""RocksDB's own logs: the apply step's unlogged batches put nothing in them, and
logged batches that write both columns leave them bounded."""

from __future__ import annotations

import contextlib
from pathlib import Path

from cairn.storage.kv import Column, RocksKv
from cairn.storage.kv.rocks import MAX_TOTAL_LOG_BYTES

VALUE = b"v" * (256 * 1024)


def _log_bytes(path: Path) -> int:
    """The size of RocksDB's log files (one may be deleted as we look)."""
    total = 0
    for entry in path.glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += entry.stat().st_size
    return total


BATCHES = 8 * MAX_TOTAL_LOG_BYTES // len(VALUE)


def test_logged_batches_over_both_columns_leave_the_logs_bounded(tmp_path: Path) -> None:
    store = RocksKv(tmp_path / "kv")
    try:
        largest_bytes = 0
        # 8x the bound in records; each batch also moves the commit offset in meta.
        for offset in range(BATCHES):
            store.write(
                [
                    (Column.RECORDS, b"key-%06d" % offset, VALUE),
                    (Column.META, b"commit", offset.to_bytes(8, "big")),
                ]
            )
            largest_bytes = max(largest_bytes, _log_bytes(store.path))
        assert largest_bytes < 2 * MAX_TOTAL_LOG_BYTES
        last = BATCHES - 1
    finally:
        store.close()
    reopened = RocksKv(tmp_path / "kv")
    try:
        assert reopened.get(Column.META, b"commit") == last.to_bytes(8, "big")
        assert reopened.get(Column.RECORDS, b"key-%06d" % last) == VALUE
        assert reopened.get(Column.RECORDS, b"key-000000") == VALUE
    finally:
        reopened.close()


def test_unlogged_batches_put_nothing_in_the_logs(tmp_path: Path) -> None:
    store = RocksKv(tmp_path / "kv")
    try:
        for offset in range(64):  # 16 MiB: several memtables
            store.write_unlogged(
                {
                    Column.RECORDS: {b"key-%06d" % offset: VALUE},
                    Column.META: {b"commit": offset.to_bytes(8, "big")},
                }
            )
            assert _log_bytes(store.path) == 0
        assert store.get(Column.RECORDS, b"key-000000") == VALUE
    finally:
        store.close()
