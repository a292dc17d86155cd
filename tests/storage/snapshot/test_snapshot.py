"""Shard snapshots on real RocksDB: chunking, consistency, damage, crash-safe install."""

from __future__ import annotations

import random
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.proto import replication_pb2
from cairn.storage import snapshot
from cairn.storage.core.meta import (
    COMMIT_OFFSET_KEY,
    INCARNATION_KEY,
    LOG_BASE_KEY,
    decode_entry_id,
    decode_u64,
    encode_i64,
    encode_u64,
)
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.kv import Column, MemoryKv, RocksKv
from cairn.storage.snapshot import (
    MARKER_FILE_NAME,
    STAGING_DIR_NAME,
    SnapshotError,
    SnapshotInstaller,
    finish_pending_install,
    snapshot_chunks,
)
from cairn.storage.wal import LogEntry, Wal

Chunk = replication_pb2.SnapshotChunk
Items = list[tuple[bytes, bytes]]

LAST_INCLUDED = EntryId(term=3, offset=4321)
MAX_RECORDS = 100
MAX_BYTES = 64 * 1024


def header(last_included: EntryId = LAST_INCLUDED) -> replication_pb2.SnapshotHeader:
    return replication_pb2.SnapshotHeader(
        shard=7,
        term=last_included.term,
        last_included=replication_pb2.EntryId(term=last_included.term, offset=last_included.offset),
    )


def items(kv: RocksKv, column: Column) -> Items:
    return list(kv.scan(column, b"", None))


def fill_source(path: Path, seed: int = 1, records: int = 3000, meta: int = 300) -> RocksKv:
    """A leader's KV: random keys and values in both columns, a few large values, and
    the commit offset of LAST_INCLUDED."""
    rng = random.Random(seed)
    kv = RocksKv(path)
    changes: list[tuple[Column, bytes, bytes | None]] = []
    for index in range(records):
        size = 200_000 if index % 500 == 0 else rng.randrange(0, 300)
        changes.append((Column.RECORDS, rng.randbytes(rng.randrange(1, 40)), rng.randbytes(size)))
    for _ in range(meta):
        changes.append((Column.META, b"m/" + rng.randbytes(12), rng.randbytes(rng.randrange(50))))
    changes.append((Column.META, COMMIT_OFFSET_KEY, encode_i64(LAST_INCLUDED.offset)))
    kv.write(changes)
    return kv


def make_follower(shard_dir: Path) -> None:
    """A follower's old state: a few records and a WAL of ten entries."""
    kv = RocksKv(shard_dir / "kv")
    kv.write(
        [
            (Column.RECORDS, b"old-record", b"old"),
            (Column.META, COMMIT_OFFSET_KEY, encode_i64(9)),
        ]
    )
    kv.close()
    with Wal.open(shard_dir / "wal") as wal:
        for offset in range(10):
            wal.append(LogEntry(term=1, offset=offset, timestamp_ms=0, payload=b"x" * offset))
        wal.sync()


def replica_state(shard_dir: Path) -> tuple[Any, ...]:
    """Everything a replica holds on disk, for comparison."""
    kv = RocksKv(shard_dir / "kv")
    try:
        kv_state = (items(kv, Column.RECORDS), items(kv, Column.META))
    finally:
        kv.close()
    with Wal.open(shard_dir / "wal") as wal:
        entries = [] if wal.first_offset < 0 else list(wal.read(wal.first_offset))
        wal_state = (wal.first_offset, wal.last_offset, entries)
    return kv_state, wal_state


def install(shard_dir: Path, chunks: list[Chunk]) -> EntryId:
    installer = SnapshotInstaller(shard_dir)
    for chunk in chunks:
        installer.add(chunk)
    return installer.finish()


def staged_leftovers(shard_dir: Path) -> list[str]:
    names = {STAGING_DIR_NAME, MARKER_FILE_NAME, MARKER_FILE_NAME + ".tmp"}
    return sorted(path.name for path in shard_dir.iterdir() if path.name in names)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[RocksKv]:
    kv = fill_source(tmp_path / "source")
    yield kv
    kv.close()


@pytest.fixture
def chunks(source: RocksKv) -> list[Chunk]:
    return list(snapshot_chunks(source, header(), MAX_RECORDS, MAX_BYTES))


# -- round trip ----------------------------------------------------------------------------


