"""One WAL segment file: records with consecutive offsets starting at ``base_offset``.

The file is named ``{base_offset:020d}.wal`` so that a directory listing sorts segments in
log order and an empty segment still says which offset comes next. A segment keeps the
byte position of every record in an ``array('Q')`` so reads seek straight to an offset.

Only the active (last) segment of a log keeps its file descriptor open: sealed segments
are opened on demand for reads, which bounds the number of descriptors a log holds.

Zero-filled room. The file may be longer than its records: the log can fill the space
ahead of the write position with zeros (``extend_zeroed``), and records are then written
over those zeros at explicit positions. On Linux filesystems an fdatasync after an
append that grows the file must also commit the new size and block mapping to the
journal, which is much slower than an fdatasync after an overwrite inside blocks
already written (and is where other files' unsynced writes queue up in front of
ours; measurements: docs/performance.md, "WAL zero-filled room"). Zeros never
decode as a record (a record's CRC of all-zero fields is not zero), so the scan ends
there; a tail that is all zeros is a clean end, not damage.

Recycled files. A trimmed segment's file can be kept as a spare and reused, as it is,
by a later segment: its room then holds the records of its previous life, not zeros.
Those never read back as records of the new segment: every one of them has an offset
below the new base (a spare is named by its last offset, and only reused past it), and
the scan accepts only consecutive offsets from the base, so it ends at the first old
record, or at the first bytes that do not decode. In the last segment recovery cuts
them off like a torn tail; a segment is sealed only once its room is zeros
(``zero_room``), so a sealed segment's scan ends at zeros, as it always has.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

from cairn.storage.core.entries import LogEntry
from cairn.storage.wal.record import (
    BadRecordError,
    TornRecordError,
    WalCorruptionError,
    WalError,
    decode,
)

# Reads (recovery scans and log reads) fetch this much per pread: large enough to amortize
# the syscall, small enough not to hold a whole 64 MiB segment in memory.
READ_CHUNK_BYTES = 1024 * 1024

_FILE_NAME = re.compile(r"^(\d{20})\.wal$")
# Writes go to explicit positions (pwrite), not O_APPEND: the file may extend past the
# last record with zero-filled room.
_OPEN_FLAGS_WRITE = os.O_RDWR | os.O_CLOEXEC
_ZEROS = bytes(READ_CHUNK_BYTES)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.wal"


# A retired segment file kept for reuse, named ``{last_offset:020d}.spare`` after the
# last record it holds. Not a segment's name, so recovery never reads it.
SPARE_SUFFIX = ".spare"
_SPARE_NAME = re.compile(r"^(\d{20})\.spare$")


def spare_file_name(last_offset: int) -> str:
    return f"{last_offset:020d}{SPARE_SUFFIX}"


def parse_spare_file_name(name: str) -> int | None:
    """The last offset a spare file may hold a record of, or None if it is not a spare."""
    match = _SPARE_NAME.match(name)
    return int(match.group(1)) if match else None


def spare_may_start(spare: Path, base_offset: int) -> bool:
    """Whether the spare's file may hold a segment starting at ``base_offset``: only
    if every record of its previous life comes before it (see the module doc)."""
    last_offset = parse_spare_file_name(spare.name)
    return last_offset is not None and last_offset < base_offset


def _write_zeros(fd: int, start_bytes: int, end_bytes: int) -> None:
    """Zeros over [start, end), in chunks."""
    position = start_bytes
    while position < end_bytes:
        size = min(len(_ZEROS), end_bytes - position)
        position += os.pwrite(fd, memoryview(_ZEROS)[:size], position)


def parse_segment_file_name(name: str) -> int | None:
    """The base offset encoded in a segment file name, or None if it is not a segment."""
    match = _FILE_NAME.match(name)
    return int(match.group(1)) if match else None


class Segment:
    __slots__ = (
        "_fd",
        "allocated_bytes",
        "base_offset",
        "path",
        "positions",
        "room_is_zeros",
        "size_bytes",
    )

    def __init__(
        self,
        path: Path,
        base_offset: int,
        positions: array[int],
        size_bytes: int,
        fd: int | None,
        allocated_bytes: int | None = None,
        *,
        room_is_zeros: bool = True,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.positions = positions  # byte position of each record, by offset - base_offset
        self.size_bytes = size_bytes  # end of the last record: where the next one goes
        # The file's length: size_bytes plus the room after it, if any.
        self.allocated_bytes = size_bytes if allocated_bytes is None else allocated_bytes
        # False while the room may hold a recycled file's old bytes (see the module doc).
        self.room_is_zeros = room_is_zeros
        self._fd = fd  # open only while this is the active segment

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> Segment:
        """Create an empty segment file open for appends. The caller fsyncs the directory."""
        path = directory / segment_file_name(base_offset)
        # O_EXCL: a file already there would mean the in-memory view of the log is wrong.
        fd = os.open(path, _OPEN_FLAGS_WRITE | os.O_CREAT | os.O_EXCL, 0o644)
        return cls(path, base_offset, array("Q"), 0, fd)

    @classmethod
    def reuse(cls, spare: Path, directory: Path, base_offset: int) -> Segment:
        """Turn a spare file into an empty segment whose room is the whole file (its
        old bytes: the spare's last offset must be below ``base_offset``). The caller
        fsyncs the directory."""
        if not spare_may_start(spare, base_offset):
            raise WalError(f"{spare} cannot start a segment at offset {base_offset}")
        path = directory / segment_file_name(base_offset)
        # link, then unlink the spare's name: fails if the segment exists (like O_EXCL
        # in create), and no blocks are freed (an unlink that frees them waits for
        # discards on some disks, stalling every fsync on the device).
        os.link(spare, path)
        os.unlink(spare)
        fd = os.open(path, _OPEN_FLAGS_WRITE)
        return cls(
            path,
            base_offset,
            array("Q"),
            0,
            fd,
            allocated_bytes=os.fstat(fd).st_size,
            room_is_zeros=False,
        )

    def retire_as_spare(self) -> Path:
        """Leave the log as a spare file, its bytes as they are: renamed out of the log
        (like a deletion, as far as recovery sees) to a name that says the last offset
        it holds. The caller fsyncs the directory.

        Not zeroed: zeroing a 64 MiB file kept the disk busy for 300-600 ms, and as the
        replicas of a shard trim at the same log size, it slowed every replica's WAL
        syncs at once (and with them the writes that need a majority)."""
        self.close()
        spare = self.path.with_name(spare_file_name(self.last_offset))
        os.rename(self.path, spare)
        return spare

    @classmethod
    def recover(
        cls, path: Path, base_offset: int, *, is_last: bool, max_record_bytes: int
    ) -> Segment:
        """Scan the file and index its records.

        Zeros from the end of the last record to the end of the file are zero-filled room,
        not damage (the room is kept for the next appends). Other damage in the last segment
        is a torn tail (the crash hit an unsynced write): the file is cut back to the last
        good record. Damage in an earlier segment raises WalCorruptionError (`Wal.open`
        decides whether the segments after it make it a torn tail after all).
        """
        fd = os.open(path, _OPEN_FLAGS_WRITE if is_last else os.O_RDONLY | os.O_CLOEXEC)
        try:
            positions, valid_size_bytes, problem = _scan(fd, base_offset, max_record_bytes)
            allocated_bytes = os.fstat(fd).st_size
            if problem is not None and _zeros_between(fd, valid_size_bytes, allocated_bytes):
                problem = None
            if problem is not None:
                if not is_last:
                    raise WalCorruptionError(f"{path}: {problem} at byte {valid_size_bytes}")
                os.ftruncate(fd, valid_size_bytes)
                os.fdatasync(fd)
                allocated_bytes = valid_size_bytes
        except BaseException:
            os.close(fd)
            raise
        if not is_last:
            os.close(fd)
        return cls(
            path,
            base_offset,
            positions,
            valid_size_bytes,
            fd if is_last else None,
            allocated_bytes,
        )

    @property
    def count(self) -> int:
        return len(self.positions)

    @property
    def last_offset(self) -> int:
        """Offset of the last record; base_offset - 1 when the segment is empty."""
        return self.base_offset + len(self.positions) - 1

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise WalError(f"{self.path} is not open for appends")
        return self._fd

    def open_for_append(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, _OPEN_FLAGS_WRITE)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def delete(self) -> None:
        self.close()
        self.path.unlink()

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def reserve(self, record_sizes_bytes: Sequence[int]) -> int:
        """Place records after the last one (in the index only); return where their bytes
        go. The caller writes them there (`write`) before it reads or syncs them."""
        start = self.size_bytes
        position = start
        for size in record_sizes_bytes:
            self.positions.append(position)
            position += size
        self.size_bytes = position
        self.allocated_bytes = max(self.allocated_bytes, position)
        return start

    def append(self, data: bytes | bytearray, record_sizes_bytes: Sequence[int]) -> None:
        """Write records after the last one, then index them."""
        start = self.size_bytes
        try:
            self.write(data, start)
        except OSError:
            # A partial record left at the tail would sit in front of every later append and
            # make recovery drop them, so cut it off (and the room after it) before
            # reporting the failure.
            try:
                os.ftruncate(self.fd, start)
            except OSError as cleanup_exc:
                raise WalError(
                    f"{self.path}: write failed and the partial record could not be removed"
                ) from cleanup_exc
            self.allocated_bytes = start
            raise
        self.reserve(record_sizes_bytes)

    def write(self, data: bytes | bytearray, start: int) -> None:
        """Write reserved records' bytes at `start`, with as few writes as the OS allows
        (over zero-filled room where there is some). Raises OSError."""
        fd = self.fd
        with memoryview(data) as view:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, view[written:], start + written)

    def zero_room(self) -> None:
        """Write zeros over the room if it may hold a recycled file's old bytes (before
        the segment is sealed: see the module doc). Raises OSError."""
        if not self.room_is_zeros:
            _write_zeros(self.fd, self.size_bytes, self.allocated_bytes)
            self.room_is_zeros = True

    def extend_zeroed(self, end_bytes: int) -> None:
        """Fill the file with zeros from the end of its room to ``end_bytes``. Made durable
        by the next sync, like an append; a crash before that leaves a shorter file or
        zeros, both a clean end to recovery."""
        if end_bytes > self.allocated_bytes:
            _write_zeros(self.fd, self.allocated_bytes, end_bytes)
            self.allocated_bytes = end_bytes

    def truncate(self, keep_count: int) -> None:
        """Keep only the first ``keep_count`` records; durable when it returns."""
        new_size = self.positions[keep_count] if keep_count < self.count else self.size_bytes
        # Cutting the file (room included) leaves no record of the removed ones behind
        # to be read back as the continuation of a later, shorter append.
        os.ftruncate(self.fd, new_size)
        os.fdatasync(self.fd)
        del self.positions[keep_count:]
        self.size_bytes = new_size
        self.allocated_bytes = new_size
        self.room_is_zeros = True  # (there is none)

    def _record_end(self, index: int) -> int:
        return self.positions[index + 1] if index + 1 < len(self.positions) else self.size_bytes

    def read(
        self, first_offset: int, last_offset: int, max_record_bytes: int
    ) -> Iterator[LogEntry]:
        """Entries first_offset..last_offset (inclusive; both must be in this segment)."""
        first_index = first_offset - self.base_offset
        last_index = last_offset - self.base_offset
        owned_fd = self._fd is None
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC) if owned_fd else self.fd
        try:
            index = first_index
            while index <= last_index:
                # One pread for as many whole records as fit in a chunk (at least one).
                start = self.positions[index]
                chunk_last = index
                while (
                    chunk_last < last_index
                    and self._record_end(chunk_last + 1) - start <= READ_CHUNK_BYTES
                ):
                    chunk_last += 1
                data = os.pread(fd, self._record_end(chunk_last) - start, start)
                cursor = 0
                for expected in range(index + self.base_offset, chunk_last + self.base_offset + 1):
                    try:
                        entry, next_cursor = decode(data, cursor, max_record_bytes)
                    except (TornRecordError, BadRecordError) as exc:
                        raise WalCorruptionError(
                            f"{self.path}: {exc} at byte {start + cursor}"
                        ) from exc
                    if entry.offset != expected:
                        raise WalCorruptionError(
                            f"{self.path}: offset {entry.offset} where {expected} was expected"
                            f" at byte {start + cursor}"
                        )
                    cursor = next_cursor
                    yield entry
                index = chunk_last + 1
        finally:
            if owned_fd:
                os.close(fd)


def holds_a_record(path: Path, base_offset: int, max_record_bytes: int) -> bool:
    """Whether the segment file starts with a valid record (read only)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        positions, _, _ = _scan(fd, base_offset, max_record_bytes)
    finally:
        os.close(fd)
    return len(positions) > 0


