"""A subscriber's change filter: key prefixes in the namespace's key order, version ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.common.errors import InvalidRequest
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.notification_filter import ChangeFilter, change_filter

keys = st.text(alphabet=st.sampled_from(["a", "b", "/", "~"]), max_size=8)


def subscription(*prefixes: str, include_stat: bool | None = None) -> pb.NotificationsRequest:
    request = pb.NotificationsRequest(shard=0, key_prefixes=prefixes)
    if include_stat is not None:
        request.include_stat = include_stat
    return request


def make(order: KeyOrder, *prefixes: str, include_stat: bool | None = None) -> ChangeFilter:
    return change_filter(subscription(*prefixes, include_stat=include_stat), order, 4, 10)


def batch(changes: dict[str, pb.Notification]) -> bytes:
    message = pb.NotificationBatch(shard=2, offset=7, timestamp=99)
    for key, change in changes.items():
        message.notifications[key].CopyFrom(change)
    return message.SerializeToString()


def test_an_unfiltered_subscription_passes_the_stored_batch_through() -> None:
    stored = batch({"/a": pb.Notification(type=pb.KEY_CREATED, version_id=7)})
    assert make(KeyOrder.HIERARCHICAL).select(stored) is stored
    assert make(KeyOrder.HIERARCHICAL, "").select(stored) is stored


def test_only_wanted_changes_are_kept_and_a_batch_of_none_is_not_sent() -> None:
    stored = batch(
        {
            "/brokers/1": pb.Notification(type=pb.KEY_CREATED, version_id=7),
            "/brokers/2": pb.Notification(type=pb.KEY_DELETED),
            "/ledgers/1": pb.Notification(type=pb.KEY_MODIFIED, version_id=7),
            "/a": pb.Notification(type=pb.KEY_RANGE_DELETED, key_range_last="/c"),
            "/x": pb.Notification(type=pb.KEY_RANGE_DELETED, key_range_last="/z"),
        }
    )
    selected = make(KeyOrder.NATURAL, "/brokers/").select(stored)
    assert selected is not None
    message = pb.NotificationBatch.FromString(selected)
    assert (message.shard, message.offset, message.timestamp) == (2, 7, 99)
    assert dict(message.notifications) == {
        "/brokers/1": pb.Notification(type=pb.KEY_CREATED, version_id=7),
        "/brokers/2": pb.Notification(type=pb.KEY_DELETED),
        "/a": pb.Notification(type=pb.KEY_RANGE_DELETED, key_range_last="/c"),
    }
    assert make(KeyOrder.NATURAL, "/zz").select(stored) is None


def test_version_ids_are_left_out_on_request() -> None:
    stored = batch({"/a": pb.Notification(type=pb.KEY_MODIFIED, version_id=7)})
    selected = make(KeyOrder.NATURAL, include_stat=False).select(stored)
    assert selected is not None
    change = pb.NotificationBatch.FromString(selected).notifications["/a"]
    assert change.type == pb.KEY_MODIFIED and not change.HasField("version_id")
    assert make(KeyOrder.NATURAL, include_stat=True).select(stored) is stored


def test_hierarchical_range_deletions_count_by_the_namespace_order() -> None:
    # In hierarchical order "/a/" .. "/a//" holds exactly /a's children: it can
    # cover a key with prefix "/a/b" but not one with prefix "/a/b/" (grandchildren
    # sort after every child) nor "/b".
    wanted = make(KeyOrder.HIERARCHICAL, "/a/b")
    assert wanted.wants_range("/a/", "/a//")
    assert not make(KeyOrder.HIERARCHICAL, "/a/b/").wants_range("/a/", "/a//")
    assert not make(KeyOrder.HIERARCHICAL, "/b").wants_range("/a/", "/a//")
    # In natural order "/a/" .. "/a0" holds every key under /a/, /a/b/c included,
    # and "/a/" .. "/a//" none with prefix "/a/b" ("/" sorts before "b").
    assert make(KeyOrder.NATURAL, "/a/b/").wants_range("/a/", "/a0")
    assert not make(KeyOrder.NATURAL, "/a/b").wants_range("/a/", "/a//")


@pytest.mark.parametrize("order", list(KeyOrder))
@given(prefix=keys, start=keys, end=keys, key=keys)
def test_a_range_deletion_is_wanted_when_it_covers_a_wanted_key(
    order: KeyOrder, prefix: str, start: str, end: str, key: str
) -> None:
    wanted = make(order, prefix)
    covered = order.compare(start, key) <= 0 < order.compare(end, key)
    if covered and key.startswith(prefix):
        assert wanted.wants_range(start, end)
    if order.compare(start, end) >= 0 and wanted.prefixes:
        assert not wanted.wants_range(start, end)


def test_limits_on_prefixes_are_clear_errors() -> None:
    with pytest.raises(InvalidRequest, match="at most 4 key prefixes"):
        make(KeyOrder.NATURAL, "a", "b", "c", "d", "e")
    with pytest.raises(InvalidRequest, match="limited to 10 bytes"):
        make(KeyOrder.NATURAL, "x" * 11)
