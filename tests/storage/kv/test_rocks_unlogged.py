"""What a crash keeps of the RocksDB store's writes: unlogged batches (the apply
step's) only up to the last flush, and then a prefix of them, never the records of
a batch without its commit offset; everything once `persist` returns; logged
writes (the term) always. A real process killed with SIGKILL, then reopened."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from cairn.storage.kv import Column, RocksKv

COMMIT = b"commit"
TERM = b"term"
VALUE_BYTES = 100

# Batch i puts record i and moves the commit offset to i, as the apply step does.
# argv: kv path, batches, then what to do before the kill ("flushed": wait until
# RocksDB flushed a memtable on its own, "persist", "logged": a logged write after
# the unlogged batches, "close": a clean close).
WRITER = f"""
import os, signal, sys, time
from pathlib import Path
from cairn.storage.kv import Column, RocksKv
kv = RocksKv(Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    kv.write_unlogged({{
        Column.RECORDS: {{b"key-%09d" % i: bytes({VALUE_BYTES})}},
        Column.META: {{{COMMIT!r}: str(i).encode()}},
    }})
then = sys.argv[3]
if then == "flushed":
    # RocksDB flushes on its background threads, at a lower CPU priority (see
    # background.py): on a busy machine the first flush may still be running when the
    # last batch is written. That batch stays in the active memtable, which only a
    # later write would switch for flushing.
    records = kv._columns[Column.RECORDS]
    while records.property_int_value("rocksdb.live-sst-files-size") == 0:
        time.sleep(0.01)
elif then == "persist":
    kv.persist()
elif then == "logged":
    kv.write([(Column.META, {TERM!r}, b"7")])
elif then == "close":
    kv.close()
    sys.exit(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_writer(path: Path, batches: int, then: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), str(batches), then],
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = 0 if then == "close" else -signal.SIGKILL
    assert done.returncode == expected, done.stderr


def reopened_state(path: Path) -> tuple[int, list[int], bytes | None]:
    """(commit offset or -1, the record numbers present, the term)."""
    kv = RocksKv(path)
    try:
        stored = kv.get(Column.META, COMMIT)
        records = [int(key[len(b"key-") :]) for key, _ in kv.scan(Column.RECORDS, b"", None)]
        return (-1 if stored is None else int(stored)), records, kv.get(Column.META, TERM)
    finally:
        kv.close()


def test_a_crash_keeps_a_prefix_of_unlogged_batches_with_their_commit_offsets(
    tmp_path: Path,
) -> None:
    # ~2.5x the records memtable: RocksDB flushes on its own, then the kill
    # loses what came after the last flush.
    batches = 60_000
    run_writer(tmp_path / "kv", batches, "flushed")
    commit, records, _ = reopened_state(tmp_path / "kv")
    assert 0 <= commit < batches - 1, "expected automatic flushes and a lost tail"
    assert records == list(range(commit + 1))


def test_persist_makes_every_unlogged_batch_survive_a_crash(tmp_path: Path) -> None:
    run_writer(tmp_path / "kv", 5_000, "persist")
    commit, records, _ = reopened_state(tmp_path / "kv")
    assert commit == 4_999
    assert records == list(range(5_000))
    # The checkpoint that flushed it is gone.
    assert not (tmp_path / "kv.persist").exists()


def test_a_logged_write_survives_a_crash_that_loses_unflushed_unlogged_ones(
    tmp_path: Path,
) -> None:
    run_writer(tmp_path / "kv", 1_000, "logged")
    commit, records, term = reopened_state(tmp_path / "kv")
    assert term == b"7"
    assert (commit, records) == (-1, [])


def test_a_clean_close_persists_unlogged_batches(tmp_path: Path) -> None:
    run_writer(tmp_path / "kv", 1_000, "close")
    commit, records, _ = reopened_state(tmp_path / "kv")
    assert (commit, records) == (999, list(range(1_000)))


def test_open_removes_the_checkpoint_an_interrupted_persist_left(tmp_path: Path) -> None:
    stale = tmp_path / "kv.persist"
    stale.mkdir()
    (stale / "CURRENT").write_text("MANIFEST-000001\n")
    kv = RocksKv(tmp_path / "kv")
    try:
        assert not stale.exists()
        kv.write_unlogged({Column.RECORDS: {b"a": b"1"}})
        kv.persist()
        assert kv.get(Column.RECORDS, b"a") == b"1"
    finally:
        kv.close()