def _scan(fd: int, base_offset: int, max_record_bytes: int) -> tuple[array[int], int, str | None]:
    """Index the valid prefix of a segment file.

    Returns (record positions, size of the valid prefix in bytes, description of what ends
    the valid prefix or None if the whole file is valid).
    """
    file_size_bytes = os.fstat(fd).st_size
    positions: array[int] = array("Q")
    buffer = bytearray()
    buffer_start = 0  # file position of buffer[0]
    cursor = 0  # position in buffer of the next record
    read_end = 0  # file position up to which the buffer holds data
    expected_offset = base_offset
    while True:
        try:
            entry, next_cursor = decode(buffer, cursor, max_record_bytes)
        except TornRecordError as exc:
            if read_end < file_size_bytes:
                del buffer[:cursor]
                buffer_start += cursor
                cursor = 0
                chunk = os.pread(fd, min(READ_CHUNK_BYTES, file_size_bytes - read_end), read_end)
                if not chunk:  # the file shrank under us: treat what we have as the end
                    file_size_bytes = read_end
                buffer += chunk
                read_end += len(chunk)
                continue
            if cursor == len(buffer):
                return positions, buffer_start + cursor, None
            return positions, buffer_start + cursor, f"torn record ({exc})"
        except BadRecordError as exc:
            return positions, buffer_start + cursor, str(exc)
        if entry.offset != expected_offset:
            return (
                positions,
                buffer_start + cursor,
                f"record has offset {entry.offset} where {expected_offset} was expected",
            )
        positions.append(buffer_start + cursor)
        expected_offset += 1
        cursor = next_cursor


def _zeros_between(fd: int, start: int, end: int) -> bool:
    """Whether the file holds only zero bytes in [start, end)."""
    position = start
    while position < end:
        chunk = os.pread(fd, min(READ_CHUNK_BYTES, end - position), position)
        if not chunk:
            return True  # the file ends early: nothing but what was checked
        if chunk.count(0) != len(chunk):
            return False
        position += len(chunk)
    return True