def test_round_trip_replaces_kv_and_wal(
    tmp_path: Path, source: RocksKv, chunks: list[Chunk]
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)

    assert install(shard_dir, chunks) == LAST_INCLUDED

    assert staged_leftovers(shard_dir) == []
    installed = RocksKv(shard_dir / "kv")
    try:
        assert items(installed, Column.RECORDS) == items(source, Column.RECORDS)
        meta = items(installed, Column.META)
        log_base = dict(meta).pop(LOG_BASE_KEY)
        assert decode_entry_id(log_base) == (LAST_INCLUDED.term, LAST_INCLUDED.offset)
        assert [item for item in meta if item[0] != LOG_BASE_KEY] == items(source, Column.META)
    finally:
        installed.close()
    with Wal.open(shard_dir / "wal") as wal:
        assert wal.first_offset == -1
        assert wal.last_offset == LAST_INCLUDED.offset
        # The next append must follow the snapshot.
        wal.append(LogEntry(term=4, offset=LAST_INCLUDED.offset + 1, timestamp_ms=0, payload=b""))
    assert finish_pending_install(shard_dir) is False


def test_install_into_an_empty_shard_directory(
    tmp_path: Path, source: RocksKv, chunks: list[Chunk]
) -> None:
    shard_dir = tmp_path / "new"
    shard_dir.mkdir()
    assert install(shard_dir, chunks) == LAST_INCLUDED
    (records, _), (first_offset, last_offset, _) = replica_state(shard_dir)
    assert records == items(source, Column.RECORDS)
    assert (first_offset, last_offset) == (-1, LAST_INCLUDED.offset)


def test_each_replica_keeps_its_own_incarnation_through_a_snapshot(tmp_path: Path) -> None:
    """The incarnation names one replica's data: a snapshot never carries the
    sender's, and the receiver's survives the install (atomically with it)."""
    source = fill_source(tmp_path / "source", records=10, meta=3)
    try:
        source.write([(Column.META, INCARNATION_KEY, encode_u64(0xAAAA))])
        sent = list(snapshot_chunks(source, header(), MAX_RECORDS, MAX_BYTES))
    finally:
        source.close()
    assert all(record.key != INCARNATION_KEY for chunk in sent for record in chunk.records)
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    installer = SnapshotInstaller(shard_dir, [(INCARNATION_KEY, encode_u64(0xBBBB))])
    for chunk in sent:
        installer.add(chunk)
    assert installer.finish() == LAST_INCLUDED
    installed = RocksKv(shard_dir / "kv")
    try:
        assert decode_u64(installed.get(Column.META, INCARNATION_KEY)) == 0xBBBB
    finally:
        installed.close()


def test_empty_snapshot_round_trip(tmp_path: Path) -> None:
    kv = RocksKv(tmp_path / "source")
    nothing = EntryId(term=-1, offset=-1)
    sent = list(snapshot_chunks(kv, header(nothing), MAX_RECORDS, MAX_BYTES))
    kv.close()
    assert len(sent) == 1
    assert sent[0].HasField("header") and sent[0].last
    assert (len(sent[0].records), sent[0].record_count, sent[0].checksum) == (0, 0, 0)

    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    assert install(shard_dir, sent) == nothing
    (records, meta), wal_state = replica_state(shard_dir)
    assert records == []
    assert meta == [(LOG_BASE_KEY, struct.pack("<qq", -1, -1))]
    assert wal_state == (-1, -1, [])


# -- chunking --------------------------------------------------------------------------------


def check_chunks(sent: list[Chunk], max_records: int, max_bytes: int) -> None:
    assert sent[0].HasField("header")
    assert not any(chunk.HasField("header") for chunk in sent[1:])
    assert [chunk.last for chunk in sent] == [False] * (len(sent) - 1) + [True]
    assert sent[-1].record_count == sum(len(chunk.records) for chunk in sent)
    for chunk in sent:
        size_bytes = sum(len(record.key) + len(record.value) for record in chunk.records)
        assert len(chunk.records) <= max_records
        assert size_bytes <= max_bytes or len(chunk.records) == 1
        assert len(chunk.records) > 0 or len(sent) == 1


@pytest.mark.parametrize(
    ("max_records", "max_bytes"), [(1, 10**9), (7, 10**9), (10**9, 1000), (50, 4096)]
)
def test_chunks_respect_limits(source: RocksKv, max_records: int, max_bytes: int) -> None:
    sent = list(snapshot_chunks(source, header(), max_records, max_bytes))
    check_chunks(sent, max_records, max_bytes)
    streamed = [(r.column, r.key, r.value) for chunk in sent for r in chunk.records]
    expected = [(0, k, v) for k, v in items(source, Column.RECORDS)]
    expected += [(1, k, v) for k, v in items(source, Column.META)]
    assert streamed == expected


