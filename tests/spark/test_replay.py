"""The fold of a shard's changes over its scan (pure; no Spark, no server)."""

from __future__ import annotations

from cairn.client.records import Notification, NotificationBatch, NotificationType
from cairn.common.keyorder import KeyOrder
from cairn.spark.jobs.manifest import Manifest, RowChecksum, ShardExport
from cairn.spark.jobs.replay import ShardReplay

CREATED, MODIFIED = NotificationType.CREATED, NotificationType.MODIFIED
DELETED, RANGE_DELETED = NotificationType.DELETED, NotificationType.RANGE_DELETED


def batch(offset: int, *changes: Notification) -> NotificationBatch:
    return NotificationBatch(0, offset, 0, changes)


def test_the_last_change_of_each_key_wins_over_the_scan() -> None:
    replay = ShardReplay(KeyOrder.HIERARCHICAL, start=10, end=10)
    replay.apply(
        [
            batch(11, Notification("/a", MODIFIED, 11)),
            batch(12, Notification("/b", DELETED)),
            batch(13, Notification("/c", CREATED, 13), Notification("/a", MODIFIED, 13)),
            batch(14, Notification("/r/", RANGE_DELETED, key_range_last="/r//")),
            batch(15, Notification("/r/2", CREATED, 15)),
        ]
    )
    assert replay.end == 15 and replay.changes == 6
    # The scan saw /a at 11 (before its second change) and /c at 13: only /a and
    # /r/2 (created after the scan passed) need fetching.
    assert replay.wanted({"/a": 11, "/c": 13}) == {"/a": 13, "/r/2": 15}
    assert replay.latest["/b"] == (12, None)
    encode = KeyOrder.HIERARCHICAL.encode
    # /r/1, unchanged since version 5, was removed by the range deletion at 14;
    # /r/1/deeper is not in the range (hierarchical order), /s is not either.
    assert replay.removed_by_range(encode("/r/1"), 5)
    assert not replay.removed_by_range(encode("/r/1/deeper"), 5)
    assert not replay.removed_by_range(encode("/s"), 5)
    # A range deletion also ends a key changed before it in the window (and only
    # the keys of its range: /r/2 is deeper than "/" .. "/zzz" holds).
    replay.apply([batch(16, Notification("/", RANGE_DELETED, key_range_last="/zzz"))])
    assert replay.latest["/a"] == (16, None) and replay.latest["/r/2"] == (15, 15)
    assert replay.wanted({}) == {"/r/2": 15}


def test_the_manifest_round_trips_and_the_checksum_covers_keys_and_values() -> None:
    one, two = RowChecksum(), RowChecksum()
    one.add([("/a", b"1"), ("/b", b"")])
    two.add([("/a", b"1"), ("/b", b"\x00")])
    assert one.hexdigest() != two.hexdigest() and one.rows == 2 and one.bytes == 5
    shard = ShardExport(
        0, 3, 9, (0, 99), 2, 5, one.hexdigest(), "data/shard-00000.parquet", 4, 1, 1
    )
    manifest = Manifest(
        "default", "a:1", "hierarchical", "xxh3", "2026-11-28T07:00:00+00:00", (shard,)
    )
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.offsets() == {0: 9} and manifest.rows == 2
