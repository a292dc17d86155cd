"""The WAL retention rule: by size, by age, never past what the KV applied."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.storage.core.retention import WalRetention, trim_target

TIMESTAMPS = [100, 100, 200, 300, 300, 300, 400, 500, 900, 1000]


def target(retention: WalRetention, applied: int, size: int, now_ms: int) -> int | None:
    return trim_target(
        retention,
        applied_offset=applied,
        first_offset=0,
        last_offset=len(TIMESTAMPS) - 1,
        size_bytes=size,
        now_ms=now_ms,
        timestamp_at=TIMESTAMPS.__getitem__,
    )


def test_size_trims_everything_applied() -> None:
    assert target(WalRetention(max_bytes=1000), applied=6, size=1001, now_ms=0) == 7
    assert target(WalRetention(max_bytes=1000), applied=6, size=1000, now_ms=0) is None


def test_age_trims_entries_older_than_the_cutoff_but_not_unapplied_ones() -> None:
    # Cutoff 1000 - 700 = 300: entries 0..2 are older.
    assert target(WalRetention(max_age_ms=700), applied=9, size=0, now_ms=1000) == 3
    assert target(WalRetention(max_age_ms=700), applied=1, size=0, now_ms=1000) == 2
    assert target(WalRetention(max_age_ms=10_000), applied=9, size=0, now_ms=1000) is None


def test_nothing_to_trim_in_an_empty_or_unapplied_log() -> None:
    assert (
        trim_target(
            WalRetention(1, 1),
            applied_offset=-1,
            first_offset=0,
            last_offset=5,
            size_bytes=10,
            now_ms=10**9,
            timestamp_at=lambda offset: 0,
        )
        is None
    )


@given(
    applied=st.integers(0, 9),
    size=st.integers(0, 2000),
    now_ms=st.integers(0, 3000),
    max_bytes=st.one_of(st.none(), st.integers(0, 2000)),
    max_age_ms=st.one_of(st.none(), st.integers(0, 3000)),
)
def test_never_past_the_applied_offset_and_only_old_or_oversized(
    applied: int, size: int, now_ms: int, max_bytes: int | None, max_age_ms: int | None
) -> None:
    found = target(WalRetention(max_bytes, max_age_ms), applied, size, now_ms)
    if found is None:
        return
    assert 0 < found <= applied + 1
    oversized = max_bytes is not None and size > max_bytes
    if not oversized:
        assert max_age_ms is not None
        assert all(TIMESTAMPS[offset] < now_ms - max_age_ms for offset in range(found))
