"""Example-based tests of the storage pod's write-ahead log."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn.storage.wal import LogEntry, Wal, WalCorruptionError, WalError, WalOptions
from cairn.storage.wal.record import HEADER_SIZE_BYTES, decode, encode
from support.wal_files import check_spare, records_from_start

SMALL_SEGMENTS = WalOptions(segment_size_bytes=2048)
BIG_SEGMENTS = WalOptions(segment_size_bytes=1024 * 1024)


def make_entry(offset: int, term: int = 1, payload_bytes: int | None = None) -> LogEntry:
    size = (offset * 37) % 300 if payload_bytes is None else payload_bytes
    payload = bytes((offset + i) % 256 for i in range(size))
    return LogEntry(
        term=term, offset=offset, timestamp_ms=1_700_000_000_000 + offset, payload=payload
    )


def fill(wal: Wal, start: int, count: int, term: int = 1) -> list[LogEntry]:
    entries = [make_entry(offset, term) for offset in range(start, start + count)]
    for entry in entries:
        wal.append(entry)
    return entries


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.wal"))


def record_size(entry: LogEntry) -> int:
    return HEADER_SIZE_BYTES + len(entry.payload)


# -- codec ------------------------------------------------------------------------------------


def test_record_layout_is_the_documented_header_then_payload() -> None:
    entry = LogEntry(term=7, offset=42, timestamp_ms=123456, payload=b"hello")
    data = encode(entry)
    length, crc, term, offset, timestamp_ms = struct.unpack_from("<IIQQQ", data)
    assert (length, term, offset, timestamp_ms) == (5, 7, 42, 123456)
    assert data[HEADER_SIZE_BYTES:] == b"hello"
    # The CRC covers the length and everything after the CRC field.
    assert crc == zlib.crc32(data[:4] + data[8:])
    assert decode(data, 0, 1024) == (entry, len(data))


# -- basic round trip -------------------------------------------------------------------------


def test_new_log_is_empty(tmp_path: Path) -> None:
    with Wal.open(tmp_path / "wal") as wal:
        assert (wal.first_offset, wal.last_offset, wal.last_term, wal.synced_offset) == (
            -1,
            -1,
            -1,
            -1,
        )
        assert wal.last_entry() is None
        assert list(wal.read(0)) == []
        assert wal.segment_count() == 0
        assert wal.total_size_bytes() == 0
        with pytest.raises(KeyError):
            wal.get(0)


def test_append_read_get_round_trip(tmp_path: Path) -> None:
    with Wal.open(tmp_path, BIG_SEGMENTS) as wal:
        entries = fill(wal, 0, 10)
        wal.append(LogEntry(term=2, offset=10, timestamp_ms=0, payload=b""))
        entries.append(wal.get(10))
        assert entries[10].payload == b""
        assert (wal.first_offset, wal.last_offset, wal.last_term) == (0, 10, 2)
        assert wal.last_entry() == entries[10]
        assert list(wal.read(0)) == entries
        assert list(wal.read(3, 5)) == entries[3:6]
        assert list(wal.read(8, 1000)) == entries[8:]
        assert list(wal.read(11)) == []
        assert list(wal.read(5, 4)) == []
        for entry in entries:
            assert wal.get(entry.offset) == entry
        for missing in (-1, 11, 1000):
            with pytest.raises(KeyError):
                wal.get(missing)
        with pytest.raises(ValueError, match="from_offset"):
            wal.read(-1)
        assert wal.total_size_bytes() == sum(record_size(e) for e in entries)


def test_first_append_of_a_new_log_may_start_at_any_offset(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        entries = fill(wal, 1000, 3)
        assert (wal.first_offset, wal.last_offset) == (1000, 1002)
        assert list(wal.read(1000)) == entries
        with pytest.raises(ValueError, match="before the start"):
            wal.read(999)
    assert [p.name for p in segment_files(tmp_path)] == ["00000000000000001000.wal"]


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 50, term=3)
        # No sync: a clean close leaves the records in the page cache, which a reopen sees.
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries
        assert (wal.first_offset, wal.last_offset, wal.last_term) == (0, 49, 3)
        assert wal.synced_offset == 49
        entries += fill(wal, 50, 5, term=4)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries
        assert wal.last_term == 4


@pytest.mark.parametrize(("room_bytes", "spares"), [(0, 0), (1024, 0), (1024, 3)])
def test_killed_process_keeps_a_prefix_with_every_synced_record(
    tmp_path: Path, room_bytes: int, spares: int
) -> None:
    # The durability contract: a process that dies without close() keeps every synced
    # record and the records of every segment it rolled over from (their bytes reach the
    # OS before the next file exists); the rest may be lost, but only as a suffix, and
    # the log opens cleanly. With zero-filled room, appends that fit it are written by
    # the next sync; without, by the append. With spares, the segments after the trim
    # reuse the trimmed files, whose old records must not read as theirs.
    script = f"""
