"""The write-ahead log of a storage pod: a directory of segment files."""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from cairn.common.files import fsync_directory
from cairn.storage.core.entries import LogEntry
from cairn.storage.wal.record import (
    U32_MAX,
    U64_MAX,
    WalCorruptionError,
    WalError,
    check_entry,
    encode_into,
)
from cairn.storage.wal.segment import (
    SPARE_SUFFIX,
    Segment,
    holds_a_record,
    parse_segment_file_name,
    parse_spare_file_name,
    spare_file_name,
    spare_may_start,
)

log = logging.getLogger(__name__)

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WalOptions:
    # Roll to a new segment once the active one reaches this size (a group written by
    # append_many is never split, so a segment may end up somewhat larger).
    segment_size_bytes: int = 64 * _MiB
    # Larger payloads are rejected on append and treated as corruption when read.
    max_record_bytes: int = 64 * _MiB
    # Keep about this much zero-filled room ahead of the active segment's write position
    # (filled by ``sync``, on its thread, a chunk of this size whenever less than half is
    # left), so that appends overwrite blocks already written and their fdatasync has no
    # file size or block mapping to commit (see segment.py). 0: plain appends.
    zero_fill_ahead_bytes: int = 0
    # Keep up to this many trimmed segment files for the next segments to reuse, as
    # they are: deleting a file on a disk mounted with `discard` stalls every fsync on
    # the device (measurements: docs/performance.md, "WAL spare segments"), and a
    # reused file's blocks are already written, so the fdatasyncs of appends into it
    # have no block mapping to commit. Trims beyond the spares delete.
    spare_segments: int = 0

    def __post_init__(self) -> None:
        if self.segment_size_bytes <= 0:
            raise ValueError(f"segment_size_bytes must be > 0, got {self.segment_size_bytes}")
        if not 0 <= self.max_record_bytes <= U32_MAX:
            raise ValueError(f"max_record_bytes must fit a u32, got {self.max_record_bytes}")
        if self.zero_fill_ahead_bytes < 0:
            raise ValueError(
                f"zero_fill_ahead_bytes must be >= 0, got {self.zero_fill_ahead_bytes}"
            )
        if self.spare_segments < 0:
            raise ValueError(f"spare_segments must be >= 0, got {self.spare_segments}")


_DEFAULT_OPTIONS = WalOptions()


