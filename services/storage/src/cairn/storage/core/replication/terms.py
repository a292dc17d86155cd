"""A log's term history, and where two logs stop agreeing.

Every log entry carries the term of the leader that created it, and terms never
decrease along a log, so a log's terms are described by where each term starts.
Only the leader of a term creates entries of that term, at consecutive offsets,
and never rewrites one; a follower takes them in order after its log was made to
agree with that leader's. Hence the *log matching* property this module relies
on: two logs that hold an entry with the same (term, offset) hold the same
entries up to that offset. So the last offset where two logs have the same term
is where they stop agreeing, and everything after it on the follower is dropped.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

NO_OFFSET = -1
NO_TERM = -1


@dataclass(frozen=True, slots=True, order=True)
class EntryId:
    """(term, offset) of a log entry; compares by term first, then offset, which is
    how the controller ranks replicas' heads in an election."""

    term: int
    offset: int


NO_ENTRY = EntryId(NO_TERM, NO_OFFSET)


@dataclass(frozen=True, slots=True)
class TermStart:
    term: int
    first_offset: int


class TermHistory:
    """Where each term starts in a log whose entries are `first_offset..last_offset`,
    plus `base`: the entry just before the first one (known from a snapshot or a
    trim), or NO_ENTRY. The head of a log is its last entry, or `base` when the log
    holds none."""

    def __init__(
        self,
        starts: Iterable[TermStart] = (),
        last_offset: int = NO_OFFSET,
        base: EntryId = NO_ENTRY,
    ) -> None:
        self._starts = list(starts)
        self._last_offset = last_offset if self._starts else base.offset
        self.base = base
        for earlier, later in zip(self._starts, self._starts[1:], strict=False):
            if not (earlier.term < later.term and earlier.first_offset < later.first_offset):
                raise ValueError(f"term starts out of order: {earlier} then {later}")
        if self._starts and not (
            base.offset
            < self._starts[0].first_offset
            <= self._starts[-1].first_offset
            <= self._last_offset
        ):
            raise ValueError("term starts do not fit the log's offsets")

    # -- queries ---------------------------------------------------------------------

    @property
    def starts(self) -> tuple[TermStart, ...]:
        return tuple(self._starts)

    @property
    def first_offset(self) -> int:
        """Offset of the first entry held, NO_OFFSET if none."""
        return self._starts[0].first_offset if self._starts else NO_OFFSET

    @property
    def first_readable_offset(self) -> int:
        """The first offset this log can provide: its first entry, or the one after
        its head when it holds none (after a snapshot)."""
        return self._last_offset + 1 if not self._starts else self._starts[0].first_offset

    @property
    def last_offset(self) -> int:
        """Offset of the head (the last entry held, else the base)."""
        return self._last_offset

    @property
    def head(self) -> EntryId:
        if not self._starts:
            return self.base
        return EntryId(self._starts[-1].term, self._last_offset)

    @property
    def last_term(self) -> int:
        return self.head.term

    def is_empty(self) -> bool:
        return not self._starts

    def term_at(self, offset: int) -> int | None:
        """The term of the entry at `offset` if this log holds it (or it is the
        base), else None."""
        if offset == self.base.offset and offset != NO_OFFSET:
            return self.base.term
        if not self._starts or not self.first_offset <= offset <= self._last_offset:
            return None
        index = bisect.bisect_right(self._starts, offset, key=_first_offset) - 1
        return self._starts[index].term

    # -- changes (mirror the WAL's) --------------------------------------------------

    def append(self, term: int, offset: int) -> None:
        if offset != self._last_offset + 1:
            raise ValueError(f"append at {offset}, expected {self._last_offset + 1}")
        if term < self.last_term:
            raise ValueError(f"term {term} after term {self.last_term}")
        if not self._starts or term != self._starts[-1].term:
            self._starts.append(TermStart(term, offset))
        self._last_offset = offset

    def truncate_after(self, offset: int) -> None:
        """Drop entries after `offset` (not below the base)."""
        if offset >= self._last_offset:
            return
        if offset < self.base.offset:
            raise ValueError(f"cannot truncate to {offset}, before the base {self.base}")
        while self._starts and self._starts[-1].first_offset > offset:
            self._starts.pop()
        self._last_offset = offset

    def trim_before(self, offset: int) -> None:
        """Forget entries before `offset` (which must be held): the one just before
        becomes the base."""
        if offset <= self.first_offset or not self._starts:
            return
        if offset > self._last_offset:
            raise ValueError(f"cannot trim to {offset}: the log ends at {self._last_offset}")
        new_base_term = self.term_at(offset - 1)
        assert new_base_term is not None
        self.base = EntryId(new_base_term, offset - 1)
        index = bisect.bisect_right(self._starts, offset, key=_first_offset) - 1
        kept = self._starts[index:]
        kept[0] = TermStart(kept[0].term, offset)
        self._starts = kept

    def reset(self, base: EntryId) -> None:
        """Hold nothing; the head is `base` (after a snapshot is installed)."""
        self._starts = []
        self.base = base
        self._last_offset = base.offset

    def copy(self) -> TermHistory:
        return TermHistory(self._starts, self._last_offset, self.base)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TermHistory)
            and self._starts == other._starts
            and self._last_offset == other._last_offset
            and self.base == other.base
        )

    def __repr__(self) -> str:
        return f"TermHistory({self._starts!r}, last={self._last_offset}, base={self.base})"


def _first_offset(start: TermStart) -> int:
    return start.first_offset


def history_of(
    first_offset: int, last_offset: int, term_at: Callable[[int], int], base: EntryId = NO_ENTRY
) -> TermHistory:
    """Rebuild a log's history from a lookup of the term at an offset (a WAL read),
    with O(terms x log(entries)) lookups: terms never decrease, so each term's
    start is found by binary search."""
    if first_offset == NO_OFFSET or last_offset < first_offset:
        return TermHistory(base=base)
    starts: list[TermStart] = []
    offset = first_offset
    while offset <= last_offset:
        term = term_at(offset)
        starts.append(TermStart(term, offset))
        # The first offset in (offset, last_offset] whose term is greater than `term`.
        low, high = offset + 1, last_offset + 1
        while low < high:
            middle = (low + high) // 2
            if term_at(middle) > term:
                high = middle
            else:
                low = middle + 1
        offset = low
    return TermHistory(starts, last_offset, base)


def last_shared_offset(follower: TermHistory, leader: TermHistory) -> int | None:
    """The highest offset at which both logs hold an entry of the same term (so,
    by log matching, the same entries up to there), or None if they share none
    that both still hold. A base counts as held."""
    offset = min(follower.last_offset, leader.last_offset)
    bottom = max(_lowest_known(follower), _lowest_known(leader))
    while offset >= bottom and offset != NO_OFFSET:
        mine, theirs = follower.term_at(offset), leader.term_at(offset)
        if mine is None or theirs is None:
            return None
        if mine == theirs:
            return offset
        # Terms never decrease along a log, so below `offset` the log with the
        # higher term keeps it down to the start of its run, while the other log's
        # terms only get lower: no match in that run. Skip it.
        higher = follower if mine > theirs else leader
        offset = _start_of(higher, offset) - 1
    return None


def _lowest_known(history: TermHistory) -> int:
    if history.base.offset != NO_OFFSET:
        return history.base.offset
    return history.first_offset


def _start_of(history: TermHistory, offset: int) -> int:
    """The first offset of the run of entries with the same term as `offset`
    (the base is a run of its own)."""
    if offset == history.base.offset:
        return offset
    index = bisect.bisect_right(history.starts, offset, key=_first_offset) - 1
    return history.starts[index].first_offset