import os
from pathlib import Path
from cairn.storage.wal import Wal, LogEntry, WalOptions
options = WalOptions(
    segment_size_bytes=2048, zero_fill_ahead_bytes={room_bytes}, spare_segments={spares}
)
wal = Wal.open(Path({str(tmp_path)!r}), options)
for offset in range(100):
    wal.append(LogEntry(1, offset, 0, bytes([offset]) * offset))
    if offset == 59:
        wal.sync()
        wal.trim_before(40 if {spares} else 0)
print(wal.segment_count(), flush=True)
os._exit(0)
"""
    run = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        first = wal.first_offset
        recovered = [e.payload for e in wal.read(first)]
        assert recovered == [bytes([i]) * i for i in range(first, first + len(recovered))]
        assert first + len(recovered) >= 60
        if spares:
            assert 0 < first <= 40
            # The rollovers after the trim took the spares' files.
            assert not list(tmp_path.glob("*.spare"))
        # Every segment but the active one was complete when the process died.
        assert wal.segment_count() == int(run.stdout)
        assert wal.last_offset >= int(segment_files(tmp_path)[-1].stem) - 1


# -- segments ---------------------------------------------------------------------------------


def test_rollover_and_reads_across_segment_boundaries(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 300)
        files = segment_files(tmp_path)
        assert wal.segment_count() == len(files) > 10
        assert wal.total_size_bytes() == sum(p.stat().st_size for p in files)
        # Each file is named after its first entry, and no sealed segment is much over size.
        for path in files:
            data = path.read_bytes()
            first, _ = decode(data, 0, 1 << 20)
            assert path.name == f"{first.offset:020d}.wal"
        for path in files[:-1]:
            assert path.stat().st_size < SMALL_SEGMENTS.segment_size_bytes + 400
        rng = random.Random(1)
        for _ in range(200):
            a = rng.randrange(300)
            b = rng.randrange(a, 310)
            assert list(wal.read(a, b)) == entries[a : b + 1]
        # Rolling over syncs nothing (it runs on the appending thread); the next sync
        # makes the sealed segments and the new directory entries durable.
        assert wal.synced_offset == -1
        assert wal.sync() == 299
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries
        assert wal.segment_count() == len(files)


def test_append_many_is_one_write_and_one_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 5)
        group = [make_entry(offset, payload_bytes=100) for offset in range(5, 55)]
        writes: list[int] = []
        real_pwrite = os.pwrite

        def counting_pwrite(fd: int, data: bytes, position: int) -> int:
            writes.append(len(data))
            return real_pwrite(fd, data, position)

        monkeypatch.setattr(os, "pwrite", counting_pwrite)
        wal.append_many(group)
        monkeypatch.undo()
        assert writes == [sum(record_size(e) for e in group)]
        assert list(wal.read(5)) == group
        # The group is never split: it went to the active segment even though that makes it
        # bigger than segment_size_bytes; the next append rolls over.
        assert wal.segment_count() == 1
        wal.append(make_entry(55))
        assert wal.segment_count() == 2
        wal.append_many([])
        assert wal.last_offset == 55


def test_append_many_validates_the_whole_group_before_writing(tmp_path: Path) -> None:
    options = WalOptions(max_record_bytes=50)
    with Wal.open(tmp_path, options) as wal:
        entries = [make_entry(offset, payload_bytes=10) for offset in range(3)]
        wal.append_many(entries)
        size_before = wal.total_size_bytes()
        bad_groups = [
            [make_entry(3, payload_bytes=10), make_entry(5, payload_bytes=10)],  # gap
            [make_entry(3, term=2, payload_bytes=10), make_entry(4, term=1, payload_bytes=10)],
            [make_entry(3, payload_bytes=10), make_entry(4, payload_bytes=51)],  # too big
        ]
        for group in bad_groups:
            with pytest.raises(ValueError, match=r"expected|lower than|exceeds"):
                wal.append_many(group)
            assert (wal.last_offset, wal.last_term) == (2, 1)
            assert wal.total_size_bytes() == size_before
    with Wal.open(tmp_path, options) as wal:
        assert list(wal.read(0)) == entries


def test_wrong_offset_or_lower_term_is_rejected_without_damage(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 20, term=5)
        size_before = wal.total_size_bytes()
        invalid = [
            (make_entry(19, term=5), "expected 20"),  # duplicate offset
            (make_entry(21, term=5), "expected 20"),  # gap
            (make_entry(20, term=4), "lower than last term 5"),
            (
                LogEntry(term=5, offset=20, timestamp_ms=-1, payload=b""),
                "timestamp_ms must be a u64",
            ),
            (LogEntry(term=1 << 64, offset=20, timestamp_ms=0, payload=b""), "term must be a u64"),
        ]
        for entry, message in invalid:
            with pytest.raises(ValueError, match=message):
                wal.append(entry)
        assert wal.total_size_bytes() == size_before
        assert (wal.last_offset, wal.last_term) == (19, 5)
        entries.append(make_entry(20, term=5))
        wal.append(entries[-1])
        assert list(wal.read(0)) == entries
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries


def test_payload_over_max_record_bytes_is_rejected(tmp_path: Path) -> None:
    with Wal.open(tmp_path, WalOptions(max_record_bytes=100)) as wal:
        wal.append(make_entry(0, payload_bytes=100))
        with pytest.raises(ValueError, match="max_record_bytes"):
            wal.append(make_entry(1, payload_bytes=101))
        assert wal.last_offset == 0


# -- truncate / trim / reset ------------------------------------------------------------------


@pytest.mark.parametrize(
    "where", ["middle of active segment", "middle of older segment", "segment boundary"]
)
def test_truncate_after_then_append_and_reopen(tmp_path: Path, where: str) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 100, term=1) + fill(wal, 100, 100, term=2)
        bases = [int(p.stem) for p in segment_files(tmp_path)]
        if where == "middle of active segment":
            offset = bases[-1] + 1
        elif where == "middle of older segment":
            offset = bases[2] + 2
        else:
            offset = bases[3] - 1
        assert offset < wal.last_offset
        wal.truncate_after(offset)
        assert wal.last_offset == offset
        assert wal.synced_offset == offset
        assert wal.last_term == entries[offset].term
        assert list(wal.read(0)) == entries[: offset + 1]
        # The segment holding offset + 1 is kept (maybe empty); later ones are deleted.
        kept = [b for b in bases if b <= offset + 1]
        assert [int(p.stem) for p in segment_files(tmp_path)] == kept
        assert wal.total_size_bytes() == sum(record_size(e) for e in entries[: offset + 1])
        with pytest.raises(ValueError, match="expected"):
            wal.append(make_entry(offset + 2))
        new = fill(wal, offset + 1, 30, term=3)
        assert list(wal.read(0)) == entries[: offset + 1] + new
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries[: offset + 1] + new
        assert wal.last_term == 3


def test_truncate_after_can_empty_the_log(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 50)
        wal.truncate_after(60)  # past the end: nothing to do
        assert wal.last_offset == 49
        wal.truncate_after(-1)
        assert (wal.first_offset, wal.last_offset, wal.last_term) == (-1, -1, -1)
        assert list(wal.read(0)) == []
        assert wal.segment_count() == 1
        entries = fill(wal, 0, 5, term=1)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries


def test_truncate_after_below_a_trimmed_start(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100)
        first = wal.trim_before(50)
        assert first > 1
        with pytest.raises(ValueError, match="starts at"):
            wal.truncate_after(first - 2)
        # -1 and first - 1 both empty the log, which then continues at its start.
        wal.truncate_after(-1)
        assert (wal.first_offset, wal.last_offset) == (-1, first - 1)
        with pytest.raises(ValueError, match="expected"):
            wal.append(make_entry(0))
        entries = fill(wal, first, 3)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(first)) == entries
        assert wal.first_offset == first


def test_trim_before_removes_only_whole_old_segments(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 200)
        bases = [int(p.stem) for p in segment_files(tmp_path)]
        assert wal.trim_before(0) == 0
        assert wal.trim_before(bases[1] - 1) == 0  # segment 0 still holds bases[1] - 1
        target = bases[3] + 1  # in the middle of the fourth segment
        assert wal.trim_before(target) == bases[3]
        assert wal.first_offset == bases[3]
        assert [int(p.stem) for p in segment_files(tmp_path)] == bases[3:]
        assert list(wal.read(bases[3])) == entries[bases[3] :]
        with pytest.raises(ValueError, match="before the start"):
            wal.read(bases[3] - 1)
        with pytest.raises(KeyError):
            wal.get(bases[3] - 1)
        # Even an offset past the end never removes the active segment.
        assert wal.trim_before(10_000) == bases[-1]
        assert wal.segment_count() == 1
        assert list(wal.read(bases[-1])) == entries[bases[-1] :]
        assert wal.last_entry() == entries[-1]
        more = fill(wal, 200, 5)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert wal.first_offset == bases[-1]
        assert list(wal.read(wal.first_offset)) == entries[bases[-1] :] + more


def test_reset_then_append_at_the_new_offset(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100, term=4)
        wal.reset(5000)
        assert (wal.first_offset, wal.last_offset, wal.last_term) == (-1, 4999, -1)
        assert wal.synced_offset == 4999
        assert wal.last_entry() is None
        assert list(wal.read(5000)) == []
        with pytest.raises(ValueError, match="before the start"):
            wal.read(100)
        with pytest.raises(ValueError, match="expected 5000"):
            wal.append(make_entry(100, term=4))
        assert [p.name for p in segment_files(tmp_path)] == ["00000000000000005000.wal"]
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        # The empty segment remembers where the log continues.
        assert (wal.first_offset, wal.last_offset) == (-1, 4999)
        entries = fill(wal, 5000, 40, term=1)  # terms may restart after a reset
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert wal.first_offset == 5000
        assert list(wal.read(5000)) == entries
        wal.reset(3)  # backwards works too
        entries = fill(wal, 3, 2)
        assert list(wal.read(3)) == entries
        with pytest.raises(ValueError, match="u64"):
            wal.reset(-1)


# -- damage and recovery ----------------------------------------------------------------------


def _damage_last_record(path: Path, last: LogEntry, kind: str) -> None:
    size = path.stat().st_size
    start = size - record_size(last)
    if kind == "cut in header":
        os.truncate(path, start + 10)
    elif kind == "cut in payload":
        os.truncate(path, start + HEADER_SIZE_BYTES + len(last.payload) // 2)
    elif kind == "flipped payload byte":
        data = bytearray(path.read_bytes())
        data[start + HEADER_SIZE_BYTES + 3] ^= 0x40
        path.write_bytes(bytes(data))
    elif kind == "garbage after last record":
        with path.open("ab") as f:
            f.write(b"\x17garbage that is not a record" * 3)
    elif kind == "zeros after last record":
        with path.open("ab") as f:
            f.write(bytes(100))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("options", [BIG_SEGMENTS, SMALL_SEGMENTS], ids=["one", "many"])
@pytest.mark.parametrize(
    "kind",
    [
        "cut in header",
        "cut in payload",
        "flipped payload byte",
        "garbage after last record",
        "zeros after last record",
    ],
)
def test_torn_tail_recovers_to_last_good_record(
    tmp_path: Path, kind: str, options: WalOptions
) -> None:
    with Wal.open(tmp_path, options) as wal:
        entries = [make_entry(offset, payload_bytes=64) for offset in range(40)]
        wal.append_many(entries[:20])
        for entry in entries[20:]:
            wal.append(entry)
    last_file = segment_files(tmp_path)[-1]
    _damage_last_record(last_file, entries[-1], kind)
    survivors = entries if kind.endswith("after last record") else entries[:-1]
    with Wal.open(tmp_path, options) as wal:
        assert list(wal.read(0)) == survivors
        assert wal.last_offset == wal.synced_offset == survivors[-1].offset
        # The damaged bytes are gone from the file, so the next append is readable.
        assert wal.total_size_bytes() == sum(record_size(e) for e in survivors)
        extra = make_entry(len(survivors), term=2)
        wal.append(extra)
    with Wal.open(tmp_path, options) as wal:
        assert list(wal.read(0)) == [*survivors, extra]


def test_torn_first_record_of_last_segment_leaves_it_empty(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 60)
    files = segment_files(tmp_path)
    os.truncate(files[-1], 5)
    base = int(files[-1].stem)
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries[:base]
        assert wal.last_offset == base - 1
        wal.append(make_entry(base))
        assert wal.get(base) == make_entry(base)
    assert segment_files(tmp_path) == files


def test_empty_last_segment_file_is_fine(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 60)
    # A crash right after a rollover created the file and before anything was written.
    (tmp_path / f"{60:020d}.wal").touch()
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries
        assert wal.last_offset == 59
        entries.append(make_entry(60))
        wal.append(entries[-1])
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries


@pytest.mark.parametrize("kind", ["flipped payload byte", "flipped length byte", "cut"])
def test_damage_in_an_older_segment_is_corruption(tmp_path: Path, kind: str) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100)
    victim = segment_files(tmp_path)[1]
    data = bytearray(victim.read_bytes())
    _, second_start = decode(data, 0, 1 << 20)
    if kind == "flipped payload byte":
        data[second_start + HEADER_SIZE_BYTES + 1] ^= 0x01
    elif kind == "flipped length byte":
        data[second_start] ^= 0x01
    else:
        del data[second_start + 5 :]
    victim.write_bytes(bytes(data))
    with pytest.raises(WalCorruptionError, match=victim.name) as info:
        Wal.open(tmp_path, SMALL_SEGMENTS)
    assert f"byte {second_start}" in str(info.value)
    # Nothing was "repaired": the damaged file is untouched.
    assert victim.read_bytes() == bytes(data)


def test_missing_middle_segment_is_corruption(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100)
    segment_files(tmp_path)[2].unlink()
    with pytest.raises(WalCorruptionError, match="starts at offset"):
        Wal.open(tmp_path, SMALL_SEGMENTS)


@pytest.mark.parametrize("damage", ["cut in a record", "flipped payload byte", "cut at a record"])
@pytest.mark.parametrize("later", ["empty", "zeros"])
def test_a_torn_sealed_segment_with_no_record_after_it_ends_the_log(
    tmp_path: Path, damage: str, later: str
) -> None:
    """A crash after a rollover, before the sealed segment's tail was synced, while the
    new segment's name was durable but none of its records: the tear ends the log."""
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        entries = fill(wal, 0, 100)
    *_, victim, newest = segment_files(tmp_path)
    victim_base = int(victim.stem)
    data = bytearray(victim.read_bytes())
    _, second_start = decode(data, 0, 1 << 20)
    if damage == "cut in a record":
        del data[second_start + 5 :]
    elif damage == "flipped payload byte":
        data[second_start + HEADER_SIZE_BYTES + 1] ^= 0x01
    else:
        del data[second_start:]
    victim.write_bytes(bytes(data))
    newest.write_bytes(b"" if later == "empty" else bytes(newest.stat().st_size))
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert wal.last_offset == victim_base
        assert list(wal.read(0)) == entries[: victim_base + 1]
        assert segment_files(tmp_path)[-1] == victim
        kept = entries[: victim_base + 1] + fill(wal, victim_base + 1, 30)
        wal.sync()
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        assert list(wal.read(0)) == kept


