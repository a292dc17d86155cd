"""Opening a replica: the log's extent and base from the KV's record and the WAL."""

from __future__ import annotations

import pytest

from cairn.storage.core.recovery import (
    LogExtent,
    UnappliedEntriesLost,
    plan_recovery,
    recovered_term,
)
from cairn.storage.core.replication.terms import NO_OFFSET, NO_TERM, EntryId

EMPTY = LogExtent(NO_OFFSET, NO_OFFSET, NO_TERM)


def test_a_new_replica_holds_nothing() -> None:
    recovery = plan_recovery(0, NO_OFFSET, None, EMPTY)
    assert recovery.restart_log_at is None
    assert recovery.log == EMPTY
    assert recovery.base == EntryId(NO_TERM, NO_OFFSET)


def test_a_log_from_the_start_is_kept() -> None:
    wal = LogExtent(0, 20, 3)
    recovery = plan_recovery(0, 12, None, wal)
    assert (recovery.restart_log_at, recovery.log) == (None, wal)
    assert recovery.base == EntryId(NO_TERM, NO_OFFSET)


def test_a_trimmed_log_after_a_snapshot_continues_its_base() -> None:
    recovery = plan_recovery(0, 50, EntryId(4, 40), LogExtent(41, 60, 5))
    assert recovery.base == EntryId(4, 40)


def test_a_log_trimmed_by_retention_has_an_unknown_base() -> None:
    # Retention trimmed past the snapshot's base: the entry before the first is unknown.
    recovery = plan_recovery(0, 50, EntryId(4, 10), LogExtent(31, 60, 5))
    assert recovery.base == EntryId(NO_TERM, 30)


def test_a_kv_ahead_of_the_log_restarts_the_log_after_it() -> None:
    # The WAL lost entries 16..20 that the KV applied (a damaged tail cut off when
    # it opened): the log continues after offset 20.
    recovery = plan_recovery(0, 20, EntryId(2, 5), LogExtent(6, 15, 3))
    assert recovery.restart_log_at == 21
    assert recovery.log == LogExtent(NO_OFFSET, 20, NO_TERM)
    assert recovery.base == EntryId(3, 20)  # the newest term either knew of


def test_entries_lost_before_they_were_applied_refuse_to_open() -> None:
    with pytest.raises(UnappliedEntriesLost, match="never applied"):
        plan_recovery(0, 10, None, LogExtent(15, 30, 2))


def test_the_term_is_never_older_than_one_persisted_or_logged() -> None:
    assert recovered_term(7, 5) == 7
    assert recovered_term(3, 5) == 5
    assert recovered_term(NO_TERM, NO_TERM) == 0
