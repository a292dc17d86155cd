"""What WAL files hold, read from their bytes: for tests of recycled segment files."""

from __future__ import annotations

import itertools
from pathlib import Path

from cairn.storage.wal import LogEntry
from cairn.storage.wal.record import BadRecordError, TornRecordError, decode
from cairn.storage.wal.segment import parse_spare_file_name

_MAX_RECORD_BYTES = 64 * 1024 * 1024


def records_from_start(data: bytes) -> tuple[list[LogEntry], int]:
    """The records that decode one after another from the first byte, and where they end."""
    records: list[LogEntry] = []
    position = 0
    while True:
        try:
            entry, position_after = decode(data, position, _MAX_RECORD_BYTES)
        except (TornRecordError, BadRecordError):
            return records, position
        records.append(entry)
        position = position_after


def segment_records_end(data: bytes, base_offset: int) -> int:
    """Where a segment file's own records end (what the WAL counts as its size): the
    run of records from the first byte with offsets counting up from ``base_offset``.
    The file goes on past it: zero-filled room, or a reused spare's older bytes."""
    position = 0
    for offset in itertools.count(base_offset):
        try:
            entry, position_after = decode(data, position, _MAX_RECORD_BYTES)
        except (TornRecordError, BadRecordError):
            return position
        if entry.offset != offset:
            return position
        position = position_after
    raise AssertionError("unreachable")


def check_spare(path: Path) -> None:
    """A spare is a sealed segment's file as it was: records with consecutive offsets,
    the last one the offset its name says, then nothing but zeros."""
    last_offset = parse_spare_file_name(path.name)
    assert last_offset is not None, path
    data = path.read_bytes()
    records, end = records_from_start(data)
    assert records, path
    offsets = [record.offset for record in records]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), path
    assert offsets[-1] == last_offset, (path, offsets[-1])
    assert data.count(0, end) == len(data) - end, path