def test_a_torn_sealed_segment_with_a_record_after_it_is_corruption(tmp_path: Path) -> None:
    """Records in a later segment may have been reported durable: refuse, touch nothing."""
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100)
    *_, victim, newest = segment_files(tmp_path)
    data = bytearray(victim.read_bytes())
    _, second_start = decode(data, 0, 1 << 20)
    del data[second_start + 5 :]
    victim.write_bytes(bytes(data))
    files = {path: path.read_bytes() for path in segment_files(tmp_path)}
    with pytest.raises(WalCorruptionError, match=victim.name):
        Wal.open(tmp_path, SMALL_SEGMENTS)
    assert {path: path.read_bytes() for path in segment_files(tmp_path)} == files
    assert newest in files


def test_a_sync_flushes_sealed_segments_before_the_active_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that no record of a later segment is made durable before an earlier
    segment's tail (the order recovery relies on, above)."""
    flushed: list[str] = []
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        flushed.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fdatasync(fd)

    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 5)
        wal.sync()
        before = segment_files(tmp_path)
        fill(wal, 5, 60)  # rolls over several times
        monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
        wal.sync()
        monkeypatch.undo()
        created = [path.name for path in segment_files(tmp_path) if path not in before]
    assert len(created) >= 2
    segment_flushes = [name for name in flushed if name.endswith(".wal")]
    assert segment_flushes == sorted(segment_flushes)
    assert segment_flushes[0] == before[-1].name
    assert segment_flushes[-1] == created[-1]


