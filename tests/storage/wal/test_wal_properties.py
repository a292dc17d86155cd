"""Property-based tests of the write-ahead log: the codec, and the Wal against a list model."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from cairn.storage.wal import LogEntry, Wal, WalOptions
from cairn.storage.wal.record import (
    HEADER_SIZE_BYTES,
    U64_MAX,
    BadRecordError,
    TornRecordError,
    decode,
    encode,
)
from support.wal_files import check_spare, records_from_start

u64 = st.integers(min_value=0, max_value=U64_MAX)
entries = st.builds(
    LogEntry, term=u64, offset=u64, timestamp_ms=u64, payload=st.binary(max_size=300)
)


@given(entry=entries, prefix=st.binary(max_size=40))
def test_codec_round_trips(entry: LogEntry, prefix: bytes) -> None:
    data = prefix + encode(entry)
    assert len(data) == len(prefix) + HEADER_SIZE_BYTES + len(entry.payload)
    assert decode(data, len(prefix), 1024) == (entry, len(data))


@given(entry=entries, data=st.data())
def test_a_cut_record_is_torn(entry: LogEntry, data: st.DataObject) -> None:
    encoded = encode(entry)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(TornRecordError):
        decode(encoded[:cut], 0, 1024)


@given(entry=entries, data=st.data())
def test_a_flipped_bit_is_never_decoded_as_a_record(entry: LogEntry, data: st.DataObject) -> None:
    encoded = bytearray(encode(entry))
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
    encoded[bit // 8] ^= 1 << (bit % 8)
    # A flipped length bit may make the record look longer than the buffer (torn); any
    # other flip fails the CRC. Either way no entry comes out.
    with pytest.raises((TornRecordError, BadRecordError)):
        decode(bytes(encoded), 0, 1 << 20)


# -- the Wal against a model ------------------------------------------------------------------

OPTIONS = WalOptions(segment_size_bytes=1024)
# Zero-filled room ahead of the writes (see segment.py), topped up by every sync.
ZERO_FILLED = WalOptions(segment_size_bytes=1024, zero_fill_ahead_bytes=300)

# Every draw of the machines below has bounds of its own: a choice, mapped onto the
# files or the model in the rule's body. Bounds taken from them would make what an
# example draws depend on more than its earlier draws (Hypothesis replays and shrinks
# an example by its draws alone, and stops with FlakyStrategyDefinition when they differ).
CHOICE_MAX = 2**16 - 1
choices = st.integers(0, CHOICE_MAX)


def pick(choice: int, low: int, high: int) -> int:
    """The value in low..high (inclusive) a choice stands for: 0 for low, the largest
    choice for high; each value can be picked while the span is at most CHOICE_MAX
    (these files are a few KB)."""
    assert low <= high
    return low + (high - low) * choice // CHOICE_MAX


@dataclass(frozen=True)
class Damage:
    """What a crash does to the unsynced bytes of a file, drawn whole whether or not a
    machine (or the file) has a use for each part."""

    how: str  # "cut", "zeros" or "hole" (the zero-filled machines)
    hole_end: int  # a choice, for "hole"
    previous_life: bool  # a reused file's bytes as they were before (the recycled machine)


@dataclass(frozen=True)
class UnsyncedFile:
    """What a crash leaves of a file created since the last sync, drawn whole."""

    emptied: bool  # else zeros
    previous_life: bool


damages = st.builds(
    Damage,
    how=st.sampled_from(["cut", "zeros", "hole"]),
    hole_end=choices,
    previous_life=st.booleans(),
)
# One for each file after a torn one (taken in turn when there are more files).
unsynced_files = st.lists(
    st.builds(UnsyncedFile, emptied=st.booleans(), previous_life=st.booleans()),
    min_size=8,
    max_size=8,
)

payloads = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=120),
    # A few KB: bigger than a segment, so it gets a segment of its own.
    st.integers(1000, 3000).map(lambda n: bytes([n % 251]) * n),
)


class WalMachine(RuleBasedStateMachine):
    options = OPTIONS

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="wal-properties-"))
        self.wal = Wal.open(self.directory, self.options)
        self.model: list[LogEntry] = []
        # Offset the next append must have; None while the log is brand new (anything goes).
        self.next_offset: int | None = None
        self.last_term = -1
        # Highest offset the model knows to be durable (a lower bound on synced_offset).
        self.durable_offset = -1
        # (name, end of its last record) of the last segment file when the whole log was
        # last durable: a crash can only lose or damage bytes past that point.
        self.durable_tail: tuple[str, int] | None = None

    def teardown(self) -> None:
        self.wal.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------

    def _segment_files(self) -> list[Path]:
        return sorted(self.directory.glob("*.wal"))

    def _start_offset(self) -> int:
        """Where the log starts (first entry, or the offset it continues at when empty)."""
        assert self.next_offset is not None
        return self.model[0].offset if self.model else self.next_offset

    def _now_durable(self) -> None:
        self.durable_offset = self.wal.last_offset
        files = self._segment_files()
        self.durable_tail = (files[-1].name, self._records_end(files[-1])) if files else None

    def _records_end(self, segment_file: Path) -> int:
        """Where the last record of the segment ends (the file may be longer: zero room)."""
        base = int(segment_file.stem)
        return sum(HEADER_SIZE_BYTES + len(e.payload) for e in self.model if e.offset >= base)

    def _make(self, offset: int, term_bump: int, payload: bytes) -> LogEntry:
        term = max(self.last_term, 0) + term_bump
        return LogEntry(term=term, offset=offset, timestamp_ms=offset * 10, payload=payload)

    def _adopt_recovered(self) -> None:
        self.next_offset = self.wal.last_offset + 1
        self.last_term = self.model[-1].term if self.model else -1

    # -- rules -----------------------------------------------------------------------------

    @rule(payload=payloads, term_bump=st.integers(0, 2), new_log_offset=st.integers(0, 100))
    def append(self, payload: bytes, term_bump: int, new_log_offset: int) -> None:
        offset = new_log_offset if self.next_offset is None else self.next_offset
        entry = self._make(offset, term_bump, payload)
        self.wal.append(entry)
        self.model.append(entry)
        self.next_offset = offset + 1
        self.last_term = entry.term

    @rule(
        group_payloads=st.lists(payloads, min_size=1, max_size=8),
        term_bumps=st.lists(st.integers(0, 1), min_size=8, max_size=8),
        new_log_offset=st.integers(0, 100),
    )
    def append_many(
        self, group_payloads: list[bytes], term_bumps: list[int], new_log_offset: int
    ) -> None:
        offset = new_log_offset if self.next_offset is None else self.next_offset
        group = []
        for i, payload in enumerate(group_payloads):
            entry = self._make(offset + i, term_bumps[i], payload)
            self.last_term = entry.term
            group.append(entry)
        self.wal.append_many(group)
        self.model += group
        self.next_offset = offset + len(group)

    @rule(payload=payloads)
    def append_with_wrong_offset_is_rejected(self, payload: bytes) -> None:
        if self.next_offset is None:
            return
        for offset in (self.next_offset - 1, self.next_offset + 1):
            if offset >= 0:
                with pytest.raises(ValueError, match="expected"):
                    self.wal.append(self._make(offset, 0, payload))

    @rule()
    def sync(self) -> None:
        assert self.wal.sync() == self.wal.last_offset
        assert self.wal.synced_offset == self.wal.last_offset
        self._now_durable()

    @precondition(lambda self: self.next_offset is not None)
    @rule(everything=st.booleans(), choice=choices)
    def truncate_after(self, everything: bool, choice: int) -> None:
        assert self.next_offset is not None
        start = self._start_offset()
        offset = -1 if everything else pick(choice, start - 1, self.next_offset + 2)
        self.wal.truncate_after(offset)
        effective = max(offset, start - 1)
        if effective < self.next_offset - 1:
            self.model = [e for e in self.model if e.offset <= effective]
            self.next_offset = effective + 1
            self.last_term = self.model[-1].term if self.model else -1
            # A truncation that removed something is durable, and so is what it kept.
            assert self.wal.synced_offset == self.wal.last_offset
            self._now_durable()

    @precondition(lambda self: self.next_offset is not None)
    @rule(choice=choices)
    def trim_before(self, choice: int) -> None:
        assert self.next_offset is not None
        self._trim(pick(choice, 0, self.next_offset + 2))

    def _trim(self, offset: int) -> None:
        last_before = self.wal.last_offset
        first = self.wal.trim_before(offset)
        assert first == self.wal.first_offset
        assert self.wal.last_offset == last_before  # the active segment is never removed
        if first < 0:
            # Only possible when the active segment is empty: everything before it went.
            assert all(e.offset < offset for e in self.model)
            self.model = []
            self.last_term = -1
        else:
            assert self.model[0].offset <= first <= max(offset, self.model[0].offset)
            self.model = [e for e in self.model if e.offset >= first]
        files = self._segment_files()
        # Every segment that could go did go: the oldest one left still holds offset - 1.
        if len(files) > 1:
            assert int(files[1].stem) > offset

    @rule(next_offset=st.integers(0, 300))
    def reset(self, next_offset: int) -> None:
        self.wal.reset(next_offset)
        self.model = []
        self.next_offset = next_offset
        self.last_term = -1
        self._now_durable()

    @rule()
    def reopen(self) -> None:
        # A clean crash: close without sync. Everything appended is in the OS, so it is all
        # still there after the reopen.
        self.wal.close()
        self.wal = Wal.open(self.directory, self.options)
        assert self.wal.synced_offset == self.wal.last_offset
        self._now_durable()

    @precondition(lambda self: self.next_offset is not None)
    @rule(cut_choice=choices, damage=damages)
    def crash_losing_unsynced_tail(self, cut_choice: int, damage: Damage) -> None:
        synced_before = self.wal.synced_offset
        assert synced_before >= self.durable_offset
        self.wal.close()
        last_file = self._segment_files()[-1]
        size = last_file.stat().st_size
        durable_size = 0
        if self.durable_tail is not None and self.durable_tail[0] == last_file.name:
            durable_size = min(self.durable_tail[1], size)
        self._lose_after(last_file, pick(cut_choice, durable_size, size), damage)
        self.wal = Wal.open(self.directory, self.options)

        recovered = list(self.wal.read(self._start_offset()))
        assert recovered == self.model[: len(recovered)]
        assert all(e in recovered for e in self.model if e.offset <= synced_before)
        event("crash lost entries" if len(recovered) < len(self.model) else "crash lost nothing")
        self.model = recovered
        self._adopt_recovered()
        self._now_durable()

    @precondition(
        lambda self: (
            self.next_offset is not None
            and len(self._segment_files()) > 1
            and (
                self.durable_tail is None or self.durable_tail[0] != self._segment_files()[-1].name
            )
        )
    )
    @rule(torn_choice=choices, cut_choice=choices, damage=damages, later=unsynced_files)
    def crash_after_rollover_losing_a_sealed_tail(
        self, torn_choice: int, cut_choice: int, damage: Damage, later: list[UnsyncedFile]
    ) -> None:
        """Rollovers since the last sync: a crash leaves a sealed segment torn past what
        was durable, the segments before it whole, and the files after it named (their
        names are durable first) but without a record."""
        synced_before = self.wal.synced_offset
        self.wal.close()
        files = self._segment_files()
        names = [path.name for path in files]
        first_unsynced, durable_size = 0, 0
        if self.durable_tail is not None:
            assume(self.durable_tail[0] in names)
            first_unsynced, durable_size = names.index(self.durable_tail[0]), self.durable_tail[1]
        torn = pick(torn_choice, first_unsynced, len(files) - 2)
        size = files[torn].stat().st_size
        floor = min(durable_size, size) if torn == first_unsynced else 0
        self._lose_after(files[torn], pick(cut_choice, floor, size), damage)
        for i, later_file in enumerate(files[torn + 1 :]):
            self._unsynced_file_after_crash(later_file, later[i % len(later)])
        self.wal = Wal.open(self.directory, self.options)

        recovered = list(self.wal.read(self._start_offset()))
        assert recovered == self.model[: len(recovered)]
        assert all(e in recovered for e in self.model if e.offset <= synced_before)
        # The files after a tear are gone; a cut that spared every record leaves the
        # (empty) newer files as valid segments.
        kept = self._segment_files()
        assert kept == files[: len(kept)] and len(kept) > torn
        event(
            "rollover crash removed files" if len(kept) < len(files) else "rollover crash kept all"
        )
        self.model = recovered
        self._adopt_recovered()
        self._now_durable()

    def _lose_after(self, segment_file: Path, cut: int, damage: Damage) -> None:
        """What a crash does to the unsynced bytes from `cut` on: here, they are gone."""
        os.truncate(segment_file, cut)

    def _unsynced_file_after_crash(self, segment_file: Path, choice: UnsyncedFile) -> None:
        """What a crash leaves of a file created since the last sync: its name, and
        none of its records."""
        if choice.emptied:
            os.truncate(segment_file, 0)
        else:
            segment_file.write_bytes(bytes(segment_file.stat().st_size))

    @rule(first_choice=choices, last_choice=choices)
    def get_and_read_slices(self, first_choice: int, last_choice: int) -> None:
        if not self.model:
            return
        i = pick(first_choice, 0, len(self.model) - 1)
        j = pick(last_choice, i, len(self.model) + 2)
        assert self.wal.get(self.model[i].offset) == self.model[i]
        to_offset = self.model[0].offset + j
        assert list(self.wal.read(self.model[i].offset, to_offset)) == self.model[i : j + 1]

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        wal = self.wal
        assert wal.first_offset == (self.model[0].offset if self.model else -1)
        assert wal.last_offset == (-1 if self.next_offset is None else self.next_offset - 1)
        assert wal.last_term == self.last_term
        assert self.durable_offset <= wal.synced_offset <= wal.last_offset
        assert wal.last_entry() == (self.model[-1] if self.model else None)
        if self.next_offset is not None:
            assert list(wal.read(self._start_offset())) == self.model
        assert wal.total_size_bytes() == sum(HEADER_SIZE_BYTES + len(e.payload) for e in self.model)
        assert wal.segment_count() == len(self._segment_files())
        if self.model:
            for entry in (self.model[0], self.model[len(self.model) // 2], self.model[-1]):
                assert wal.get(entry.offset) == entry
            with pytest.raises(KeyError):
                wal.get(self.model[-1].offset + 1)


WalMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
test_wal_against_model = WalMachine.TestCase


class ZeroFilledWalMachine(WalMachine):
    """The same model with zero-filled room ahead of the writes, and crashes that damage
    the unsynced bytes the ways a page cache can: the file cut, the unsynced records read
    back as the room's zeros, or a hole of zeros with a later (unsynced) record intact
    after it (pages written back out of order). No record after the damage may come
    back, then or after later appends over the same bytes."""

    options = ZERO_FILLED

    def _lose_after(self, segment_file: Path, cut: int, damage: Damage) -> None:
        size = segment_file.stat().st_size
        if damage.how == "cut":
            os.truncate(segment_file, cut)
            return
        end = size if damage.how == "zeros" else pick(damage.hole_end, cut, size)
        with open(segment_file, "r+b") as handle:
            handle.seek(cut)
            handle.write(bytes(end - cut))

    @invariant()
    def room_is_zeros(self) -> None:
        files = self._segment_files()
        if files:
            tail = files[-1].read_bytes()[self._records_end(files[-1]) :]
            assert tail.count(0) == len(tail)


ZeroFilledWalMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_zero_filled_wal_against_model = ZeroFilledWalMachine.TestCase


class RecycledWalMachine(ZeroFilledWalMachine):
    """The zero-filled machine with trimmed segments kept as spares, their records in
    them, and reused by later rollovers. Crashes may also leave a reused file's unsynced
    bytes as they were in its previous life (the new writes never reached the disk). A
    record of a file's previous life must never come back as one of the log's."""

    options = WalOptions(segment_size_bytes=1024, zero_fill_ahead_bytes=300, spare_segments=2)

    def __init__(self) -> None:
        super().__init__()
        # The bytes each spare file (by inode) held, and the last offset its name
        # gave, for crashes to bring back.
        self.previous_lives: dict[int, tuple[int, bytes]] = {}
        # A descriptor open on each of those files, until it is gone from the folder:
        # its inode number stays its own, so that no new file (the WAL's or another
        # process's) can take it meanwhile and be given a previous life it never had.
        self.held: dict[int, int] = {}

    def teardown(self) -> None:
        for descriptor in self.held.values():
            os.close(descriptor)
        super().teardown()

    @precondition(lambda self: self.next_offset is not None)
    @rule(payloads=st.lists(st.binary(min_size=200, max_size=600), min_size=2, max_size=6))
    def append_then_trim_all_but_the_last(self, payloads: list[bytes]) -> None:
        # Fills segments and retires them, so that later rollovers reuse the spares.
        for payload in payloads:
            self.append(payload, 0, 0)
        self._trim(self.wal.last_offset)

    def _previous_life(self, segment_file: Path) -> bytes | None:
        """What the file held as a spare, if it was one before this segment (a spare's
        inode is held while it exists: a file with it is the spare, renamed)."""
        last_offset, previous = self.previous_lives.get(segment_file.stat().st_ino, (-1, None))
        return previous if last_offset < int(segment_file.stem) else None

    def _lose_after(self, segment_file: Path, cut: int, damage: Damage) -> None:
        previous = self._previous_life(segment_file)
        if previous is None or not damage.previous_life:
            super()._lose_after(segment_file, cut, damage)
            return
        event("crash brought a previous life back in the last segment")
        with open(segment_file, "r+b") as handle:
            handle.seek(cut)
            handle.write(previous[cut:])
            handle.truncate(max(cut, len(previous)))

    def _unsynced_file_after_crash(self, segment_file: Path, choice: UnsyncedFile) -> None:
        previous = self._previous_life(segment_file)
        if previous is None or not choice.previous_life:
            super()._unsynced_file_after_crash(segment_file, choice)
            return
        event("crash brought a previous life back after a rollover")
        segment_file.write_bytes(previous)

    @invariant()
    def spares_are_bounded_sealed_segments(self) -> None:
        spares = sorted(self.directory.glob("*.spare"))
        assert len(spares) <= self.options.spare_segments
        for spare in spares:
            check_spare(spare)
            inode = spare.stat().st_ino
            self.previous_lives[inode] = (int(spare.stem), spare.read_bytes())
            if inode not in self.held:
                self.held[inode] = os.open(spare, os.O_RDONLY)
        present = {path.stat().st_ino for path in self.directory.iterdir()}
        for inode in self.held.keys() - present:
            os.close(self.held.pop(inode))
            del self.previous_lives[inode]

    @invariant()
    def room_is_zeros(self) -> None:
        # A sealed segment's room is zeros; the active one's may hold a previous life,
        # but nothing there reads as a record of this one.
        files = self._segment_files()
        for sealed, next_file in pairwise(files):
            base, next_base = int(sealed.stem), int(next_file.stem)
            end = sum(
                HEADER_SIZE_BYTES + len(e.payload)
                for e in self.model
                if base <= e.offset < next_base
            )
            content = sealed.read_bytes()
            assert len(content) >= end
            assert content.count(0, end) == len(content) - end
        if files:
            base = int(files[-1].stem)
            records, _ = records_from_start(files[-1].read_bytes())
            offsets = [record.offset for record in records]
            run = 0
            while run < len(offsets) and offsets[run] == base + run:
                run += 1
            assert records[:run] == [e for e in self.model if e.offset >= base][:run]
            # A previous life's records may line up after the run: none continues it.
            assert all(offset < base for offset in offsets[run:])


RecycledWalMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
test_recycled_wal_against_model = RecycledWalMachine.TestCase
