"""The records column's compaction and compression settings reach RocksDB: read
back from the options RocksDB writes to its own LOG when it opens a column."""

from __future__ import annotations

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
    UNCOMPRESSED_TOP_LEVELS,
)


def _column_options(log_text: str, column: str) -> dict[str, str]:
    """`Options.name: value` lines of the last options dump for `column`."""
    sections = log_text.split("--------------- Options for column family [")
    section = [s for s in sections if s.startswith(column + "]")][-1]
    return dict(re.findall(r"Options\.(\S+): (.*)", section))


def test_records_compact_l0_in_larger_merges_and_leave_top_levels_uncompressed(
    tmp_path: Path,
) -> None:
    kv = RocksKv(tmp_path / "kv")
    kv.write([(Column.RECORDS, b"k", b"v")])
    kv.close()
    options = _column_options((tmp_path / "kv" / "LOG").read_text(errors="replace"), "records")
    assert options["level0_file_num_compaction_trigger"] == str(L0_FILES_PER_COMPACTION)
    assert options["level0_slowdown_writes_trigger"] == str(L0_FILES_SLOWING_WRITES)
    assert options["level0_stop_writes_trigger"] == str(L0_FILES_STOPPING_WRITES)
    per_level = [options[f"compression[{level}]"].strip() for level in range(LEVELS)]
    assert per_level == ["NoCompression"] * UNCOMPRESSED_TOP_LEVELS + ["LZ4"] * (
        LEVELS - UNCOMPRESSED_TOP_LEVELS
    )
    assert L0_FILES_PER_COMPACTION < L0_FILES_SLOWING_WRITES < L0_FILES_STOPPING_WRITES
    # The meta column merges L0 4 files at a time, RocksDB's default.
    meta = _column_options((tmp_path / "kv" / "LOG").read_text(errors="replace"), "meta")
    assert meta["level0_file_num_compaction_trigger"] == "4"


def test_meta_keeps_the_level_below_l0_small_in_small_files(tmp_path: Path) -> None:
    kv = RocksKv(tmp_path / "kv")
    kv.write([(Column.META, b"k", b"v")])
    kv.close()
    meta = _column_options((tmp_path / "kv" / "LOG").read_text(errors="replace"), "meta")
    assert meta["max_bytes_for_level_base"] == str(META_BASE_LEVEL_BYTES)
    assert meta["target_file_size_base"] == str(META_FILE_BYTES)
    # Older notifications move down to larger levels rather than staying in the one
    # every L0 merge rewrites.
    assert meta["level_compaction_dynamic_level_bytes"] == "1"
    assert META_FILE_BYTES < META_BASE_LEVEL_BYTES
