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
_DELETED_VALUE = wire.notification_value(_DELETED, None, None)


class EntryNotifications:
    """The changes of one entry, keyed by user key; the last change of a key wins.
    Each key maps to its notification already encoded: all puts of an entry share
    one version id, so they share a few encodings, made once."""

    __slots__ = ("_changes", "_created", "_created_version", "_modified", "_modified_version")

    def __init__(self) -> None:
        self._changes: dict[str, bytes] = {}
        self._created_version = -1
        self._created = b""
        self._modified_version = -1
        self._modified = b""

    def created(self, key: str, version_id: int) -> None:
        if version_id != self._created_version:
            self._created_version = version_id
            self._created = wire.notification_value(_CREATED, version_id, None)
        self._changes[key] = self._created

    def modified(self, key: str, version_id: int) -> None:
        if version_id != self._modified_version:
            self._modified_version = version_id
            self._modified = wire.notification_value(_MODIFIED, version_id, None)
        self._changes[key] = self._modified

    def put_encodings(self, version_id: int) -> tuple[dict[str, bytes], bytes, bytes]:
        """For a loop over many puts of one entry: the key -> encoding dict to fill,
        and the encodings of a creation and a modification at `version_id` (the same
        as `created` and `modified` store, without a call per key)."""
        if version_id != self._created_version:
            self._created_version = version_id
            self._created = wire.notification_value(_CREATED, version_id, None)
        if version_id != self._modified_version:
            self._modified_version = version_id
            self._modified = wire.notification_value(_MODIFIED, version_id, None)
        return self._changes, self._created, self._modified

    def deleted(self, key: str) -> None:
        self._changes[key] = _DELETED_VALUE

    def range_deleted(self, start: str, end: str) -> None:
        self._changes[start] = wire.notification_value(_RANGE_DELETED, None, end)

    def __bool__(self) -> bool:
        return bool(self._changes)

    def encode(self, shard_id: int, offset: int, timestamp_ms: int) -> bytes:
        """The serialized NotificationBatch, hand-encoded (see wire.py for why)."""
        header = wire.notification_batch_header(shard_id, offset, timestamp_ms)
        return header + b"".join(wire.notification_entries(self._changes))


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
