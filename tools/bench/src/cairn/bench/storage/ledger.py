"""Matching notifications to the writes that caused them, by log offset: how many
of those expected were delivered, and how late.

The writer reports each answered request: its shard, its entry offset (the version
id its puts were answered with, which is the offset of the log entry holding the
request), when it was sent and answered, how many keys it changed, and whether it
counts (started in [measure_start, end), the rule of every other figure). Each
subscriber reports each batch it receives: shard, offset, entry count, when. The
server commits an entry, then both answers the write and wakes the subscribers, so
the two reports race to the client: whichever comes first waits here for the other.

Accounting (the figures of DeliveryStats):

- expected_entries = subscribers x (keys changed by each counted write): every
  subscriber must receive, once, the batch at that write's offset, holding one
  entry per key the write changed.
- delivered_entries = the entries of batches received at counted writes' offsets,
  whenever received before the count is taken (so including the drain after the
  writer stops). delivered/expected is 1 when nothing was lost, duplicated, or
  later than the drain allowed.
- window_entries, window_batches = everything received in [measure_start, end),
  whoever wrote it: the delivery rate.
- lag, one sample per (subscriber, counted write), so per batch, not per entry:
  received - sent (the actual send: the start in closed loop, the send in open
  loop, so the writer's own schedule lag is not in it), and received - answered,
  which is negative when the notification beat the write's own answer to the
  client (recorded as 0 and counted in `before_answer`).

Memory is bounded: a write waits for its subscribers, and an early batch for its
write, at most `max_age_s`, and at most `max_tracked` of them are held at once;
past either bound the oldest are dropped and counted (`dropped_writes`,
`dropped_batches`). A dropped write's later deliveries go uncounted, so the ratio
can only err low, never high.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from cairn.common.histogram import Histogram

# A write waits at most this long for its notifications (and an early batch for its
# write): far beyond any healthy lag, well within memory at any rate this client drives.
DEFAULT_MAX_AGE_S = 30.0
# Writes and early batches held at once; at ~200 bytes each, about 40 MB at most.
DEFAULT_MAX_TRACKED = 200_000

_Key = tuple[int, int]  # (shard id, offset)


@dataclass(slots=True)
class _Write:
    sent_s: float
    answered_s: float
    entries: int
    counted: bool
    waiting: int  # subscribers whose batch has not come yet
    tracked_s: float


@dataclass(slots=True)
class _Early:
    """Batches received before their write's answer: (received_s, entries) each."""

    tracked_s: float
    receipts: list[tuple[float, int]]


@dataclass(slots=True)
class DeliveryStats:
    subscribers: int
    expected_entries: int = 0
    delivered_entries: int = 0
    counted_writes: int = 0
    window_entries: int = 0
    window_batches: int = 0
    before_answer: int = 0
    dropped_writes: int = 0
    dropped_batches: int = 0
    lag_from_send: Histogram = field(default_factory=Histogram)
    lag_from_answer: Histogram = field(default_factory=Histogram)

    @property
    def delivered_ratio(self) -> float | None:
        if self.expected_entries == 0:
            return None
        return self.delivered_entries / self.expected_entries

    def to_dict(self) -> dict[str, Any]:
        return {
            "subscribers": self.subscribers,
            "expected_entries": self.expected_entries,
            "delivered_entries": self.delivered_entries,
            "counted_writes": self.counted_writes,
            "window_entries": self.window_entries,
            "window_batches": self.window_batches,
            "before_answer": self.before_answer,
            "dropped_writes": self.dropped_writes,
            "dropped_batches": self.dropped_batches,
            "lag_from_send": self.lag_from_send.to_dict(),
            "lag_from_answer": self.lag_from_answer.to_dict(),
        }


