"""Applying one log entry of any kind: the single place that decides what an
entry does to a replica's state, on the leader, on followers and on replay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.apply import (
    PendingChanges,
    apply_close_session,
    apply_create_session,
    apply_write,
)
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CLOSE_SESSION,
    CREATE_SESSION,
    FOLDED_WRITES,
    TERM_START,
    Folded,
)
from cairn.storage.core.meta import notification_key
from cairn.storage.core.notifications import (
    EntryNotifications,
    expired_batches,
    notification_range,
    trim_marker,
)

# Entries at offsets divisible by this also trim expired notifications: a function
# of the log, so every replica trims at the same entries.
NOTIFICATION_TRIM_EVERY_OFFSETS = 256


@dataclass(frozen=True, slots=True)
class ShardRules:
    """What a shard's entries mean beyond their own content."""

    shard_id: int
    key_order: KeyOrder
    notifications_enabled: bool
    notification_retention_ms: int
    max_notification_batches_trimmed_per_entry: int


def apply_entry(
    rules: ShardRules,
    state: PendingChanges,
    kind: int,
    body: Message | Folded,
    offset: int,
    timestamp_ms: int,
    plain_puts: bool,
    answer: bool = True,
) -> Any:
    """Apply the entry to `state` and return its result: a serialized WriteResponse
    (a list of them, in order, for folded writes), a session id, whether a session
    was closed, or None (a term start). `answer` False: nobody waits for the result
    (a follower, a replay), so a write's response may be left incomplete."""
    notes = EntryNotifications() if rules.notifications_enabled else None
    result: Any
    if kind == CLIENT_WRITE:
        assert isinstance(body, pb.WriteRequest)
        result = apply_write(
            state, body, offset, timestamp_ms, rules.key_order, plain_puts, notes, answer
        )
    elif kind == FOLDED_WRITES:
        assert isinstance(body, Folded)
        key_order = rules.key_order
        result = [
            apply_write(state, request, offset, timestamp_ms, key_order, plain_puts, notes, answer)
            for request in body.requests
        ]
    elif kind == CREATE_SESSION:
        assert isinstance(body, internal_pb.CreateSessionEntry)
        result = apply_create_session(state, body, offset)
    elif kind == CLOSE_SESSION:
        assert isinstance(body, internal_pb.CloseSessionEntry)
        result = apply_close_session(state, body, rules.key_order, notes)
    elif kind == TERM_START:
        result = None  # changes nothing but the commit offset
    else:
        raise AssertionError(f"unknown entry kind {kind}")
    if notes:
        state.set_meta(notification_key(offset), notes.encode(rules.shard_id, offset, timestamp_ms))
    if offset % NOTIFICATION_TRIM_EVERY_OFFSETS == 0:
        _trim_notifications(rules, state, timestamp_ms)
    return result


def _trim_notifications(rules: ShardRules, state: PendingChanges, timestamp_ms: int) -> None:
    """Drop notifications older than the retention, judged by this entry's
    timestamp, not a clock, and by the state as this entry sees it (the committed
    KV with the earlier entries of its group applied): so every replica trims the
    same batches however it groups entries."""
    expired = expired_batches(
        state.meta_items(*notification_range()),
        timestamp_ms,
        rules.notification_retention_ms,
        rules.max_notification_batches_trimmed_per_entry,
    )
    for key, _ in expired:
        state.set_meta(key, None)
    if expired:
        marker_key, marker = trim_marker(expired[-1][1])
        state.set_meta(marker_key, marker)
