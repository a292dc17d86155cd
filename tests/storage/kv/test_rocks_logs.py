"""RocksDB's own logs stay bounded when every batch also writes the meta column
(as the apply step does: the commit offset goes in the same batch as the data), and
obsolete ones are reused rather than deleted."""

from __future__ import annotations

from pathlib import Path

from cairn.storage.kv import Column, RocksKv
from cairn.storage.kv.rocks import MAX_TOTAL_LOG_BYTES, RECYCLED_LOG_FILES

VALUE = b"v" * (256 * 1024)


def _logs(path: Path) -> dict[int, int]:
    """inode -> size of RocksDB's log files."""
    logs = {}
    for entry in path.glob("*.log"):
        status = entry.stat()
        logs[status.st_ino] = status.st_size
    return logs


BATCHES = 8 * MAX_TOTAL_LOG_BYTES // len(VALUE)


def test_logs_stay_bounded_and_are_reused(tmp_path: Path) -> None:
    store = RocksKv(tmp_path / "kv")
    try:
        largest_bytes = 0
        inodes: set[int] = set()
        # 8x the bound in records; each batch also moves the commit offset in meta.
        for offset in range(BATCHES):
            store.write(
                [
                    (Column.RECORDS, b"key-%06d" % offset, VALUE),
                    (Column.META, b"commit", offset.to_bytes(8, "big")),
                ]
            )
            logs = _logs(store.path)
            largest_bytes = max(largest_bytes, sum(logs.values()))
            inodes.update(logs)
        # Without the bound the meta column kept every log alive (8x the bound here).
        # Recycled logs keep their size, so allow them beside the live ones.
        assert largest_bytes < 2 * MAX_TOTAL_LOG_BYTES
        # A new log file (inode) for each memtable switch without recycling (~40 here).
        assert len(inodes) < RECYCLED_LOG_FILES
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
