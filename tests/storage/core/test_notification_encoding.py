"""Hand-encoded notification batches parse to exactly the intended message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.notifications import EntryNotifications

changes = st.lists(
    st.tuples(
        st.sampled_from(["created", "modified", "deleted", "range_deleted"]),
        st.text(max_size=12),
        st.integers(min_value=0, max_value=2**63 - 1),
        st.text(max_size=12),
    ),
    max_size=12,
)


@given(
    shard=st.integers(min_value=0, max_value=2**40),
    offset=st.integers(min_value=0, max_value=2**62),
    timestamp=st.integers(min_value=0, max_value=2**64 - 1),
    items=changes,
)
def test_encoded_batch_matches_the_protobuf_message(
    shard: int, offset: int, timestamp: int, items: list[tuple[str, str, int, str]]
) -> None:
    notes = EntryNotifications()
    expected = pb.NotificationBatch(shard=shard, offset=offset, timestamp=timestamp)
    for kind, key, version_id, range_end in items:
        entry = pb.Notification()
        if kind == "created":
            notes.created(key, version_id)
            entry.type, entry.version_id = pb.KEY_CREATED, version_id
        elif kind == "modified":
            notes.modified(key, version_id)
            entry.type, entry.version_id = pb.KEY_MODIFIED, version_id
        elif kind == "deleted":
            notes.deleted(key)
            entry.type = pb.KEY_DELETED
        else:
            notes.range_deleted(key, range_end)
            entry.type, entry.key_range_last = pb.KEY_RANGE_DELETED, range_end
        expected.notifications[key].CopyFrom(entry)  # the last change of a key wins
    decoded = pb.NotificationBatch.FromString(notes.encode(shard, offset, timestamp))
    assert decoded == expected
    for key, entry in decoded.notifications.items():
        assert entry.HasField("version_id") == (entry.type in (pb.KEY_CREATED, pb.KEY_MODIFIED))
        assert entry.HasField("key_range_last") == (entry.type == pb.KEY_RANGE_DELETED), key
