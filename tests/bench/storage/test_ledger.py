"""The notify accounting: writes and notification batches matched by offset."""

from __future__ import annotations

import pytest

from cairn.bench.storage.ledger import DEFAULT_MAX_AGE_S, DEFAULT_MAX_TRACKED, DeliveryLedger

SHARD = 3


def ledger(
    subscribers: int = 2,
    max_tracked: int = DEFAULT_MAX_TRACKED,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> DeliveryLedger:
    """A ledger whose measured window is [10 s, 20 s)."""
    return DeliveryLedger(subscribers, 10.0, 20.0, max_tracked, max_age_s)


def test_a_write_then_its_batches_gives_lag_and_delivery() -> None:
    book = ledger()
    book.written(SHARD, 100, sent_s=11.0, answered_s=11.010, entries=5, counted=True)
    book.received(SHARD, 100, 5, received_s=11.012)
    book.received(SHARD, 100, 5, received_s=11.020)
    stats = book.stats
    assert (stats.expected_entries, stats.delivered_entries) == (10, 10)
    assert stats.delivered_ratio == 1.0
    assert stats.counted_writes == 1
    assert stats.lag_from_send.count == 2
    assert stats.lag_from_send.percentile_ms(100) == pytest.approx(20.0, rel=0.01)
    assert stats.lag_from_answer.percentile_ms(100) == pytest.approx(10.0, rel=0.01)
    assert stats.before_answer == 0
    assert book.tracked == 0, "a write every subscriber has seen is forgotten"


def test_batches_that_beat_the_answer_wait_for_it() -> None:
    book = ledger()
    book.received(SHARD, 7, 3, received_s=12.004)
    book.received(SHARD, 7, 3, received_s=12.006)
    assert book.stats.delivered_entries == 0
    assert book.tracked == 1
    book.written(SHARD, 7, sent_s=12.0, answered_s=12.008, entries=3, counted=True)
    stats = book.stats
    assert (stats.expected_entries, stats.delivered_entries) == (6, 6)
    assert stats.before_answer == 2
    assert stats.lag_from_answer.percentile_ms(100) == 0.0, "negative lag is recorded as 0"
    assert stats.lag_from_send.percentile_ms(50) == pytest.approx(4.0, rel=0.01)
    assert book.tracked == 0


def test_only_writes_started_in_the_window_count() -> None:
    book = ledger(subscribers=1)
    assert not book.counts(9.99) and book.counts(10.0) and not book.counts(20.0)
    book.written(SHARD, 1, sent_s=9.9, answered_s=10.1, entries=4, counted=False)
    book.received(SHARD, 1, 4, received_s=10.2)
    stats = book.stats
    assert (stats.expected_entries, stats.delivered_entries, stats.lag_from_send.count) == (0, 0, 0)
    assert stats.window_entries == 4, "the delivery rate counts every batch received in the window"
    assert book.tracked == 0, "matched all the same"
    assert stats.delivered_ratio is None


def test_the_delivery_rate_counts_receipts_inside_the_window_only() -> None:
    book = ledger(subscribers=1)
    for offset, at_s in ((1, 9.0), (2, 10.0), (3, 19.9), (4, 20.0)):
        book.written(SHARD, offset, at_s, at_s, 10, counted=book.counts(at_s))
        book.received(SHARD, offset, 10, at_s + 0.2)
    assert (book.stats.window_entries, book.stats.window_batches) == (10, 1)
    # the write started at 19.9 and delivered after the end (in the drain) counts
    assert (book.stats.expected_entries, book.stats.delivered_entries) == (20, 20)


def test_a_missing_subscriber_shows_in_the_ratio() -> None:
    book = ledger(subscribers=4)
    for offset in range(10):
        book.written(SHARD, offset, 11.0, 11.0, 100, counted=True)
        for _ in range(3):  # one subscriber never delivers
            book.received(SHARD, offset, 100, 11.001)
    assert book.stats.delivered_ratio == pytest.approx(0.75)
    assert book.tracked == 10, "still waiting for the fourth"


def test_offsets_are_per_shard() -> None:
    book = ledger(subscribers=1)
    book.written(1, 50, 11.0, 11.0, 2, counted=True)
    book.received(2, 50, 9, 11.001)  # another shard's entry 50: not this write
    assert book.stats.delivered_entries == 0
    book.received(1, 50, 2, 11.002)
    assert book.stats.delivered_entries == 2
    assert book.last_offset == {1: 50}


def test_last_offset_is_the_highest_answered() -> None:
    book = ledger(subscribers=1)
    for offset in (5, 9, 7):
        book.written(SHARD, offset, 11.0, 11.0, 1, counted=True)
    assert book.last_offset[SHARD] == 9


def test_old_writes_are_dropped_and_counted() -> None:
    book = ledger(subscribers=1, max_age_s=1.0)
    book.written(SHARD, 1, 11.0, 11.0, 5, counted=True)  # never delivered
    book.written(SHARD, 2, 11.5, 11.5, 5, counted=True)
    assert book.tracked == 2
    book.written(SHARD, 3, 12.2, 12.2, 5, counted=True)  # 1 is now over a second old
    assert book.stats.dropped_writes == 1
    assert book.tracked == 2
    book.received(SHARD, 1, 5, 12.3)  # too late: not counted, waits as an early batch
    assert book.stats.delivered_entries == 0
    book.received(SHARD, 2, 5, 12.3)
    assert book.stats.delivered_entries == 5


def test_early_batches_without_a_write_are_dropped_in_time() -> None:
    book = ledger(subscribers=2, max_age_s=1.0)
    book.received(SHARD, 900, 1, 11.0)  # someone else's write
    book.received(SHARD, 900, 1, 11.0)
    book.received(SHARD, 901, 1, 12.5)
    assert book.stats.dropped_batches == 2
    assert book.tracked == 1


def test_what_is_held_is_bounded() -> None:
    book = ledger(subscribers=1, max_tracked=100)
    for offset in range(1000):
        book.written(SHARD, offset, 11.0, 11.0, 1, counted=True)
        assert book.tracked <= 100
    assert book.stats.dropped_writes == 900
    book.received(SHARD, 999, 1, 11.1)
    assert book.stats.delivered_entries == 1


def test_a_tracked_write_survives_the_pruning_of_its_early_entry() -> None:
    book = ledger(subscribers=2, max_age_s=1.0)
    book.received(SHARD, 5, 1, 11.0)  # early, tracked at 11.0
    book.written(SHARD, 5, 10.9, 11.9, 1, counted=True)  # tracked again at 11.9
    book.written(SHARD, 6, 12.5, 12.5, 1, counted=True)  # prunes the 11.0 entry only
    assert book.stats.dropped_writes == 0
    book.received(SHARD, 5, 1, 12.6)
    assert book.stats.delivered_entries == 2


def test_more_copies_than_subscribers_are_not_counted() -> None:
    book = ledger(subscribers=1)
    book.received(SHARD, 5, 1, 11.0)
    book.received(SHARD, 5, 1, 11.0)
    assert book.stats.dropped_batches == 1
    book.written(SHARD, 5, 10.9, 11.1, 1, counted=True)
    assert book.stats.delivered_ratio == 1.0


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ledger(subscribers=0)
    with pytest.raises(ValueError, match="positive"):
        ledger(max_tracked=0)
