"""Point-in-time recovery's second half: apply a source's changes after an
export's offsets to the cluster the export was restored into, up to the source's
heads now.

Per source shard, in offset order: a created or modified key is put with its
value now (read from that shard; a key deleted since is skipped, its deletion
comes later in the feed), a deleted key is deleted. A range deletion deleted
only that shard's keys in the source, so in the target it deletes the keys of
the range that the source routes to that shard (by the source's shard map), not
the whole range: other shards' keys in the range may have been written after it.
Keys that a client put on a shard their hash does not name (the `oxia` 0.2.1
client's XXH64 routing) are beyond that rule: their range deletions are not
applied.

Runs on the driver with the client library: it is as fast as the changes are few."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

from cairn.client import errors
from cairn.client.records import NotificationType
from cairn.client.scans import KEYS_END
from cairn.client.sync import Client
from cairn.spark.options import ConnectionSettings

_PAGE_BATCHES = 1000


@dataclass
class FollowCounts:
    puts: int = 0
    deletes: int = 0
    range_deletes: int = 0
    skipped: int = 0


def follow(
    source: ConnectionSettings,
    target: ConnectionSettings,
    offsets: Mapping[int, int],
    caught_up_after_s: float = 0.5,
) -> tuple[dict[int, int], FollowCounts]:
    """Apply the changes after `offsets` (shard -> offset); the offsets reached."""
    counts = FollowCounts()
    reached = dict(offsets)
    with (
        Client(source.address, namespace=source.namespace, options=source.client_options()) as src,
        Client(target.address, namespace=target.namespace, options=target.client_options()) as dst,
    ):
        shard_map = src.shard_map
        for shard, offset in sorted(offsets.items()):
            head = src.notification_head(shard)
            after = offset
            while after < head:
                try:
                    page = src.read_notifications(
                        shard,
                        after,
                        head,
                        max_batches=_PAGE_BATCHES,
                        idle_timeout_s=caught_up_after_s,
                    )
                except errors.NotificationsTrimmed:
                    raise RuntimeError(
                        f"shard {shard}: the changes after offset {after} were trimmed; "
                        "restore a newer export"
                    ) from None
                for batch in page:
                    for change in batch.notifications:
                        if change.type is NotificationType.DELETED:
                            _delete(dst, change.key)
                            counts.deletes += 1
                        elif change.type is NotificationType.RANGE_DELETED:
                            end = change.key_range_last or KEYS_END
                            for key in dst.iter_list(change.key, end):
                                if shard_map.shard_for(key) == shard:
                                    _delete(dst, key)
                            counts.range_deletes += 1
                        else:
                            found = list(src.shard_scan(shard, change.key, change.key + "\x00"))
                            if not found:
                                counts.skipped += 1
                                continue
                            dst.put(change.key, found[0].value or b"")
                            counts.puts += 1
                if len(page) < _PAGE_BATCHES:
                    break
                after = page[-1].offset
            reached[shard] = max(offset, head)
    return reached, counts


def _delete(client: Client, key: str) -> None:
    # Already absent: applied before (following again is harmless).
    with contextlib.suppress(errors.KeyNotFound):
        client.delete(key)
