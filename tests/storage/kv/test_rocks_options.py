"""The columns' compaction and compression settings reach RocksDB: read
back from the options RocksDB writes to its own LOG when it opens a column."""

from __future__ import annotations

import random
import re
from pathlib import Path

from cairn.storage.kv import Column, RocksKv
from cairn.storage.kv.rocks import (
    L0_FILES_PER_COMPACTION,
    L0_FILES_SLOWING_WRITES,
    L0_FILES_STOPPING_WRITES,
    LEVELS,
    META_BASE_LEVEL_BYTES,
    META_FILE_BYTES,
    RECORDS_MEMTABLE_BYTES,
    RECORDS_MEMTABLE_SPREAD,
    UNCOMPRESSED_TOP_LEVELS,
    records_memtable_bytes,
)


def _column_options(log_text: str, column: str) -> dict[str, str]:
    """`Options.name: value` lines of the last options dump for `column`."""
    sections = log_text.split("--------------- Options for column family [")
    section = [s for s in sections if s.startswith(column + "]")][-1]
    return dict(re.findall(r"Options\.(\S+): (.*)", section))


def _compression_per_level(options: dict[str, str]) -> list[str]:
    return [options[f"compression[{level}]"].strip() for level in range(LEVELS)]


_TOP_LEVELS_UNCOMPRESSED = ["NoCompression"] * UNCOMPRESSED_TOP_LEVELS + ["LZ4"] * (
    LEVELS - UNCOMPRESSED_TOP_LEVELS
)


def _options_as_opened(tmp_path: Path, column: Column) -> dict[str, str]:
    """The options RocksDB logged for `column` when a RocksKv opened it."""
    kv = RocksKv(tmp_path / "kv")
    kv.write([(column, b"k", b"v")])
    kv.close()
    return _column_options((tmp_path / "kv" / "LOG").read_text(errors="replace"), column.value)


def test_records_compact_l0_in_larger_merges_and_leave_top_levels_uncompressed(
    tmp_path: Path,
) -> None:
    options = _options_as_opened(tmp_path, Column.RECORDS)
    assert options["level0_file_num_compaction_trigger"] == str(L0_FILES_PER_COMPACTION)
    assert options["level0_slowdown_writes_trigger"] == str(L0_FILES_SLOWING_WRITES)
    assert options["level0_stop_writes_trigger"] == str(L0_FILES_STOPPING_WRITES)
    assert _compression_per_level(options) == _TOP_LEVELS_UNCOMPRESSED
    assert L0_FILES_PER_COMPACTION < L0_FILES_SLOWING_WRITES < L0_FILES_STOPPING_WRITES


def test_meta_merges_l0_by_fours_into_a_small_uncompressed_level_of_small_files(
    tmp_path: Path,
) -> None:
    meta = _options_as_opened(tmp_path, Column.META)
    # RocksDB's default L0 trigger (see rocks.py for why not more).
    assert meta["level0_file_num_compaction_trigger"] == "4"
    assert meta["max_bytes_for_level_base"] == str(META_BASE_LEVEL_BYTES)
    assert meta["target_file_size_base"] == str(META_FILE_BYTES)
    # Older notifications move down to larger levels rather than staying in the one
    # every L0 merge rewrites.
    assert meta["level_compaction_dynamic_level_bytes"] == "1"
    assert META_FILE_BYTES < META_BASE_LEVEL_BYTES
    assert _compression_per_level(meta) == _TOP_LEVELS_UNCOMPRESSED


def test_each_replica_draws_its_own_records_memtable_size_around_the_nominal_one(
    tmp_path: Path,
) -> None:
    """Replicas of a shard write the same batches: equal memtables would flush them
    all at once (rocks.py). Read back as RocksDB applied them."""
    sizes = [
        int(_options_as_opened(tmp_path / str(replica), Column.RECORDS)["write_buffer_size"])
        for replica in range(4)
    ]
    low = RECORDS_MEMTABLE_BYTES * (1 - RECORDS_MEMTABLE_SPREAD)
    high = RECORDS_MEMTABLE_BYTES * (1 + RECORDS_MEMTABLE_SPREAD)
    assert all(low <= size <= high for size in sizes), sizes
    assert len(set(sizes)) > 1, sizes


def test_the_drawn_memtable_size_spans_the_spread() -> None:
    draws = [records_memtable_bytes(random.Random(seed)) for seed in range(200)]
    assert min(draws) < RECORDS_MEMTABLE_BYTES * (1 - RECORDS_MEMTABLE_SPREAD / 2)
    assert max(draws) > RECORDS_MEMTABLE_BYTES * (1 + RECORDS_MEMTABLE_SPREAD / 2)