def test_corruption_found_by_read_raises(tmp_path: Path) -> None:
    with Wal.open(tmp_path, SMALL_SEGMENTS) as wal:
        fill(wal, 0, 100)
        victim = segment_files(tmp_path)[0]
        data = bytearray(victim.read_bytes())
        _, second_start = decode(data, 0, 1 << 20)
        data[second_start + HEADER_SIZE_BYTES] ^= 0xFF  # first payload byte of offset 1
        victim.write_bytes(bytes(data))
        with pytest.raises(WalCorruptionError, match=f"{victim.name}: CRC mismatch"):
            list(wal.read(0))
        with pytest.raises(WalCorruptionError):
            wal.get(1)
        assert wal.get(0) == make_entry(0)
        assert wal.get(2) == make_entry(2)


# -- failures ---------------------------------------------------------------------------------


def test_failed_write_leaves_no_partial_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, BIG_SEGMENTS) as wal:
        entries = fill(wal, 0, 5)
        real_pwrite = os.pwrite

        def short_then_fail(fd: int, data: bytes, position: int) -> int:
            monkeypatch.setattr(os, "pwrite", failing_pwrite)
            return real_pwrite(fd, bytes(data)[:7], position)

        def failing_pwrite(fd: int, data: bytes, position: int) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "pwrite", short_then_fail)
        with pytest.raises(OSError, match="No space"):
            wal.append(make_entry(5))
        monkeypatch.undo()
        assert wal.last_offset == 4
        assert segment_files(tmp_path)[0].stat().st_size == wal.total_size_bytes()
        entries += fill(wal, 5, 3)
        assert list(wal.read(0)) == entries
    with Wal.open(tmp_path, BIG_SEGMENTS) as wal:
        assert list(wal.read(0)) == entries


