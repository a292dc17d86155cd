"""Conversions between the replication protocol's messages and the core's values."""

from __future__ import annotations

from collections.abc import Iterable

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import ShardSpec
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId, TermHistory, TermStart
from cairn.storage.wal import LogEntry

_SORTING_OF_ORDER = {
    KeyOrder.HIERARCHICAL: pb.KEY_SORTING_HIERARCHICAL,
    KeyOrder.NATURAL: pb.KEY_SORTING_NATURAL,
}


def spec_message(spec: ShardSpec) -> rpb.ShardSpec:
    return rpb.ShardSpec(
        namespace=spec.namespace,
        key_sorting=_SORTING_OF_ORDER[spec.key_order],
        notifications_disabled=not spec.notifications_enabled,
    )


def key_order_of(sorting: int) -> KeyOrder:
    """Unknown sorting means the default, hierarchical (as for Oxia clients)."""
    return KeyOrder.NATURAL if sorting == pb.KEY_SORTING_NATURAL else KeyOrder.HIERARCHICAL


def spec_of(message: rpb.ShardSpec) -> ShardSpec:
    return ShardSpec(
        message.namespace, key_order_of(message.key_sorting), not message.notifications_disabled
    )


def node_message(member: Member) -> rpb.Node:
    return rpb.Node(public_address=member.public_address, internal_address=member.internal_address)


def member_of(node: rpb.Node) -> Member:
    return Member(node.public_address, node.internal_address)


def incarnation_of(value: int) -> int | None:
    """A replica's incarnation as sent: 0 means a pod that does not report one."""
    return value or None


def entry_id_message(entry_id: EntryId) -> rpb.EntryId:
    return rpb.EntryId(term=entry_id.term, offset=entry_id.offset)


def entry_id_of(message: rpb.EntryId) -> EntryId:
    return EntryId(message.term, message.offset)


def history_message(history: TermHistory) -> tuple[list[rpb.TermStart], rpb.EntryId]:
    starts = [rpb.TermStart(term=s.term, first_offset=s.first_offset) for s in history.starts]
    return starts, entry_id_message(history.head)


def history_of_message(starts: Iterable[rpb.TermStart], head: rpb.EntryId) -> TermHistory:
    """A leader's history as sent: its terms from its first entry, and its head
    (its base, if it holds no entry)."""
    term_starts = [TermStart(s.term, s.first_offset) for s in starts]
    if not term_starts:
        return TermHistory(base=entry_id_of(head))
    return TermHistory(term_starts, head.offset)


def log_entry_message(entry: LogEntry) -> rpb.LogEntry:
    return rpb.LogEntry(
        term=entry.term, offset=entry.offset, timestamp_ms=entry.timestamp_ms, payload=entry.payload
    )


def log_entry_of(message: rpb.LogEntry) -> LogEntry:
    return LogEntry(message.term, message.offset, message.timestamp_ms, message.payload)
