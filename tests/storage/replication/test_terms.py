"""Term histories against plain lists of per-offset terms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.storage.core.replication.terms import (
    NO_ENTRY,
    EntryId,
    TermHistory,
    history_of,
    last_shared_offset,
)

# A log as the model sees it: terms[i] is the term of the entry at first + i.
log_terms = st.lists(st.integers(1, 6), max_size=30).map(sorted)


def history(terms: list[int], trimmed: int = 0) -> TermHistory:
    """A log of `terms` from offset 0, with entries before `trimmed` trimmed away
    (the one just before becomes the base)."""
    built = TermHistory()
    for offset, term in enumerate(terms):
        built.append(term, offset)
    if 0 < trimmed < len(terms):
        built.trim_before(trimmed)
    return built


def oracle_shared(a: list[int], trim_a: int, b: list[int], trim_b: int) -> int | None:
    """Highest offset both still know (held or base) with equal terms."""
    known_from = max(
        trim_a - 1 if 0 < trim_a < len(a) else 0, trim_b - 1 if 0 < trim_b < len(b) else 0
    )
    best = None
    for offset in range(known_from, min(len(a), len(b))):
        if a[offset] == b[offset]:
            best = offset
    return best


@settings(max_examples=1500, deadline=None)
@given(a=log_terms, b=log_terms, trim_a=st.integers(0, 10), trim_b=st.integers(0, 10))
def test_last_shared_offset_matches_brute_force(
    a: list[int], b: list[int], trim_a: int, trim_b: int
) -> None:
    ha, hb = history(a, trim_a), history(b, trim_b)
    assert last_shared_offset(ha, hb) == oracle_shared(a, trim_a, b, trim_b)
    assert last_shared_offset(hb, ha) == oracle_shared(b, trim_b, a, trim_a)


@settings(max_examples=500, deadline=None)
@given(terms=log_terms, first=st.integers(0, 100))
def test_history_rebuilt_from_lookups_equals_the_one_built_by_appends(
    terms: list[int], first: int
) -> None:
    appended = TermHistory(base=EntryId(0, first - 1) if first else NO_ENTRY)
    for index, term in enumerate(terms):
        appended.append(term, first + index)
    lookups = 0

    def term_at(offset: int) -> int:
        nonlocal lookups
        lookups += 1
        return terms[offset - first]

    rebuilt = history_of(first if terms else -1, first + len(terms) - 1, term_at, appended.base)
    assert rebuilt == appended
    for index, term in enumerate(terms):
        assert rebuilt.term_at(first + index) == term


def test_truncate_trim_and_reset_keep_the_head_right() -> None:
    log = TermHistory()
    for offset, term in enumerate([1, 1, 2, 2, 2, 5, 5]):
        log.append(term, offset)
    assert log.head == EntryId(5, 6)
    log.truncate_after(3)
    assert log.head == EntryId(2, 3)
    assert [s.term for s in log.starts] == [1, 2]
    log.trim_before(3)
    assert log.base == EntryId(2, 2)
    assert log.first_offset == 3
    assert log.term_at(2) == 2 and log.term_at(1) is None
    log.reset(EntryId(7, 40))
    assert log.head == EntryId(7, 40) and log.is_empty()
    log.append(8, 41)
    assert log.head == EntryId(8, 41)
    with pytest.raises(ValueError, match="append at"):
        log.append(8, 43)
    with pytest.raises(ValueError, match="term 7 after term 8"):
        log.append(7, 42)


def test_a_base_counts_as_a_shared_entry() -> None:
    """A follower restored from a snapshot at (3, 10) shares it with a leader whose
    log holds offset 10 in term 3."""
    follower = TermHistory(base=EntryId(3, 10))
    leader = TermHistory()
    for offset in range(15):
        leader.append(3 if offset <= 12 else 4, offset)
    assert last_shared_offset(follower, leader) == 10


def test_divergent_suffix_of_an_old_term_is_found() -> None:
    # Both got 0..4 in term 1; the old leader (term 1) wrote 5..7 only to the
    # follower; the new leader (term 2) wrote 5..6.
    follower = history([1] * 8)
    leader = history([1] * 5 + [2, 2])
    assert last_shared_offset(follower, leader) == 4


def test_first_readable_offset_is_the_first_entry_or_the_one_after_the_base() -> None:
    assert TermHistory().first_readable_offset == 0
    assert history([1, 1, 2], trimmed=1).first_readable_offset == 1
    assert TermHistory(base=EntryId(4, 41)).first_readable_offset == 42