def test_failed_fdatasync_stops_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Wal.open(tmp_path) as wal:
        entries = fill(wal, 0, 5)

        def failing_fdatasync(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
        with pytest.raises(WalError, match="fdatasync"):
            wal.sync()
        monkeypatch.undo()
        assert wal.synced_offset == -1
        with pytest.raises(WalError, match="failed earlier"):
            wal.append(make_entry(5))
        with pytest.raises(WalError):
            wal.sync()
        assert list(wal.read(0)) == entries  # reads still work
    with Wal.open(tmp_path) as wal:
        assert list(wal.read(0)) == entries
        wal.append(make_entry(5))


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    fill(wal, 0, 2)
    wal.close()
    wal.close()  # idempotent
    with pytest.raises(WalError, match="closed"):
        wal.append(make_entry(2))
    with pytest.raises(WalError, match="closed"):
        wal.read(0)
    with pytest.raises(WalError, match="closed"):
        wal.sync()


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="segment_size_bytes"):
        WalOptions(segment_size_bytes=0)
    with pytest.raises(ValueError, match="max_record_bytes"):
        WalOptions(max_record_bytes=1 << 32)


# -- sync and threads -------------------------------------------------------------------------


def test_sync_publishes_synced_offset(tmp_path: Path) -> None:
    with Wal.open(tmp_path, BIG_SEGMENTS) as wal:
        assert wal.sync() == -1
        fill(wal, 0, 10)
        assert wal.synced_offset == -1  # appended, not yet durable
        assert wal.sync() == 9
        assert wal.synced_offset == 9
        fill(wal, 10, 1)
        assert wal.synced_offset == 9
        assert wal.sync() == 10