def test_a_record_larger_than_the_byte_limit_goes_alone(tmp_path: Path) -> None:
    kv = RocksKv(tmp_path / "source")
    kv.write(
        [
            (Column.RECORDS, b"a", b"1"),
            (Column.RECORDS, b"b", b"x" * 5000),
            (Column.RECORDS, b"c", b"2"),
            (Column.META, b"d", b"3"),
        ]
    )
    sent = list(snapshot_chunks(kv, header(), 100, 1000))
    kv.close()
    check_chunks(sent, 100, 1000)
    assert [[r.key for r in chunk.records] for chunk in sent] == [[b"a"], [b"b"], [b"c", b"d"]]


def test_checksum_is_the_documented_crc(chunks: list[Chunk]) -> None:
    crc = 0
    for chunk in chunks:
        for r in chunk.records:
            encoded = (
                bytes([r.column])
                + len(r.key).to_bytes(4, "little")
                + r.key
                + len(r.value).to_bytes(4, "little")
                + r.value
            )
            crc = zlib.crc32(encoded, crc)
    assert chunks[-1].checksum == crc


def test_invalid_limits_are_rejected(source: RocksKv) -> None:
    with pytest.raises(ValueError, match="chunk limits"):
        snapshot_chunks(source, header(), 0, 10)


# -- consistency -------------------------------------------------------------------------------


def test_writes_after_the_call_are_not_in_the_snapshot(tmp_path: Path) -> None:
    kv = fill_source(tmp_path / "source", records=500, meta=50)
    before = [(0, k, v) for k, v in items(kv, Column.RECORDS)]
    before += [(1, k, v) for k, v in items(kv, Column.META)]
    sent = snapshot_chunks(kv, header(), 10, 1000)
    # Between the call and the first next(): new keys, overwrites and deletes in both
    # columns, and enough data to flush memtables.
    (_, first_record, _) = before[0]
    kv.write(
        [
            (Column.RECORDS, first_record, None),
            (Column.RECORDS, before[1][1], b"overwritten"),
            (Column.META, COMMIT_OFFSET_KEY, encode_i64(99999)),
            (Column.META, b"m/new", b"new"),
        ]
        + [(Column.RECORDS, b"new/%06d" % index, b"v" * 1000) for index in range(10_000)]
    )
    streamed = [(r.column, r.key, r.value) for chunk in sent for r in chunk.records]
    kv.close()
    assert streamed == before


