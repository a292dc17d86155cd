"""Change notifications: what each committed entry changed, kept for a retention.

While an entry is applied, `EntryNotifications` collects one change per key
(the last one wins); the entry's NotificationBatch is stored in the internal
state, in the same atomic batch as the data, so notifications are exactly as
durable as the changes they describe and every replica holds the same ones.
Retention is decided from entry timestamps (not a clock), so trimming is
deterministic too.
"""

from __future__ import annotations

from collections.abc import Iterable

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import wire
from cairn.storage.core.meta import (
    NOTIFICATION_PREFIX,
    NOTIFICATIONS_TRIMMED_BEFORE_KEY,
    decode_i64,
    encode_i64,
    notification_key,
    notification_offset_of,
    prefix_end,
)
from cairn.storage.kv.store import Column, KvReader

NOTIFICATIONS_END = prefix_end(NOTIFICATION_PREFIX)

_CREATED = pb.KEY_CREATED
_MODIFIED = pb.KEY_MODIFIED
_DELETED = pb.KEY_DELETED
_RANGE_DELETED = pb.KEY_RANGE_DELETED


class EntryNotifications:
    """The changes of one entry, keyed by user key; the last change of a key wins."""

    __slots__ = ("_changes",)

    def __init__(self) -> None:
        # key -> (type, version_id or None, range end or None)
        self._changes: dict[str, tuple[int, int | None, str | None]] = {}

    def created(self, key: str, version_id: int) -> None:
        self._changes[key] = (_CREATED, version_id, None)

    def modified(self, key: str, version_id: int) -> None:
        self._changes[key] = (_MODIFIED, version_id, None)

    def deleted(self, key: str) -> None:
        self._changes[key] = (_DELETED, None, None)

    def range_deleted(self, start: str, end: str) -> None:
        self._changes[start] = (_RANGE_DELETED, None, end)

    def __bool__(self) -> bool:
        return bool(self._changes)

    def encode(self, shard_id: int, offset: int, timestamp_ms: int) -> bytes:
        """The serialized NotificationBatch, hand-encoded (see wire.py for why)."""
        parts = [wire.notification_batch_header(shard_id, offset, timestamp_ms)]
        for key, (kind, version_id, range_end) in self._changes.items():
            parts.append(wire.notification_entry(key, kind, version_id, range_end))
        return b"".join(parts)


def trimmed_before(reader: KvReader) -> int:
    """Notifications of offsets below this were trimmed; 0 if none ever were."""
    return decode_i64(reader.get(Column.META, NOTIFICATIONS_TRIMMED_BEFORE_KEY), 0)


def stored_batches(reader: KvReader, after_offset: int, limit: int) -> list[tuple[int, bytes]]:
    """Up to `limit` stored (offset, serialized batch) with offset > after_offset."""
    batches = []
    for key, value in reader.scan(
        Column.META, notification_key(after_offset + 1), NOTIFICATIONS_END
    ):
        batches.append((notification_offset_of(key), value))
        if len(batches) >= limit:
            break
    return batches


def expired_batches(
    batches: Iterable[tuple[bytes, bytes]], now_ms: int, retention_ms: int, limit: int
) -> list[tuple[bytes, int]]:
    """(key, offset) of up to `limit` oldest batches older than the retention, from
    the stored batches in key (offset) order."""
    expired = []
    for key, value in batches:
        if pb.NotificationBatch.FromString(value).timestamp >= now_ms - retention_ms:
            break
        expired.append((key, notification_offset_of(key)))
        if len(expired) >= limit:
            break
    return expired


def notification_range() -> tuple[bytes, bytes]:
    """The internal-state key range that holds notification batches."""
    return NOTIFICATION_PREFIX, NOTIFICATIONS_END


def trim_marker(offset: int) -> tuple[bytes, bytes]:
    return NOTIFICATIONS_TRIMMED_BEFORE_KEY, encode_i64(offset + 1)