@pytest.mark.parametrize("room_bytes", [0, 1024])
def test_sync_in_another_thread_while_appending_with_rollovers(
    tmp_path: Path, room_bytes: int
) -> None:
    # With room, most appends are written by the syncing thread, racing rollovers.
    options = WalOptions(segment_size_bytes=4096, zero_fill_ahead_bytes=room_bytes)
    stop = threading.Event()
    observed: list[int] = []
    errors: list[BaseException] = []

    with Wal.open(tmp_path, options) as wal:

        def syncer() -> None:
            try:
                while not stop.is_set():
                    observed.append(wal.sync())
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        thread = threading.Thread(target=syncer)
        thread.start()
        entries: list[LogEntry] = []
        try:
            offset = 0
            rng = random.Random(7)
            while offset < 5000:
                if rng.random() < 0.2:
                    group = [
                        make_entry(o, payload_bytes=rng.randrange(200))
                        for o in range(offset, offset + 10)
                    ]
                    wal.append_many(group)
                else:
                    group = [make_entry(offset, payload_bytes=rng.randrange(200))]
                    wal.append(group[0])
                entries += group
                offset += len(group)
                # A synced offset never exceeds what was appended.
                assert wal.synced_offset <= wal.last_offset
        finally:
            stop.set()
            thread.join()
        assert errors == []
        assert len(observed) > 1
        assert observed == sorted(observed)  # synced_offset never goes back
        assert wal.segment_count() > 50
        assert wal.sync() == wal.last_offset == len(entries) - 1
        assert wal.synced_offset == wal.last_offset
        assert list(wal.read(0)) == entries
    with Wal.open(tmp_path, options) as wal:
        assert list(wal.read(0)) == entries


# -- zero-filled room -------------------------------------------------------------------------

ZERO_FILLED = WalOptions(segment_size_bytes=64 * 1024, zero_fill_ahead_bytes=8 * 1024)


def test_sync_keeps_zero_filled_room_ahead_that_appends_write_over(tmp_path: Path) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 10)
        wal.sync()
        (path,) = segment_files(tmp_path)
        end = wal.total_size_bytes()
        data = path.read_bytes()
        assert len(data) == end + 8 * 1024
        assert data[end:] == bytes(8 * 1024)
        # Appends go over the room; the next sync tops it up once less than half is left.
        entries += fill(wal, 10, 40)
        wal.sync()
        end = wal.total_size_bytes()
        data = path.read_bytes()
        assert len(data) - end >= 4 * 1024
        assert data[end:].count(0) == len(data) - end
        assert list(wal.read(0)) == entries
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        # The room is a clean end, not a torn tail: nothing is cut, and appends go on.
        assert list(wal.read(0)) == entries
        assert path.stat().st_size == len(data)
        entries += fill(wal, 50, 5)
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert list(wal.read(0)) == entries


def _record_nonzero_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """os.pwrite calls that write records (not zero fill): (thread name, bytes)."""
    writes: list[tuple[str, bytes]] = []
    real_pwrite = os.pwrite

    def recording_pwrite(fd: int, data: bytes, position: int) -> int:
        if any(data):
            writes.append((threading.current_thread().name, bytes(data)))
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(os, "pwrite", recording_pwrite)
    return writes


def _pwrite_failing_with(code: int, text: str) -> Callable[[int, bytes, int], int]:
    def failing_pwrite(fd: int, data: bytes, position: int) -> int:
        raise OSError(code, text)

    return failing_pwrite


def test_appends_into_the_room_are_written_by_the_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 1)
        wal.sync()
        (path,) = segment_files(tmp_path)
        end = wal.total_size_bytes()
        writes = _record_nonzero_writes(monkeypatch)
        group = [make_entry(offset, payload_bytes=50) for offset in range(1, 4)]
        wal.append_many(group)
        wal.append(make_entry(4, payload_bytes=50))
        entries += [*group, make_entry(4, payload_bytes=50)]
        # The appending thread wrote nothing: the room is still zeros.
        assert writes == []
        assert path.read_bytes()[end:] == bytes(path.stat().st_size - end)
        syncer = threading.Thread(target=wal.sync, name="syncer")
        syncer.start()
        syncer.join()
        # One write per append call, on the syncing thread, in order, then synced.
        assert writes == [
            ("syncer", b"".join(encode(entry) for entry in group)),
            ("syncer", encode(entries[4])),
        ]
        assert wal.synced_offset == 4
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert list(wal.read(0)) == entries


