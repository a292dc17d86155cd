"""Which stored changes a notification subscriber wants (a Cairn extension).

A subscriber may name key prefixes and ask to leave out version ids. The stored
batches hold every change of an entry; `ChangeFilter.select` cuts one down to what
the subscriber asked for, or to nothing, in which case the entry is not sent.

A change of one key matches when the key starts with a prefix. A range deletion
[start, end) matches when it can cover a key with a prefix: when its encoded range
in the namespace's key order meets one of the prefix's encoded ranges
(`KeyOrder.prefix_ranges`). Both tests are pure, and every replica stores the
same batches, so a subscriber that resumes on another leader gets the same
selection of the same entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cairn.common.errors import InvalidRequest
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb

_RANGE_DELETED = pb.KEY_RANGE_DELETED


@dataclass(frozen=True, slots=True)
class ChangeFilter:
    prefixes: tuple[str, ...]
    key_order: KeyOrder
    include_stat: bool
    # The prefixes' encoded ranges [start, end) (end None: unbounded).
    ranges: tuple[tuple[bytes, bytes | None], ...]

    @property
    def passes_everything(self) -> bool:
        return not self.prefixes and self.include_stat

    def wants_key(self, key: str) -> bool:
        return not self.prefixes or key.startswith(self.prefixes)

    def wants_range(self, start: str, end: str) -> bool:
        if not self.prefixes:
            return True
        low, high = self.key_order.encode(start), self.key_order.encode(end)
        return any(
            max(low, prefix_start) < (high if prefix_end is None else min(high, prefix_end))
            for prefix_start, prefix_end in self.ranges
        )

    def select(self, batch: bytes) -> bytes | None:
        """The serialized batch cut down to the wanted changes; None if none is."""
        if self.passes_everything:
            return batch
        message = pb.NotificationBatch.FromString(batch)
        selected = pb.NotificationBatch(
            shard=message.shard, offset=message.offset, timestamp=message.timestamp
        )
        for key, change in message.notifications.items():
            wanted = (
                self.wants_range(key, change.key_range_last)
                if change.type == _RANGE_DELETED
                else self.wants_key(key)
            )
            if not wanted:
                continue
            kept = selected.notifications[key]
            kept.CopyFrom(change)
            if not self.include_stat:
                kept.ClearField("version_id")
        if not selected.notifications:
            return None
        return selected.SerializeToString()


def change_filter(
    request: pb.NotificationsRequest,
    key_order: KeyOrder,
    max_prefixes: int,
    max_prefix_bytes: int,
) -> ChangeFilter:
    """The filter a GetNotifications request asks for; InvalidRequest past the limits."""
    prefixes: Sequence[str] = request.key_prefixes
    if len(prefixes) > max_prefixes:
        raise InvalidRequest(
            f"a notification subscription takes at most {max_prefixes} key prefixes, "
            f"not {len(prefixes)}"
        )
    for prefix in prefixes:
        if len(prefix.encode("utf-8")) > max_prefix_bytes:
            raise InvalidRequest(
                f"a notification key prefix is limited to {max_prefix_bytes} bytes "
                f"(one starting {prefix[:32]!r} is longer)"
            )
    # An empty prefix matches every key: the subscription is unfiltered.
    unique = () if "" in prefixes else tuple(sorted(set(prefixes)))
    ranges = tuple(r for prefix in unique for r in key_order.prefix_ranges(prefix))
    include_stat = request.include_stat if request.HasField("include_stat") else True
    return ChangeFilter(unique, key_order, include_stat, ranges)
