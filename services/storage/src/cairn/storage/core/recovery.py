"""What a shard replica holds when it opens: its log's extent and the entry before
it, from what the KV recorded and what the WAL kept.

The KV records the applied offset with every applied batch, and the entry a
snapshot's log starts after (the log base). The WAL may have lost its tail (a
damaged tail is cut off when it opens) while the KV kept what it applied from it.
Three cases:

    the WAL holds every entry after the applied offset   keep it as it is
    the WAL ends before the applied offset               the KV is ahead: the log
                                                         restarts right after it
    the WAL starts after the applied offset + 1          entries were lost that
                                                         were never applied: refuse
                                                         to open (never guess)

Pure: the driver reads the KV and WAL, restarts the WAL where told, then rebuilds
the term history of what the WAL holds (terms.history_of).
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.storage.core.replication.terms import NO_OFFSET, NO_TERM, EntryId


@dataclass(frozen=True, slots=True)
class LogExtent:
    """What a WAL holds: first_offset NO_OFFSET when it holds nothing (then
    last_offset is the offset before the next entry)."""

    first_offset: int
    last_offset: int
    last_term: int


@dataclass(frozen=True, slots=True)
class Recovery:
    # The WAL must drop everything and take its next entry at this offset.
    restart_log_at: int | None
    # What the WAL holds afterwards.
    log: LogExtent
    # The entry before the log's first (NO_TERM where unknown).
    base: EntryId


class UnappliedEntriesLost(RuntimeError):
    """The WAL starts after entries the KV never applied: they are gone from this
    replica, which must be rebuilt (a wiped replica, or a snapshot)."""


def plan_recovery(
    shard_id: int, applied_offset: int, stored_base: EntryId | None, wal: LogExtent
) -> Recovery:
    """How to open a replica whose KV applied up to `applied_offset` and recorded
    `stored_base` as its log's base (None if no snapshot was ever installed)."""
    restart_at = None
    base = stored_base
    if wal.last_offset < applied_offset:
        # The log's tail was lost while the KV kept it: the log continues after
        # what the KV has, from the newest term either knew of.
        term = wal.last_term if base is None else max(base.term, wal.last_term)
        base = EntryId(term, applied_offset)
        restart_at = applied_offset + 1
        wal = LogExtent(NO_OFFSET, applied_offset, NO_TERM)
    if wal.first_offset > applied_offset + 1:
        raise UnappliedEntriesLost(
            f"shard {shard_id}: WAL starts at {wal.first_offset} but entries from "
            f"{applied_offset + 1} were never applied"
        )
    if base is None or (wal.first_offset != NO_OFFSET and base.offset != wal.first_offset - 1):
        # No stored base that the log continues (the log was never trimmed by a
        # snapshot): the entry before the first one is unknown, unless nothing came
        # before.
        base = EntryId(NO_TERM, wal.first_offset - 1) if wal.first_offset > 0 else None
    return Recovery(restart_at, wal, base if base is not None else EntryId(NO_TERM, NO_OFFSET))


def recovered_term(stored_term: int, log_last_term: int) -> int:
    """The term a replica opens in: never older than one it persisted or logged."""
    return max(stored_term, log_last_term, 0)