class Wal:
    """An append-only log of LogEntry with consecutive offsets and non-decreasing terms.

    Durability contract: an appended record survives power loss or an OS crash once
    ``sync`` has returned (equivalently once ``synced_offset >= offset``). Until then a
    crash, of this process included, may lose it and every record after it, never one
    before it. (A crash after a rollover may leave the sealed segment torn with the new
    segment's file behind it; recovery removes that file if it holds no record, see
    ``_any_record``.) Records that fit the active segment's zero-filled room (see
    ``zero_fill_ahead_bytes``) stay in memory until ``sync`` writes them, on its own
    thread, with one positioned write per append call right before its fdatasync: the
    appending thread (the event loop) then makes no system call for them, and does not
    lose the GIL to the other threads while it would (a pwrite on a busy server's loop
    takes several times as long as alone; measurements: docs/performance.md, "WAL
    writes on the sync thread"). Reads, ``close`` and a rollover write them
    first. Records past the room are written by the append itself, so that a full disk
    fails that append alone, with no partial record left. ``truncate_after``,
    ``trim_before`` and ``reset`` are durable when they return. Trimmed segment files
    kept as spares keep their records; a rollover reuses one only for a segment that
    starts past its last offset, and zeroes the room left in a segment before it seals
    it, so no record of a spare's previous life can be read back (see segment.py).

    Threading contract: ``append``/``append_many`` and every other method run on one
    thread (the event loop), except ``sync`` (which also tops up the zero-filled room,
    under ``_lock``) and ``trim_before``, which may run on another thread at the same
    time as appends (group commit: the loop keeps appending while an executor thread
    writes and fdatasyncs). ``_lock`` guards the segment list, the append position and
    the records not yet written, and is only ever held briefly, never across a disk
    flush, so the loop never waits for an fdatasync. ``_write_lock`` is held while
    records taken from that list are written, so that a reader finds none half written
    by another thread. Rolling over to a new segment creates its file without syncing
    anything; the sealed segment (still open) and the directory entry of the new one
    are made durable by the next ``sync``, before it reports them. ``_sync_lock`` is held
    by ``sync`` for its whole duration and by anything that closes or deletes a file
    descriptor other than rollover (truncate, trim, reset, close), so an fd is never
    closed under a running fdatasync. Lock order: ``_sync_lock``, ``_write_lock``,
    ``_lock``.

    After an fdatasync or write failure that leaves the log's state uncertain, the Wal
    refuses further writes (WalError); reopen it to recover from what is on disk.
    """

    def __init__(self, directory: Path, options: WalOptions, segments: list[Segment]) -> None:
        self._directory = directory
        self._options = options
        self._segments = segments  # in offset order; only the last may be empty
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._write_lock = threading.Lock()
        # Appended records not yet written: (segment, position, their bytes), in order.
        self._unwritten: list[tuple[Segment, int, bytearray]] = []
        self._last_term = -1
        self._synced_offset = -1
        self._closed = False
        self._failure: str | None = None
        # Sealed by rollover but not yet fdatasync'd (their fds stay open until then),
        # and whether the directory has entries (new segments) not yet fsync'd.
        self._unsynced_sealed: list[Segment] = []
        self._directory_changes = 0
        self._directory_changes_synced = 0
        # Files left by trims, for rollovers to reuse (see WalOptions).
        self._spares: list[Path] = []

    @classmethod
    def open(cls, directory: Path, options: WalOptions = _DEFAULT_OPTIONS) -> Wal:
        """Open (creating if needed) the log in ``directory`` and recover it."""
        directory = Path(directory)
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            fsync_directory(directory.parent)
        listing = sorted(directory.iterdir())
        found = sorted(
            (base, path)
            for path in listing
            if (base := parse_segment_file_name(path.name)) is not None
        )
        segments: list[Segment] = []
        max_record_bytes = options.max_record_bytes
        try:
            for index, (base, path) in enumerate(found):
                is_last = index == len(found) - 1
                # Where the chain of segments breaks: the torn one, and the files after it.
                if segments and base != segments[-1].last_offset + 1:
                    torn = segments.pop()
                    torn_base, torn_path, later = torn.base_offset, torn.path, found[index:]
                    error = WalCorruptionError(
                        f"{path}: segment starts at offset {base} but {torn.path} ends"
                        f" at offset {torn.last_offset} (byte {torn.size_bytes})"
                    )
                else:
                    try:
                        segments.append(
                            Segment.recover(
                                path, base, is_last=is_last, max_record_bytes=max_record_bytes
                            )
                        )
                        continue
                    except WalCorruptionError as damage:
                        if is_last:
                            raise
                        torn_base, torn_path, later = base, path, found[index + 1 :]
                        error = damage
                if _any_record(later, max_record_bytes):
                    raise error
                _remove_after_tear(directory, later)
                # Now the last segment: its damaged tail is cut like any torn tail.
                segments.append(
                    Segment.recover(
                        torn_path, torn_base, is_last=True, max_record_bytes=max_record_bytes
                    )
                )
                break
            wal = cls(directory, options, segments)
            wal._spares = _recover_spares(listing, options.spare_segments)
            if segments:
                # Recovery promises synced_offset == last_offset: make it true even if the
                # previous process died with records only in the page cache.
                segments[-1].sync()
                last = wal.last_entry()
                wal._last_term = -1 if last is None else last.term
                wal._synced_offset = wal.last_offset
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        return wal

    # -- state -----------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def options(self) -> WalOptions:
        return self._options

    @property
    def first_offset(self) -> int:
        """Offset of the first entry, or -1 if the log is empty."""
        # Only the last segment can be empty, so the log is empty iff the first one is.
        if not self._segments or self._segments[0].count == 0:
            return -1
        return self._segments[0].base_offset

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; -1 if empty, next_offset - 1 right after reset."""
        return self._segments[-1].last_offset if self._segments else -1

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def synced_offset(self) -> int:
        """Highest offset known to be durable (fdatasync'd); -1 if none."""
        return self._synced_offset

    def last_entry(self) -> LogEntry | None:
        return None if self.first_offset < 0 else self.get(self.last_offset)

    def total_size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    def segment_count(self) -> int:
        return len(self._segments)

    # -- writes ----------------------------------------------------------------------------

    def append(self, entry: LogEntry) -> None:
        """Append one entry; its offset must be last_offset + 1 (anything for a new log)."""
        self.append_many((entry,))

    def append_many(self, entries: Sequence[LogEntry]) -> None:
        """Append a group of entries with a single os.write (all or nothing on error)."""
        self._check_writable()
        if not entries:
            return
        # Validate the whole group before writing anything, so a bad entry leaves no trace.
        expected = self.last_offset + 1 if self._segments else None
        last_term = self._last_term
        buffer = bytearray()
        record_sizes_bytes = []
        for entry in entries:
            check_entry(entry, self._options.max_record_bytes)
            if expected is not None and entry.offset != expected:
                raise ValueError(f"entry offset {entry.offset}, expected {expected}")
            if entry.term < last_term:
                raise ValueError(f"entry term {entry.term} is lower than last term {last_term}")
            expected = entry.offset + 1
            last_term = entry.term
            record_sizes_bytes.append(encode_into(buffer, entry))

        active = self._segments[-1] if self._segments else None
        if active is None or (
            active.count > 0 and active.size_bytes >= self._options.segment_size_bytes
        ):
            # The segment's records go to the OS before the next file exists: recovery
            # reads a later segment as the continuation of a complete earlier one.
            self._write_appended()
            self._roll(entries[0].offset)
        with self._lock:
            segment = self._segments[-1]
            if segment.size_bytes + len(buffer) <= segment.allocated_bytes:
                # Into zero-filled room (allocated blocks: no write there can find the
                # disk full): written by the next sync, or read, or close.
                self._unwritten.append((segment, segment.reserve(record_sizes_bytes), buffer))
                self._last_term = last_term
                return
        # Past the room: written now, after what is still unwritten, so that a full disk
        # fails this append alone (its partial record cut off) and the log takes the next.
        self._write_appended()
        with self._lock:
            try:
                segment.append(buffer, record_sizes_bytes)
            except WalError as exc:
                self._failure = str(exc)
                raise
            self._last_term = last_term

    def _roll(self, base_offset: int) -> None:
        """Seal the active segment (if any) and start a new one at ``base_offset``.

        Nothing is synced here (this runs on the appending thread): the next ``sync``
        flushes the sealed segment and the directory before it reports their entries."""
        with self._lock:
            old = self._segments[-1] if self._segments else None
            if old is not None:
                # Zeros over a recycled file's old bytes after the last record, before
                # the next file exists (what a sealed segment must end with, a kill
                # included); at most the room one group left: a few pages, as a rollover
                # comes once a segment fills its file.
                try:
                    old.zero_room()
                except OSError as exc:
                    self._failure = f"write to {old.path} failed: {exc}"
                    raise WalError(self._failure) from exc
            spare = self._take_spare(base_offset)
            if spare is not None:
                new = Segment.reuse(spare, self._directory, base_offset)
            else:
                new = Segment.create(self._directory, base_offset)
            self._segments.append(new)
            if old is not None:
                self._unsynced_sealed.append(old)
            self._directory_changes += 1

    def _take_spare(self, base_offset: int) -> Path | None:
        """A spare whose records all come before ``base_offset`` (caller holds ``_lock``):
        only those can start a segment there (a reset may leave ones that cannot yet)."""
        for index, spare in enumerate(self._spares):
            if spare_may_start(spare, base_offset):
                return self._spares.pop(index)
        return None

    def sync(self) -> int:
        """Make every entry appended before this call durable; return synced_offset.

        Safe to call from another thread while appends go on (see the class docstring).
        """
        with self._sync_lock:
            with self._write_lock:
                with self._lock:
                    self._check_writable()
                    covered_offset = self.last_offset
                    if not self._segments or covered_offset <= self._synced_offset:
                        return self._synced_offset
                    active = self._segments[-1]
                    unwritten = self._take_unwritten()
                self._write(unwritten)
            # Appends carry on during these flushes; they are covered by the next sync.
            # Sealed segments first: a later segment's records are never made durable
            # before an earlier segment's tail (recovery reads a tear with records after
            # it as corruption). A rollover since `active` was taken has sealed it: then
            # it was flushed (and closed) with the sealed ones.
            if active not in self._flush_rollovers():
                self._fdatasync(active)
            with self._lock:
                self._synced_offset = max(self._synced_offset, covered_offset)
                synced_offset = self._synced_offset
                self._zero_fill_ahead()
            return synced_offset

    def _zero_fill_ahead(self) -> None:
        """Top up the active segment's zero-filled room (caller holds both locks).

        Under ``_lock`` so that no append writes into the range being filled; a chunk
        goes to the page cache in well under a millisecond, so an append waits at most
        that long. The room never reaches past the segment's rollover size."""
        chunk = self._options.zero_fill_ahead_bytes
        if not chunk or self._failure is not None:
            return
        active = self._segments[-1]
        if active.allocated_bytes - active.size_bytes >= chunk // 2:
            return
        end = min(active.allocated_bytes + chunk, self._options.segment_size_bytes)
        if end <= active.allocated_bytes:
            return
        # The room is only a speed-up and the zeros written so far are a clean end: on an
        # error appends go on (past the room, as plain appends), and a disk that is
        # really full or failing fails them, where it is reported.
        with contextlib.suppress(OSError):
            active.extend_zeroed(end)

    def _flush_rollovers(self) -> list[Segment]:
        """fdatasync the segments sealed since the last sync (then close them) and
        fsync the directory if segments were created; return those segments. Caller
        holds ``_sync_lock``."""
        with self._write_lock:
            with self._lock:
                sealed = list(self._unsynced_sealed)
                directory_changes = self._directory_changes
                # Taken with the sealed list: whatever those segments still lack is in it.
                unwritten = self._take_unwritten()
            self._write(unwritten)
        for segment in sealed:
            self._fdatasync(segment)
        if directory_changes != self._directory_changes_synced:
            self._fsync_directory()
        with self._lock:
            for segment in sealed:
                self._unsynced_sealed.remove(segment)
                segment.close()
            self._directory_changes_synced = directory_changes
        return sealed

    def _take_unwritten(self) -> list[tuple[Segment, int, bytearray]]:
        """Caller holds ``_write_lock`` and ``_lock``."""
        unwritten, self._unwritten = self._unwritten, []
        return unwritten

    def _write(self, unwritten: list[tuple[Segment, int, bytearray]]) -> None:
        """Write taken records (caller holds ``_write_lock``). A failed write leaves the
        file's tail unknown (maybe a partial record, which recovery cuts off): the log
        then refuses further writes."""
        for segment, position, data in unwritten:
            try:
                segment.write(data, position)
            except OSError as exc:
                self._failure = f"write to {segment.path} failed: {exc}"
                raise WalError(self._failure) from exc

    def _write_appended(self) -> None:
        """Write every record appended so far (before reading any of them), and wait
        for those a sync on another thread has taken and is writing: finding the list
        empty does not mean they are in the file yet (a read that skipped the lock
        then read zeros where the newest records go)."""
        with self._write_lock:
            with self._lock:
                unwritten = self._take_unwritten()
            self._write(unwritten)

    def _fsync_directory(self) -> None:
        try:
            fsync_directory(self._directory)
        except OSError as exc:
            self._failure = f"fsync of {self._directory} failed: {exc}"
            raise WalError(self._failure) from exc

    def _fdatasync(self, segment: Segment) -> None:
        try:
            segment.sync()
        except OSError as exc:
            # After a failed fdatasync Linux may have dropped the dirty pages: what is on
            # disk is unknown, so stop accepting writes rather than pretend.
            self._failure = f"fdatasync of {segment.path} failed: {exc}"
            raise WalError(self._failure) from exc

    def truncate_after(self, offset: int) -> None:
        """Remove every entry with offset > ``offset``; durable when it returns.

        ``offset`` may be first_offset - 1 or -1 to empty the log; the next append must then
        have the offset of the first removed entry (the log does not go back before its
        start: use reset for that).
        """
        self._check_writable()
        if not self._segments or offset >= self.last_offset:
            return
        start_offset = self._segments[0].base_offset
        if offset < start_offset - 1:
            if offset != -1:
                raise ValueError(
                    f"cannot truncate after {offset}: the log starts at {start_offset}"
                )
            offset = start_offset - 1
        with self._sync_lock:
            # Everything that stays must be durable when this returns.
            self._flush_rollovers()
        with self._sync_lock, self._write_lock, self._lock:
            # (None is left: appends run on this thread, and the flush above wrote them.)
            self._write(self._take_unwritten())
            keep = bisect.bisect_right(self._segments, offset + 1, key=_base_offset) - 1
            # Newest first, so a crash part way leaves a prefix of the log (still a valid log).
            removed = self._segments[keep + 1 :]
            for segment in reversed(removed):
                segment.delete()
            del self._segments[keep + 1 :]
            if removed:
                fsync_directory(self._directory)
            target = self._segments[keep]
            target.open_for_append()
            target.truncate(offset + 1 - target.base_offset)
            # Everything left is durable: sealed segments were flushed above and the
            # truncate synced the rest.
            self._synced_offset = self.last_offset
        # Read with the locks released (a read takes them); appends run on this thread,
        # so the last entry cannot change meanwhile.
        last = self.last_entry()
        self._last_term = -1 if last is None else last.term

    def trim_before(self, offset: int) -> int:
        """Delete whole segments whose entries are all < ``offset`` (never the active one).

        Returns the new first_offset. May run on another thread than appends: the
        segments are detached under the locks, and their files deleted (and the
        directory synced) after, so appends and syncs never wait for that.
        """
        self._check_writable()
        # (Only the active segment, which stays, can hold unwritten records: a rollover
        # writes them first.)
        with self._sync_lock, self._lock:
            removable = 0
            while (
                removable + 1 < len(self._segments)
                and self._segments[removable + 1].base_offset <= offset
            ):
                removable += 1
            removed = self._segments[:removable]
            del self._segments[:removable]
            for segment in removed:
                if segment in self._unsynced_sealed:
                    self._unsynced_sealed.remove(segment)
            if self.first_offset < 0:
                # The active segment was empty, so nothing is left: last_term is that of an
                # empty log (as it will be after a reopen).
                self._last_term = -1
            first_offset = self.first_offset
        # Oldest first, so a crash part way leaves a suffix of the log (still chained).
        with self._lock:
            room = self._options.spare_segments - len(self._spares)
            taken_names = {spare.name for spare in self._spares}
        spares: list[Path] = []
        for segment in removed:
            # (A spare of the same name can only come from before a reset.)
            if len(spares) < room and spare_file_name(segment.last_offset) not in taken_names:
                spares.append(segment.retire_as_spare())
            else:
                segment.delete()
        if removed:
            fsync_directory(self._directory)
        with self._lock:
            self._spares.extend(spares)
        return first_offset

    def reset(self, next_offset: int) -> None:
        """Drop every entry; the next append must have offset ``next_offset``.

        A crash part way through leaves a prefix of the old log (or nothing), never a mix
        of the old log and the new start.
        """
        self._check_writable()
        if not 0 <= next_offset <= U64_MAX:
            raise ValueError(f"next_offset must be a u64, got {next_offset}")
        with self._sync_lock, self._write_lock, self._lock:
            for segment in reversed(self._segments):
                segment.delete()
            self._segments = []
            self._unsynced_sealed.clear()
            self._unwritten.clear()
            # Persist the deletions before creating the new start: otherwise a crash could
            # keep the new file and some old ones, which do not chain.
            fsync_directory(self._directory)
            self._segments.append(Segment.create(self._directory, next_offset))
            fsync_directory(self._directory)
            self._last_term = -1
            self._synced_offset = next_offset - 1

    def close(self) -> None:
        """Write what was appended and close the files. Does not sync: unsynced entries
        stay in the OS page cache."""
        with self._sync_lock, self._write_lock, self._lock:
            unwritten = self._take_unwritten()
            try:
                if self._failure is None and not self._closed:
                    self._write(unwritten)
            finally:
                for segment in self._segments:
                    segment.close()
                self._closed = True

    def __enter__(self) -> Wal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads -----------------------------------------------------------------------------

    def read(self, from_offset: int, to_offset: int | None = None) -> Iterator[LogEntry]:
        """Entries from_offset..to_offset inclusive (to the current end if None).

        Raises ValueError (now, not on iteration) if from_offset was trimmed/reset away.
        The range is fixed when called; appends during iteration are fine, truncate/trim/
        reset during iteration are not.
        """
        self._check_open()
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, got {from_offset}")
        if not self._segments:
            return iter(())
        start_offset = self._segments[0].base_offset
        if from_offset < start_offset:
            raise ValueError(
                f"offset {from_offset} is before the start of the log ({start_offset})"
            )
        end_offset = self.last_offset if to_offset is None else min(to_offset, self.last_offset)
        if from_offset > end_offset:
            return iter(())
        self._write_appended()
        first = bisect.bisect_right(self._segments, from_offset, key=_base_offset) - 1
        plan = []
        for segment in self._segments[first:]:
            if segment.base_offset > end_offset:
                break
            plan.append(
                (
                    segment,
                    max(from_offset, segment.base_offset),
                    min(end_offset, segment.last_offset),
                )
            )
        return self._read_plan(plan)

    def _read_plan(self, plan: list[tuple[Segment, int, int]]) -> Iterator[LogEntry]:
        for segment, first_offset, last_offset in plan:
            yield from segment.read(first_offset, last_offset, self._options.max_record_bytes)

    def get(self, offset: int) -> LogEntry:
        """The entry at ``offset``; KeyError if there is none."""
        self._check_open()
        if self.first_offset < 0 or not self.first_offset <= offset <= self.last_offset:
            raise KeyError(offset)
        self._write_appended()
        index = bisect.bisect_right(self._segments, offset, key=_base_offset) - 1
        segment = self._segments[index]
        # list() runs the reader to completion so a sealed segment's fd is closed right away.
        (entry,) = list(segment.read(offset, offset, self._options.max_record_bytes))
        return entry

    # -- helpers ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise WalError(f"WAL in {self._directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failure is not None:
            raise WalError(f"WAL in {self._directory} failed earlier: {self._failure}")


def _any_record(later: list[tuple[int, Path]], max_record_bytes: int) -> bool:
    """Whether any of the segment files after a torn one holds a record.

    A rollover creates the next segment file before the sealed one's tail is synced
    (and the file system may make the new name durable first), so a crash can leave
    a sealed segment torn with later files behind it. No entry past the tear was
    ever reported durable: `Wal.sync` reports an offset only once every segment up to
    it is synced, the sealed ones before the active one. If none of the later files
    holds a record, the tear ends the log. If one does, a client may have been told
    about its entries, so the damage is corruption and recovery refuses, leaving
    every file as it is."""
    return any(holds_a_record(path, base, max_record_bytes) for base, path in later)


def _remove_after_tear(directory: Path, later: list[tuple[int, Path]]) -> None:
    """Delete the record-less segment files after a torn one (see `_any_record`)."""
    for _, path in later:
        log.warning(
            "WAL %s: removing %s, which holds no record, after a segment with a torn tail"
            " (a crash after a rollover, before the sealed segment was synced)",
            directory,
            path.name,
        )
        path.unlink()
    fsync_directory(directory)


def _recover_spares(listing: list[Path], keep: int) -> list[Path]:
    """The spare files a previous run left in the WAL folder (``listing``), at most
    ``keep`` (the rest, and files under the spare suffix with another name, are deleted)."""
    spares: list[Path] = []
    for path in listing:
        if path.suffix != SPARE_SUFFIX:
            continue
        if parse_spare_file_name(path.name) is not None and len(spares) < keep:
            spares.append(path)
        else:
            path.unlink()
    return spares


def _base_offset(segment: Segment) -> int:
    return segment.base_offset
