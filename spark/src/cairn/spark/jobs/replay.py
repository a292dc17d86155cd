"""The changes a shard's feed reports while its records are scanned, folded into
what each key is at the snapshot's end offset (pure: no I/O).

A scan is not a snapshot: records change under it. But every change has a
notification at the offset of the log entry that made it, and a record's
version id IS that offset. So with the feed read from the offset noted before
the scan (`start`) up to an end offset noted after it (`end`), each key's state
at `end` is known: the last notification of the key (or the last range deletion
covering it) wins over what the scan saw, and a scanned record that no later
notification touches is as the scan saw it.

A key whose last change at `end` is a put of version V needs the value of V: the
scan has it when it read V; otherwise it is fetched, and if the key changed
again since, the snapshot's end moves forward (see export_shard)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cairn.client.records import NotificationBatch, NotificationType
from cairn.common.keyorder import KeyOrder

# A key's last change: (offset, version id of a put or None for a deletion).
Change = tuple[int, int | None]


@dataclass
class ShardReplay:
    order: KeyOrder
    # The offset the feed was read after (the head noted before the scan), and the
    # last offset folded in.
    start: int
    end: int
    latest: dict[str, Change] = field(default_factory=dict)
    # Range deletions: (first key encoded, end key encoded (exclusive), offset).
    tombstones: list[tuple[bytes, bytes, int]] = field(default_factory=list)
    changes: int = 0

    def apply(self, batches: Iterable[NotificationBatch]) -> None:
        encode = self.order.encoder
        for batch in batches:
            assert batch.offset > self.start, "a notification from before the scan"
            for change in batch.notifications:
                self.changes += 1
                if change.type is NotificationType.RANGE_DELETED:
                    first = encode(change.key)
                    last = encode(change.key_range_last or "")
                    self.tombstones.append((first, last, batch.offset))
                    for key in self.latest:
                        if first <= encode(key) < last:
                            self.latest[key] = (batch.offset, None)
                elif change.type is NotificationType.DELETED:
                    self.latest[change.key] = (batch.offset, None)
                else:
                    self.latest[change.key] = (batch.offset, change.version_id)
            self.end = max(self.end, batch.offset)

    def removed_by_range(self, encoded_key: bytes, version_id: int) -> bool:
        """Whether a range deletion after this version of an otherwise unchanged
        key removed it."""
        return any(
            first <= encoded_key < last and offset > version_id
            for first, last, offset in self.tombstones
        )

    def wanted(self, scanned_recent: dict[str, int]) -> dict[str, int]:
        """The keys whose value at `end` the scan does not have: key -> version id.
        `scanned_recent`: the scanned records written after `start` (only those can
        be the version a notification names)."""
        return {
            key: version
            for key, (_, version) in self.latest.items()
            if version is not None and scanned_recent.get(key) != version
        }