class ScanSpy(MemoryKv):
    def __init__(self) -> None:
        super().__init__()
        self.scanned: list[Column] = []

    def scan(
        self, column: Column, start: bytes, end: bytes | None, *, bulk: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        assert bulk, "a snapshot reads whole columns: a bulk scan"
        self.scanned.append(column)
        return super().scan(column, start, end, bulk=bulk)


def test_both_iterators_are_opened_by_the_call() -> None:
    kv = ScanSpy()
    snapshot_chunks(kv, header(), 10, 1000)
    assert kv.scanned == [Column.RECORDS, Column.META]


# -- damage ----------------------------------------------------------------------------------


def flip_value_byte(chunks: list[Chunk]) -> None:
    record = next(r for r in chunks[len(chunks) // 2].records if r.value)
    record.value = bytes([record.value[0] ^ 1]) + record.value[1:]


def drop_a_chunk(chunks: list[Chunk]) -> None:
    del chunks[len(chunks) // 2]


def chunk_after_last(chunks: list[Chunk]) -> None:
    chunks.append(Chunk(records=[replication_pb2.SnapshotRecord(column=0, key=b"k")]))


def unknown_column(chunks: list[Chunk]) -> None:
    chunks[len(chunks) // 2].records[0].column = 2


def no_header(chunks: list[Chunk]) -> None:
    chunks[0].ClearField("header")


def second_header(chunks: list[Chunk]) -> None:
    chunks[1].header.CopyFrom(chunks[0].header)


def no_last_chunk(chunks: list[Chunk]) -> None:
    chunks[-1].last = False


def wrong_last_included(chunks: list[Chunk]) -> None:
    chunks[0].header.last_included.offset += 1


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (flip_value_byte, "checksum mismatch"),
        (drop_a_chunk, "record count mismatch"),
        (chunk_after_last, "after the last"),
        (unknown_column, "unknown column 2"),
        (no_header, "no header"),
        (second_header, "header on a chunk other than the first"),
        (no_last_chunk, "ended before its last chunk"),
        (wrong_last_included, "commit offset"),
    ],
)
def test_damaged_stream_is_rejected_and_nothing_changes(
    tmp_path: Path, chunks: list[Chunk], damage: Callable[[list[Chunk]], None], message: str
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    before = replica_state(shard_dir)
    damage(chunks)

    with pytest.raises(SnapshotError, match=message):
        install(shard_dir, chunks)

    assert staged_leftovers(shard_dir) == []
    assert replica_state(shard_dir) == before


def test_installer_refuses_use_after_an_error(tmp_path: Path, chunks: list[Chunk]) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    installer = SnapshotInstaller(shard_dir)
    with pytest.raises(SnapshotError, match="no header"):
        installer.add(chunks[1])
    with pytest.raises(SnapshotError, match="already finished or aborted"):
        installer.add(chunks[0])


def test_abort_removes_the_staging_directory(tmp_path: Path, chunks: list[Chunk]) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    before = replica_state(shard_dir)
    installer = SnapshotInstaller(shard_dir)
    installer.add(chunks[0])
    assert (shard_dir / STAGING_DIR_NAME).is_dir()
    installer.abort()
    installer.abort()
    assert staged_leftovers(shard_dir) == []
    assert replica_state(shard_dir) == before


# -- crash safety --------------------------------------------------------------------------


class Crash(Exception):
    pass


def crash(*args: object) -> None:
    raise Crash


@pytest.fixture
def reference_state(tmp_path: Path, chunks: list[Chunk]) -> tuple[Any, ...]:
    """The state an uninterrupted install leaves."""
    shard_dir = tmp_path / "reference"
    make_follower(shard_dir)
    install(shard_dir, chunks)
    return replica_state(shard_dir)


@pytest.mark.parametrize(
    "crash_before",
    [
        "_swap_staged_kv",  # marker written, nothing swapped
        "_reset_wal",  # KV swapped, old WAL
        "_store_log_base",  # WAL reset, no log base
        "_remove_marker",  # everything done but the marker
    ],
)
def test_a_crash_after_the_marker_is_completed_on_open(
    tmp_path: Path,
    chunks: list[Chunk],
    reference_state: tuple[Any, ...],
    monkeypatch: pytest.MonkeyPatch,
    crash_before: str,
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    with monkeypatch.context() as patch:
        patch.setattr(snapshot, crash_before, crash)
        with pytest.raises(Crash):
            install(shard_dir, chunks)
    assert (shard_dir / MARKER_FILE_NAME).exists()
    with pytest.raises(SnapshotError, match="pending"):
        SnapshotInstaller(shard_dir)

    assert finish_pending_install(shard_dir) is True

    assert staged_leftovers(shard_dir) == []
    assert replica_state(shard_dir) == reference_state
    assert finish_pending_install(shard_dir) is False
    assert replica_state(shard_dir) == reference_state


def test_a_crash_between_deleting_the_kv_and_the_rename(
    tmp_path: Path,
    chunks: list[Chunk],
    reference_state: tuple[Any, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    with monkeypatch.context() as patch:
        patch.setattr(snapshot, "_swap_staged_kv", crash)
        with pytest.raises(Crash):
            install(shard_dir, chunks)
    shutil.rmtree(shard_dir / "kv")

    assert finish_pending_install(shard_dir) is True
    assert replica_state(shard_dir) == reference_state


def test_a_crash_before_the_marker_keeps_the_old_state(
    tmp_path: Path, chunks: list[Chunk], monkeypatch: pytest.MonkeyPatch
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    before = replica_state(shard_dir)
    with monkeypatch.context() as patch:
        patch.setattr(snapshot, "_write_marker", crash)
        with pytest.raises(Crash):
            install(shard_dir, chunks)
    # The staged KV is complete, but without a marker it is not committed.
    assert staged_leftovers(shard_dir) == [STAGING_DIR_NAME]
    (shard_dir / (MARKER_FILE_NAME + ".tmp")).write_text('{"term": 3, "off')

    assert finish_pending_install(shard_dir) is False
    assert staged_leftovers(shard_dir) == []
    assert replica_state(shard_dir) == before


def test_an_interrupted_transfer_is_removed(tmp_path: Path, chunks: list[Chunk]) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    before = replica_state(shard_dir)
    installer = SnapshotInstaller(shard_dir)
    for chunk in chunks[:3]:
        installer.add(chunk)
    # The process dies mid-transfer: its RocksDB closes with it.
    staged = installer._stream.staged
    assert staged is not None
    staged.close()

    assert finish_pending_install(shard_dir) is False
    assert staged_leftovers(shard_dir) == []
    assert replica_state(shard_dir) == before


def test_a_new_transfer_replaces_an_interrupted_one(
    tmp_path: Path, chunks: list[Chunk], reference_state: tuple[Any, ...]
) -> None:
    shard_dir = tmp_path / "follower"
    make_follower(shard_dir)
    stale = RocksKv(shard_dir / STAGING_DIR_NAME)
    stale.write([(Column.RECORDS, b"from-an-earlier-transfer", b"")])
    stale.close()

    install(shard_dir, chunks)
    assert replica_state(shard_dir) == reference_state
