"""The change feed's events and their ids. Pure.

One Server-Sent Event per notification batch (one committed log entry of one
shard). Its `id:` is a `FeedPosition` of every shard: the offset of the last
batch delivered, up to and including this event. A client resuming from any
event id (`Last-Event-ID`) gets every batch after that point on every shard,
and none before.

That needs every shard's position in every id. A shard the feed starts "now"
reports its position with its first batch (an empty one at its current
offset), and batches of other shards may arrive before it; those are held back
until every shard has reported, then sent in arrival order, each id built from
the positions as of that event. For a shard whose first batch comes after an
event, the position in that event's id is just before its first batch: an
empty first batch's own offset (it carries no changes to lose), else the
offset before it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from cairn.client.records import Notification, NotificationBatch, NotificationType
from cairn.gateway.tokens import FeedPosition

_TYPES = {
    NotificationType.CREATED: "created",
    NotificationType.MODIFIED: "modified",
    NotificationType.DELETED: "deleted",
    NotificationType.RANGE_DELETED: "rangeDeleted",
}


class FeedOverflow(Exception):
    """Too many batches held back waiting for a shard's first report."""


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    batch: NotificationBatch

    def encode(self) -> str:
        """The event in the text/event-stream format."""
        return f"id: {self.id}\ndata: {batch_json(self.batch)}\n\n"


def change_document(change: Notification) -> dict[str, object]:
    document: dict[str, object] = {"key": change.key, "type": _TYPES[change.type]}
    if change.version_id is not None:
        document["versionId"] = change.version_id
    if change.key_range_last is not None:
        document["keyRangeEnd"] = change.key_range_last
    return document


def batch_json(batch: NotificationBatch) -> str:
    # json.dumps escapes line breaks, so the data is one line of the stream.
    return json.dumps(
        {
            "shard": batch.shard,
            "offset": batch.offset,
            "timestampMs": batch.timestamp_ms,
            "changes": [change_document(change) for change in batch.notifications],
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def comment(text: str) -> str:
    """A comment line: ignored by clients, keeps the connection visibly alive."""
    return f": {text}\n\n"


def error_event(problem_json: str) -> str:
    """The stream's last event when it ends on an error (a problem document)."""
    return f"event: error\ndata: {problem_json}\n\n"


class FeedState:
    """Turns the client's batches into events with resumable ids."""

    def __init__(
        self,
        namespace: str,
        shards: Collection[int],
        resumed: Mapping[int, int],
        max_pending_batches: int,
    ) -> None:
        self.namespace = namespace
        self.shards = frozenset(shards)
        # Offsets delivered (or, for a shard not reported yet, nothing).
        self._offsets: dict[int, int] = {s: o for s, o in resumed.items() if s in self.shards}
        self._pending: list[NotificationBatch] = []
        self._max_pending = max_pending_batches

    @property
    def complete(self) -> bool:
        return not self._pending and self.shards <= self._offsets.keys()

    def position(self) -> FeedPosition:
        return FeedPosition(self.namespace, dict(self._offsets))

    def push(self, batch: NotificationBatch) -> list[Event]:
        """The events to send for a batch (none while held back)."""
        if batch.shard not in self.shards:
            # Not a shard of the namespace as it was when the feed began.
            return []
        if self.complete:
            self._offsets[batch.shard] = batch.offset
            return [Event(self.position().encode(), batch)]
        self._pending.append(batch)
        reported = self._offsets.keys() | {b.shard for b in self._pending}
        if not self.shards <= reported:
            if len(self._pending) > self._max_pending:
                raise FeedOverflow(
                    f"{len(self._pending)} batches arrived before every shard reported where "
                    "its feed starts"
                )
            return []
        return self._flush()

    def _flush(self) -> list[Event]:
        pending, self._pending = self._pending, []
        for batch in pending:
            if batch.shard not in self._offsets:
                before = batch.offset if not batch.notifications else batch.offset - 1
                self._offsets[batch.shard] = before
        events = []
        for batch in pending:
            self._offsets[batch.shard] = batch.offset
            events.append(Event(self.position().encode(), batch))
        return events


def encode_all(events: Iterable[Event]) -> str:
    return "".join(event.encode() for event in events)
