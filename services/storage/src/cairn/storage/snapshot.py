"""Shard snapshots: a consistent copy of a replica's KV, streamed in bounded chunks,
and its crash-safe install on a follower (replacing the follower's KV and WAL).

Sending. `snapshot_chunks` opens one plain RocksDB iterator per column when it is
called; each iterator reads the implicit snapshot taken at its creation, so a caller
on the event loop thread (where every KV write happens) gets the state between two
writes. (rocksdict's explicit `Snapshot` iterators ignore the snapshot: not used.)
Records go out column by column (RECORDS, then META), keys ascending. META records
that describe the sending replica itself (`meta.LOCAL_META_KEYS`: its incarnation)
are left out; the receiver keeps its own through the install.

Wire columns: `SnapshotRecord.column` is 0 for `Column.RECORDS`, 1 for `Column.META`;
any other number is a protocol error on receive.

Chunks: the first carries the header; each carries at most `max_chunk_records`
records and at most `max_chunk_bytes` bytes of keys plus values, except a chunk of a
single record larger than that; the last has `last`, `record_count` (records in the
whole snapshot) and `checksum`. An empty KV is one chunk: header and last.

Checksum: zlib.crc32 (starting value 0), chained over every record in stream order,
of the bytes

    column (1 byte) | len(key) (u32 little endian) | key | len(value) (u32 LE) | value

The length prefixes make the encoding unambiguous (moving a byte from a key to its
value, or between records, changes the input).

Installing. `SnapshotInstaller` writes the records into a fresh RocksDB in
`<shard>/kv.incoming`, one WriteBatch per chunk, so it holds at most one chunk in
memory. `finish` checks the count, the checksum and that the staged commit offset is
the header's last included offset, syncs the staged KV and then commits:

1. Write the marker `<shard>/snapshot-install.json` (last included term and offset)
   atomically: temp file, fsync, rename, fsync directory. From here on the install
   completes, also across a crash; before it, a crash leaves the old state and a
   staging directory that the next open deletes.
2. `finish_pending_install`, each step idempotent, so it is safe to redo after a
   crash at any point:
   a. if `kv.incoming` exists: delete `kv`, rename `kv.incoming` to `kv`, fsync;
   b. reset the WAL (`<shard>/wal`) so that its next offset is last included + 1;
   c. store the last included entry under `meta.LOG_BASE_KEY` in the KV and sync:
      the replica's head while its WAL is empty;
   d. delete the marker, fsync.

A shard calls `finish_pending_install` when it opens, before opening its KV and WAL.
The caller of `SnapshotInstaller.finish` must have closed the replica's KV and WAL,
and reopens them afterwards.

Errors: SnapshotError (a ValueError) for a damaged or out-of-protocol stream; the
staged data is then deleted and the replica's state is untouched.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from cairn.common.files import fsync_directory, temp_path, write_atomically
from cairn.proto import replication_pb2
from cairn.storage.core.meta import (
    COMMIT_OFFSET_KEY,
    LOCAL_META_KEYS,
    LOG_BASE_KEY,
    decode_i64,
    encode_entry_id,
)
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.kv import Change, Column, KvReader, KvStore, RocksKv
from cairn.storage.wal import Wal

KV_DIR_NAME = "kv"
WAL_DIR_NAME = "wal"
STAGING_DIR_NAME = "kv.incoming"
MARKER_FILE_NAME = "snapshot-install.json"

# Stream order is wire number order.
WIRE_COLUMNS: dict[int, Column] = {0: Column.RECORDS, 1: Column.META}

_COLUMN_AND_KEY_LENGTH = struct.Struct("<BI")
_VALUE_LENGTH = struct.Struct("<I")


class SnapshotError(ValueError):
    """A snapshot stream that cannot be installed (damaged, incomplete, out of protocol)."""


def record_checksum(crc: int, column: int, key: bytes, value: bytes) -> int:
    """`crc` chained over one record (see the module docstring); start from 0."""
    # Separate crc32 calls: no copy of a large value.
    crc = zlib.crc32(_COLUMN_AND_KEY_LENGTH.pack(column, len(key)), crc)
    crc = zlib.crc32(key, crc)
    crc = zlib.crc32(_VALUE_LENGTH.pack(len(value)), crc)
    return zlib.crc32(value, crc)


# -- sending -----------------------------------------------------------------------------


def snapshot_chunks(
    kv: KvReader,
    header: replication_pb2.SnapshotHeader,
    max_chunk_records: int,
    max_chunk_bytes: int,
) -> Iterator[replication_pb2.SnapshotChunk]:
    """The chunks of a snapshot of `kv` as it is now (see the module docstring).

    Not a generator function on purpose: the iterators, and so the point in time, are
    taken here, not on the first `next()`. Exhaust or close the result before closing
    `kv`.
    """
    if max_chunk_records < 1 or max_chunk_bytes < 1:
        raise ValueError(
            f"chunk limits must be >= 1, got {max_chunk_records} records, {max_chunk_bytes} bytes"
        )
    # KvReader.scan creates its iterator (and RocksDB its implicit snapshot) eagerly.
    scans = [
        (number, _shard_state(column, kv.scan(column, b"", None, bulk=True)))
        for number, column in WIRE_COLUMNS.items()
    ]
    return _chunks(scans, header, max_chunk_records, max_chunk_bytes)


def _shard_state(
    column: Column, items: Iterator[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes]]:
    """The records of the shard's state: what describes the sending replica
    itself (its incarnation) is not the receiver's."""
    if column is not Column.META:
        return items
    return ((key, value) for key, value in items if key not in LOCAL_META_KEYS)