class DeliveryLedger:
    """Writes and notification batches of one phase, matched by (shard, offset)."""

    def __init__(
        self,
        subscribers: int,
        measure_start_s: float,
        end_s: float,
        max_tracked: int = DEFAULT_MAX_TRACKED,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        if subscribers < 1 or max_tracked < 1 or max_age_s <= 0:
            raise ValueError("subscribers, max_tracked and max_age_s must be positive")
        self.stats = DeliveryStats(subscribers)
        self._subscribers = subscribers
        self._measure_start_s = measure_start_s
        self._end_s = end_s
        self._max_tracked = max_tracked
        self._max_age_s = max_age_s
        self._writes: dict[_Key, _Write] = {}
        self._early: dict[_Key, _Early] = {}
        # (tracked_s, key) of every write and early entry, oldest first; an entry
        # whose record is gone (or was tracked again later) is skipped when popped.
        self._order: collections.deque[tuple[float, _Key]] = collections.deque()
        self.last_offset: dict[int, int] = {}  # per shard, the highest answered write

    def counts(self, start_s: float) -> bool:
        return self._measure_start_s <= start_s < self._end_s

    @property
    def tracked(self) -> int:
        """Writes and early entries held now (bounded by max_tracked)."""
        return len(self._writes) + len(self._early)

    def written(
        self,
        shard_id: int,
        offset: int,
        sent_s: float,
        answered_s: float,
        entries: int,
        counted: bool,
    ) -> None:
        """A write answered with `offset`, which changed `entries` keys."""
        if offset > self.last_offset.get(shard_id, -1):
            self.last_offset[shard_id] = offset
        stats = self.stats
        if counted:
            stats.counted_writes += 1
            stats.expected_entries += entries * self._subscribers
        key = (shard_id, offset)
        write = _Write(sent_s, answered_s, entries, counted, self._subscribers, answered_s)
        early = self._early.pop(key, None)
        if early is not None:
            for received_s, count in early.receipts:
                self._match(write, received_s, count)
        if write.waiting > 0:
            self._writes[key] = write
            self._track(answered_s, key)

    def received(self, shard_id: int, offset: int, entries: int, received_s: float) -> None:
        """A subscriber received the batch of `offset` holding `entries` notifications."""
        stats = self.stats
        if self._measure_start_s <= received_s < self._end_s:
            stats.window_entries += entries
            stats.window_batches += 1
        key = (shard_id, offset)
        write = self._writes.get(key)
        if write is not None:
            self._match(write, received_s, entries)
            if write.waiting <= 0:
                del self._writes[key]
            return
        early = self._early.get(key)
        if early is None:
            self._early[key] = _Early(received_s, [(received_s, entries)])
            self._track(received_s, key)
        elif len(early.receipts) < self._subscribers:
            early.receipts.append((received_s, entries))
        else:  # more copies than subscribers: not the server's contract; not counted
            stats.dropped_batches += 1

    def _match(self, write: _Write, received_s: float, entries: int) -> None:
        write.waiting -= 1
        if not write.counted:
            return
        stats = self.stats
        stats.delivered_entries += entries
        stats.lag_from_send.record_s(received_s - write.sent_s)
        from_answer_s = received_s - write.answered_s
        if from_answer_s < 0:
            stats.before_answer += 1
            from_answer_s = 0.0
        stats.lag_from_answer.record_s(from_answer_s)

    def _track(self, tracked_s: float, key: _Key) -> None:
        self._order.append((tracked_s, key))
        self._prune(tracked_s)

    def _prune(self, now_s: float) -> None:
        """Drop what is older than max_age_s, and the oldest beyond max_tracked."""
        order = self._order
        oldest_kept_s = now_s - self._max_age_s
        while order and (order[0][0] < oldest_kept_s or len(order) > self._max_tracked):
            tracked_s, key = order.popleft()
            write = self._writes.get(key)
            if write is not None and write.tracked_s == tracked_s:
                del self._writes[key]
                self.stats.dropped_writes += 1
            early = self._early.get(key)
            if early is not None and early.tracked_s == tracked_s:
                del self._early[key]
                self.stats.dropped_batches += len(early.receipts)