def test_reads_write_what_was_appended_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 1)
        wal.sync()
        entries += fill(wal, 1, 5)
        writes = _record_nonzero_writes(monkeypatch)
        assert wal.get(3) == entries[3]
        assert len(writes) == 5
        assert list(wal.read(0)) == entries
        assert wal.last_entry() == entries[-1]
        assert len(writes) == 5  # written once
        # Written is not synced.
        assert wal.synced_offset == 0
        (path,) = segment_files(tmp_path)
        assert path.read_bytes()[: wal.total_size_bytes()] == b"".join(map(encode, entries))


def test_a_read_waits_for_records_a_sync_on_another_thread_is_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync takes the records appended into the room, then writes them: a read in
    between (the loop serving a follower, say) must wait for those bytes rather than
    read the zeros still there. (Seen in a three-pod run: a leader's read of its
    newest entries found zeros, and replication to that follower stopped.)"""
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 1)
        wal.sync()
        entries += fill(wal, 1, 4)
        writing, release = threading.Event(), threading.Event()
        real_pwrite = os.pwrite

        def slow_pwrite(fd: int, data: bytes, position: int) -> int:
            if any(data) and threading.current_thread().name == "syncer":
                writing.set()
                release.wait(10)
            return real_pwrite(fd, data, position)

        monkeypatch.setattr(os, "pwrite", slow_pwrite)
        syncer = threading.Thread(target=wal.sync, name="syncer")
        syncer.start()
        assert writing.wait(10)
        # The read starts while the syncer holds the records, and cannot return
        # before they are written: release them from another thread a moment later.
        releaser = threading.Timer(0.3, release.set)
        releaser.start()
        try:
            assert list(wal.read(0)) == entries
            assert release.is_set()
        finally:
            release.set()
            releaser.cancel()
            syncer.join()


def test_an_append_past_the_room_is_written_at_once_after_the_deferred_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 1)
        wal.sync()
        entries += fill(wal, 1, 2)
        writes = _record_nonzero_writes(monkeypatch)
        big = make_entry(3, payload_bytes=9000)  # more than the 8 KiB of room
        wal.append(big)
        main = threading.current_thread().name
        assert writes == [
            (main, encode(entries[1])),
            (main, encode(entries[2])),
            (main, encode(big)),
        ]
        monkeypatch.undo()
        # A full disk fails such an append alone, before anything of it is indexed.
        monkeypatch.setattr(os, "pwrite", _pwrite_failing_with(28, "No space left on device"))
        with pytest.raises(OSError, match="No space"):
            wal.append(make_entry(4, payload_bytes=20_000))
        monkeypatch.undo()
        assert wal.last_offset == 3
        entries += [big, *fill(wal, 4, 2)]
        assert wal.sync() == 5
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert list(wal.read(0)) == entries


def test_a_failed_deferred_write_stops_writes_and_loses_no_synced_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 3)
        wal.sync()
        fill(wal, 3, 3)
        monkeypatch.setattr(os, "pwrite", _pwrite_failing_with(5, "Input/output error"))
        with pytest.raises(WalError, match="write to"):
            wal.sync()
        monkeypatch.undo()
        assert wal.synced_offset == 2
        with pytest.raises(WalError, match="failed earlier"):
            wal.append(make_entry(6))
        with pytest.raises(WalError, match="failed earlier"):
            wal.sync()
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert list(wal.read(0)) == entries


def test_zero_filled_room_stops_at_the_segment_size(tmp_path: Path) -> None:
    options = WalOptions(segment_size_bytes=4096, zero_fill_ahead_bytes=64 * 1024)
    with Wal.open(tmp_path, options) as wal:
        entries = fill(wal, 0, 3)
        wal.sync()
        assert segment_files(tmp_path)[0].stat().st_size == 4096
        while wal.segment_count() < 3:
            entries += fill(wal, len(entries), 1)
            wal.sync()
        sealed = segment_files(tmp_path)[0]
        # A segment rolls once its records reach the segment size, so none is left over
        # in a sealed one; a sealed segment that does end in zeros is not damage either.
        assert sealed.stat().st_size >= 4096
        with open(sealed, "ab") as handle:
            handle.write(bytes(100))
    with Wal.open(tmp_path, options) as wal:
        assert list(wal.read(0)) == entries


def test_garbage_after_a_hole_in_the_room_is_cut_off(tmp_path: Path) -> None:
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        entries = fill(wal, 0, 10)
        wal.sync()
        end = wal.total_size_bytes()
    (path,) = segment_files(tmp_path)
    # An unsynced record written back after the pages in front of it were lost: it must
    # not come back as the continuation of a later append of the same length.
    stray = encode(make_entry(11, payload_bytes=20))
    with open(path, "r+b") as handle:
        handle.seek(end + len(encode(make_entry(10, payload_bytes=20))))
        handle.write(stray)
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert list(wal.read(0)) == entries
        assert path.stat().st_size == end
        wal.append(make_entry(10, payload_bytes=20))
    with Wal.open(tmp_path, ZERO_FILLED) as wal:
        assert wal.last_offset == 10


# -- spare segments ---------------------------------------------------------------------------

RECYCLING = WalOptions(segment_size_bytes=2048, zero_fill_ahead_bytes=1024, spare_segments=2)


def test_trimmed_segments_become_spares_that_later_rollovers_reuse(tmp_path: Path) -> None:
    with Wal.open(tmp_path, RECYCLING) as wal:
        entries = fill(wal, 0, 60)
        wal.sync()
        assert wal.segment_count() >= 5
        trimmed = segment_files(tmp_path)[:-1]
        trimmed_inodes = {path.stat().st_ino for path in trimmed}
        first = wal.trim_before(wal.last_offset)
        spares = sorted(tmp_path.glob("*.spare"))
        # Two kept as they were (named by their last record), the rest deleted.
        assert len(spares) == 2
        spare_inodes = {spare.stat().st_ino for spare in spares}
        assert spare_inodes <= trimmed_inodes
        for spare in spares:
            check_spare(spare)
        # The next rollovers take the spares' files instead of new ones.
        kept = [entry for entry in entries if entry.offset >= first]
        while wal.segment_count() < 3:
            kept += fill(wal, wal.last_offset + 1, 1)
        wal.sync()
        assert not list(tmp_path.glob("*.spare"))
        reused = segment_files(tmp_path)[1:]
        assert {path.stat().st_ino for path in reused} == spare_inodes
        # The sealed one of them ends in zeros after its records; the active one still
        # holds its old records after its new ones.
        sealed, active = reused
        sealed_records, sealed_end = records_from_start(sealed.read_bytes())
        assert sealed.read_bytes().count(0, sealed_end) == sealed.stat().st_size - sealed_end
        assert [record.offset for record in sealed_records] == list(
            range(int(sealed.stem), int(active.stem))
        )
        active_bytes = active.read_bytes()
        new_records, new_end = records_from_start(active_bytes)
        assert new_records[0].offset == int(active.stem)
        assert active_bytes.count(0, new_end) < len(active_bytes) - new_end
    # The reused files give back only their new records: nothing from their previous life.
    with Wal.open(tmp_path, RECYCLING) as wal:
        assert list(wal.read(first)) == kept
        # And appends after the reopen go on from the last new record.
        kept += fill(wal, wal.last_offset + 1, 30)
        wal.sync()
    with Wal.open(tmp_path, RECYCLING) as wal:
        assert list(wal.read(first)) == kept


def test_a_spare_is_never_reused_where_its_old_records_would_fit(tmp_path: Path) -> None:
    # Records of one size, so that after a reset the log rolls over at the same offsets
    # as before (16 records a segment). A spare from before the reset then holds, at
    # every position, a record with the offset a new segment at its base would put
    # there; only spares whose records all come before a segment's base may start it.
    # The process dies right after such a rollover, its last record not yet written.
    script = f"""