def _chunks(
    scans: list[tuple[int, Iterator[tuple[bytes, bytes]]]],
    header: replication_pb2.SnapshotHeader,
    max_chunk_records: int,
    max_chunk_bytes: int,
) -> Iterator[replication_pb2.SnapshotChunk]:
    chunk = replication_pb2.SnapshotChunk()
    chunk.header.CopyFrom(header)
    chunk_bytes = 0
    record_count = 0
    crc = 0
    for number, items in scans:
        for key, value in items:
            record_bytes = len(key) + len(value)
            full = (
                len(chunk.records) >= max_chunk_records
                or chunk_bytes + record_bytes > max_chunk_bytes
            )
            # A chunk goes out once the next record does not fit, so the last chunk
            # (sent below) always holds a record unless the snapshot is empty.
            if full and len(chunk.records) > 0:
                yield chunk
                chunk = replication_pb2.SnapshotChunk()
                chunk_bytes = 0
            chunk.records.add(column=number, key=key, value=value)
            chunk_bytes += record_bytes
            record_count += 1
            crc = record_checksum(crc, number, key, value)
    chunk.last = True
    chunk.record_count = record_count
    chunk.checksum = crc
    yield chunk


# -- receiving ---------------------------------------------------------------------------


class SnapshotStream:
    """Checks one snapshot stream, chunk by chunk, and writes its records into a
    fresh KV (`open_staged`, called at the first chunk): the receiving side of
    the protocol, whatever the KV is stored in (a staging RocksDB on a pod).

    `add` each chunk in order (SnapshotError for one out of protocol), then
    `seal`: SnapshotError if the stream is incomplete or damaged; otherwise
    `local_meta` (the receiver's own META records, LOCAL_META_KEYS) is written
    and the staged KV synced, and it is the caller's to install."""

    def __init__(
        self, open_staged: Callable[[], KvStore], local_meta: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        if any(key not in LOCAL_META_KEYS for key, _ in local_meta):
            raise ValueError(f"not local META keys: {[key for key, _ in local_meta]}")
        self._open_staged = open_staged
        self._local_meta = list(local_meta)
        self.staged: KvStore | None = None
        self._header: replication_pb2.SnapshotHeader | None = None
        self._record_count = 0
        self._crc = 0
        self._last: replication_pb2.SnapshotChunk | None = None  # without its records

    def add(self, chunk: replication_pb2.SnapshotChunk) -> None:
        if self._last is not None:
            raise SnapshotError("a chunk after the last one")
        if self._header is None:
            self._start(chunk)
        elif chunk.HasField("header"):
            raise SnapshotError("a header on a chunk other than the first")
        # Validate the whole chunk before writing any of it.
        changes: list[Change] = []
        crc = self._crc
        for record in chunk.records:
            column = WIRE_COLUMNS.get(record.column)
            if column is None:
                raise SnapshotError(f"unknown column {record.column}")
            key, value = record.key, record.value
            crc = record_checksum(crc, record.column, key, value)
            if column is Column.META and key in LOCAL_META_KEYS:
                continue  # the sender's own, not ours (see _shard_state)
            changes.append((column, key, value))
        assert self.staged is not None
        if changes:
            self.staged.write(changes)
        self._crc = crc
        self._record_count += len(chunk.records)
        if chunk.last:
            self._last = replication_pb2.SnapshotChunk(
                last=True, record_count=chunk.record_count, checksum=chunk.checksum
            )

    def _start(self, chunk: replication_pb2.SnapshotChunk) -> None:
        if not chunk.HasField("header"):
            raise SnapshotError("the first chunk has no header")
        if not chunk.header.HasField("last_included"):
            raise SnapshotError("the header has no last included entry")
        self._header = replication_pb2.SnapshotHeader()
        self._header.CopyFrom(chunk.header)
        self.staged = self._open_staged()

    def seal(self) -> EntryId:
        """Verify the stream and make the staged KV durable; the last included entry."""
        if self._header is None or self._last is None:
            raise SnapshotError("the stream ended before its last chunk")
        if self._record_count != self._last.record_count:
            raise SnapshotError(
                f"record count mismatch: received {self._record_count},"
                f" the sender counted {self._last.record_count}"
            )
        if self._crc != self._last.checksum:
            raise SnapshotError(
                f"checksum mismatch: received {self._crc:#010x},"
                f" the sender computed {self._last.checksum:#010x}"
            )
        last_included = EntryId(self._header.last_included.term, self._header.last_included.offset)
        staged = self.staged
        assert staged is not None
        commit_offset = decode_i64(staged.get(Column.META, COMMIT_OFFSET_KEY), -1)
        if commit_offset != last_included.offset:
            raise SnapshotError(
                f"the snapshot's commit offset {commit_offset} is not its last included"
                f" offset {last_included.offset}"
            )
        if self._local_meta:
            staged.write([(Column.META, key, value) for key, value in self._local_meta])
        staged.sync()
        return last_included


def log_base_change(last_included: EntryId) -> Change:
    """The META record that makes `last_included` the replica's head while its
    log is empty (after an install)."""
    return (
        Column.META,
        LOG_BASE_KEY,
        encode_entry_id(last_included.term, last_included.offset),
    )


class SnapshotInstaller:
    """Receives one snapshot stream for the shard replica in `shard_dir`, staged
    in `kv.incoming` (SnapshotStream), then installed crash-safely.

    `add` each chunk in order, then `finish`; on any SnapshotError the staged data is
    already deleted. `abort` drops a transfer that will not complete.
    """

    def __init__(self, shard_dir: Path, local_meta: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """`local_meta`: the receiving replica's own META records (LOCAL_META_KEYS),
        written into the staged KV so the install keeps them atomically."""
        self._shard_dir = shard_dir
        self._staging_dir = shard_dir / STAGING_DIR_NAME
        self._stream = SnapshotStream(lambda: RocksKv(self._staging_dir), local_meta)
        if (shard_dir / MARKER_FILE_NAME).exists():
            # Its staged KV is committed: a new transfer must not overwrite it.
            raise SnapshotError(
                f"{shard_dir}: an earlier snapshot install is pending;"
                " run finish_pending_install first"
            )
        # A staging directory without a marker is an interrupted transfer.
        _remove_dir(self._staging_dir)
        self._closed = False  # finished or aborted

    def add(self, chunk: replication_pb2.SnapshotChunk) -> None:
        self._check_open()
        try:
            self._stream.add(chunk)
        except SnapshotError:
            self.abort()
            raise

    def finish(self) -> EntryId:
        """Verify the stream, then install it; returns the last included entry.

        SnapshotError if the stream is incomplete or damaged (staging deleted, replica
        untouched). Any other error after the marker is written leaves an install that
        `finish_pending_install` completes.
        """
        self._check_open()
        try:
            # Durable before the marker: the marker says the staged KV is complete.
            last_included = self._stream.seal()
            staged = self._stream.staged
            assert staged is not None
            staged.close()
            self._stream.staged = None
        except BaseException:
            self.abort()
            raise
        self._closed = True
        # Once the marker may exist the staged KV is never deleted, even on error here.
        _write_marker(self._shard_dir, last_included)
        finish_pending_install(self._shard_dir)
        return last_included

    def abort(self) -> None:
        """Drop the staged data. Does nothing once `finish` has committed the install."""
        if self._closed:
            return
        self._closed = True
        if self._stream.staged is not None:
            self._stream.staged.close()
            self._stream.staged = None
        _remove_dir(self._staging_dir)

    def _check_open(self) -> None:
        if self._closed:
            raise SnapshotError("the snapshot installer is already finished or aborted")


# -- the install steps -------------------------------------------------------------------


def finish_pending_install(shard_dir: Path) -> bool:
    """Complete an install whose marker is written; True if there was one.

    Idempotent. Without a marker, deletes what an interrupted transfer left (the
    staging directory) and keeps the replica's state. Call before opening the KV and WAL.
    """
    marker = read_marker(shard_dir)
    if marker is None:
        _remove_dir(shard_dir / STAGING_DIR_NAME)
        _remove_file(shard_dir / temp_path(Path(MARKER_FILE_NAME)).name)
        return False
    _swap_staged_kv(shard_dir)
    _reset_wal(shard_dir, marker.offset + 1)
    _store_log_base(shard_dir, marker)
    _remove_marker(shard_dir)
    return True


def read_marker(shard_dir: Path) -> EntryId | None:
    """The last included entry of a pending install, or None if there is none."""
    try:
        text = (shard_dir / MARKER_FILE_NAME).read_text()
    except FileNotFoundError:
        return None
    fields = json.loads(text)
    return EntryId(int(fields["term"]), int(fields["offset"]))


def _write_marker(shard_dir: Path, last_included: EntryId) -> None:
    data = json.dumps({"term": last_included.term, "offset": last_included.offset})
    write_atomically(shard_dir / MARKER_FILE_NAME, data)


def _swap_staged_kv(shard_dir: Path) -> None:
    staging = shard_dir / STAGING_DIR_NAME
    live = shard_dir / KV_DIR_NAME
    if not staging.exists():
        if not live.is_dir():
            raise SnapshotError(f"{shard_dir}: install marker present but no KV to install")
        return  # swapped before a crash
    # A crash part way through the delete leaves part of the old KV: deleted again on
    # the next try, as the marker is still there.
    _remove_dir(live)
    staging.rename(live)
    fsync_directory(shard_dir)


def _reset_wal(shard_dir: Path, next_offset: int) -> None:
    wal = Wal.open(shard_dir / WAL_DIR_NAME)
    try:
        wal.reset(next_offset)  # durable when it returns
    finally:
        wal.close()


def _store_log_base(shard_dir: Path, last_included: EntryId) -> None:
    kv = RocksKv(shard_dir / KV_DIR_NAME)
    try:
        kv.write([log_base_change(last_included)])
        kv.sync()
    finally:
        kv.close()


def _remove_marker(shard_dir: Path) -> None:
    (shard_dir / MARKER_FILE_NAME).unlink(missing_ok=True)
    fsync_directory(shard_dir)


def _remove_dir(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
        fsync_directory(path.parent)


def _remove_file(path: Path) -> None:
    if path.exists():
        path.unlink()
        fsync_directory(path.parent)