import os
from pathlib import Path
from cairn.storage.wal import Wal, LogEntry, WalOptions
options = WalOptions(segment_size_bytes=2048, zero_fill_ahead_bytes=1024, spare_segments=2)
wal = Wal.open(Path({str(tmp_path)!r}), options)
def fill(term, count):
    for offset in range(count):
        wal.append(LogEntry(term, offset, 0, bytes([term]) * 100))
fill(1, 60)
wal.sync()
wal.trim_before(wal.last_offset)  # spares: the segments of offsets 0-15 and 16-31
print(sorted(path.name for path in Path({str(tmp_path)!r}).glob("*.spare")), flush=True)
wal.reset(0)
fill(2, 20)  # the rollover at 16 may take the first spare (its records end at 15)
wal.sync()
wal.reset(0)
fill(3, 17)  # the rollover at 16 must not take the other one (16-31)
os._exit(0)
"""
    run = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    assert run.stdout.split() == ["['00000000000000000015.spare',", "'00000000000000000031.spare']"]
    with Wal.open(tmp_path, RECYCLING) as wal:
        recovered = list(wal.read(0))
        assert len(recovered) >= 16
        assert [(entry.term, entry.offset) for entry in recovered] == [
            (3, offset) for offset in range(len(recovered))
        ]
    assert [path.name for path in tmp_path.glob("*.spare")] == ["00000000000000000031.spare"]


def test_spares_survive_a_reopen_and_odd_spare_files_are_deleted(tmp_path: Path) -> None:
    with Wal.open(tmp_path, RECYCLING) as wal:
        fill(wal, 0, 60)
        wal.sync()
        wal.trim_before(wal.last_offset)
    (tmp_path / "odd.spare").write_bytes(b"not named by an offset")
    with Wal.open(tmp_path, WalOptions(segment_size_bytes=2048, spare_segments=1)) as wal:
        # Fewer spares allowed now: the extra one goes, and so does the odd file.
        assert len(list(tmp_path.glob("*.spare"))) == 1
        assert not (tmp_path / "odd.spare").exists()
        assert wal.first_offset >= 0
