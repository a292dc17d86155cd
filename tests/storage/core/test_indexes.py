"""Secondary indexes at the core: entries kept exact through every kind of change,
and reads by index with every comparison."""

from __future__ import annotations

import pytest

from cairn.common.errors import InvalidRequest, RequestTooLarge
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits
from cairn.storage.core import reads
from cairn.storage.core.indexes import INDEX_PREFIX, RECORD_INDEXES_PREFIX
from cairn.storage.core.meta import prefix_end
from cairn.storage.core.validation import MAX_SECONDARY_INDEXES_PER_PUT, validate_write
from cairn.storage.kv import Column
from support.memory_shard import ORDER, Shard, put


def indexed(key: str, *pairs: tuple[str, str], **kwargs: object) -> pb.WriteRequest:
    indexes = [pb.SecondaryIndex(index_name=name, secondary_key=sk) for name, sk in pairs]
    return put(key, secondary_indexes=indexes, **kwargs)


def by_index(
    shard: Shard, name: str, key: str, comparison: int = pb.EQUAL, include_value: bool = True
) -> tuple[str, str] | None:
    """(primary key, secondary key) found, None for KEY_NOT_FOUND."""
    request = pb.GetRequest(
        key=key,
        secondary_index_name=name,
        comparison_type=comparison,
        include_value=include_value,  # type: ignore[arg-type]
    )
    response = reads.get(shard.kv, request, ORDER)
    if response.status == pb.KEY_NOT_FOUND:
        assert not response.HasField("key")
        return None
    assert response.status == pb.OK
    primary = shard.get(response.key)
    assert response.version == primary.version
    assert response.HasField("value") == include_value
    if include_value:
        assert response.value == primary.value
    return response.key, response.secondary_index_key


def listed(shard: Shard, name: str, start: str, end: str) -> list[str]:
    keys = list(reads.list_index(shard.kv, name, start, end, ORDER))
    scanned = list(reads.scan_index(shard.kv, name, start, end, ORDER))
    assert [key for key, _ in scanned] == keys
    return keys


def internal_index_keys(shard: Shard) -> list[bytes]:
    return [
        key
        for prefix in (INDEX_PREFIX, RECORD_INDEXES_PREFIX)
        for key, _ in shard.kv.scan(Column.META, prefix, prefix_end(prefix))
    ]


def test_overwrites_replace_the_entries_exactly() -> None:
    shard = Shard()
    shard.write(indexed("/r", ("name", "alice"), ("city", "rome")))
    assert by_index(shard, "name", "alice") == ("/r", "alice")
    assert by_index(shard, "city", "rome") == ("/r", "rome")

    shard.write(indexed("/r", ("name", "bob")))
    assert by_index(shard, "name", "alice") is None
    assert by_index(shard, "city", "rome") is None
    assert by_index(shard, "name", "bob") == ("/r", "bob")

    # a plain put (the fast path) drops the entries
    shard.write(put("/r", b"plain"))
    assert by_index(shard, "name", "bob") is None
    assert internal_index_keys(shard) == []

    # so does a general put without indexes
    shard.write(indexed("/r", ("name", "carol")))
    shard.write(put("/r", partition_key="p"))
    assert by_index(shard, "name", "carol") is None
    assert internal_index_keys(shard) == []


def test_refused_puts_and_deletes_keep_the_entries() -> None:
    shard = Shard()
    shard.write(indexed("/r", ("name", "alice")))
    refused = shard.write(indexed("/r", ("name", "x"), expected_version_id=99)).puts[0]
    assert refused.status == pb.UNEXPECTED_VERSION_ID
    refused = shard.write(indexed("/r", ("name", "y"), session_id=12345)).puts[0]
    assert refused.status == pb.SESSION_DOES_NOT_EXIST
    delete = pb.WriteRequest(deletes=[pb.DeleteRequest(key="/r", expected_version_id=99)])
    assert shard.write(delete).deletes[0].status == pb.UNEXPECTED_VERSION_ID
    assert by_index(shard, "name", "alice") == ("/r", "alice")
    assert listed(shard, "name", "a", "z") == ["/r"]


def test_delete_and_delete_range_remove_the_entries() -> None:
    shard = Shard()
    for i in range(4):
        shard.write(indexed(f"/d/{i}", ("n", f"k{i}"), ("m", "same")))
    shard.write(indexed("/other", ("n", "k9")))
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/d/0")]))
    assert listed(shard, "n", "k", "l") == ["/d/1", "/d/2", "/d/3", "/other"]
    shard.write(
        pb.WriteRequest(
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/d/", end_exclusive="/d//")]
        )
    )
    assert listed(shard, "n", "k", "l") == ["/other"]
    assert listed(shard, "m", "", "~") == []
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/other")]))
    assert internal_index_keys(shard) == []


def test_closing_a_session_removes_the_entries_of_the_records_it_owned() -> None:
    shard = Shard()
    first, second = shard.create_session(), shard.create_session()
    shard.write(indexed("/e/1", ("owner", "first"), session_id=first))
    shard.write(indexed("/e/2", ("owner", "first"), session_id=first))
    # taken over by the second session, with a new entry
    shard.write(indexed("/e/2", ("owner", "second"), session_id=second))
    assert shard.close_session(first)
    assert by_index(shard, "owner", "first") is None
    assert by_index(shard, "owner", "second") == ("/e/2", "second")
    assert shard.close_session(second)
    assert internal_index_keys(shard) == []


def test_get_by_index_with_every_comparison() -> None:
    shard = Shard()
    shard.write(indexed("/p/2", ("i", "b")))
    shard.write(indexed("/p/1", ("i", "b")))
    shard.write(indexed("/p/3", ("i", "d")))
    # hierarchical order: a secondary key with more segments sorts after "d"
    shard.write(indexed("/p/4", ("i", "a/x")))
    shard.write(indexed("/q", ("j", "c")))  # another index: never seen
    cases = {
        # key: EQUAL, FLOOR, CEILING, LOWER, HIGHER
        "a": (None, None, ("/p/1", "b"), None, ("/p/1", "b")),
        "b": (("/p/1", "b"), ("/p/2", "b"), ("/p/1", "b"), None, ("/p/3", "d")),
        "c": (None, ("/p/2", "b"), ("/p/3", "d"), ("/p/2", "b"), ("/p/3", "d")),
        "d": (("/p/3", "d"), ("/p/3", "d"), ("/p/3", "d"), ("/p/2", "b"), ("/p/4", "a/x")),
        "a/x": (("/p/4", "a/x"), ("/p/4", "a/x"), ("/p/4", "a/x"), ("/p/3", "d"), None),
        "z/z": (None, ("/p/4", "a/x"), None, ("/p/4", "a/x"), None),
    }
    comparisons = (pb.EQUAL, pb.FLOOR, pb.CEILING, pb.LOWER, pb.HIGHER)
    for key, expected in cases.items():
        got = tuple(by_index(shard, "i", key, comparison) for comparison in comparisons)
        assert got == expected, key
    assert by_index(shard, "i", "b", pb.EQUAL, include_value=False) == ("/p/1", "b")
    assert by_index(shard, "missing", "b") is None


def test_list_and_scan_follow_the_index_order() -> None:
    shard = Shard()
    shard.write(indexed("/z", ("tag", "blue"), ("tag", "red"), ("tag", "red")))
    shard.write(indexed("/a", ("tag", "red")))
    shard.write(indexed("/m", ("tag", "green")))
    # by secondary key, then primary key; one row per entry (a duplicate pair counts once)
    assert listed(shard, "tag", "a", "zzz") == ["/z", "/m", "/a", "/z"]
    assert listed(shard, "tag", "green", "red") == ["/m"]
    assert listed(shard, "tag", "red", "green") == []
    assert listed(shard, "tag", "red", "") == []
    scanned = dict(reads.scan_index(shard.kv, "tag", "blue", "c", ORDER))
    assert list(scanned) == ["/z"]
    assert reads.record_response("/z", scanned["/z"], True, pb.GetResponse()).value == b"v"


def test_names_and_secondary_keys_with_nul_bytes_and_shared_prefixes_stay_apart() -> None:
    shard = Shard()
    shard.write(indexed("/1", ("n", "k"), ("n\x00", "k"), ("nn", "k")))
    shard.write(indexed("/2", ("n", "k\x00"), ("n", "k\x00a"), ("n", "k\x01")))
    assert listed(shard, "n", "k", "l") == ["/1", "/2", "/2", "/2"]
    assert listed(shard, "n\x00", "", "~") == ["/1"]
    assert listed(shard, "nn", "", "~") == ["/1"]
    assert by_index(shard, "n", "k\x00", pb.HIGHER) == ("/2", "k\x00a")
    assert by_index(shard, "n", "k\x00a", pb.LOWER) == ("/2", "k\x00")
    assert by_index(shard, "n", "k", pb.HIGHER) == ("/2", "k\x00")


def test_a_sequence_put_indexes_the_generated_key() -> None:
    shard = Shard()
    request = indexed("/s", ("by", "first"), partition_key="p", sequence_key_delta=[1])
    key = shard.write(request).puts[0].key
    assert by_index(shard, "by", "first") == (key, "first")


def test_validation_rules() -> None:
    limits = Limits()

    def check(*pairs: tuple[str, str]) -> None:
        request = indexed("/k", *pairs)
        validate_write(request, limits, request.ByteSize())

    check(("name", ""), ("name", "x"))
    with pytest.raises(InvalidRequest, match="name"):
        check(("", "x"))
    with pytest.raises(RequestTooLarge, match="secondary key"):
        check(("name", "k" * (limits.max_key_bytes + 1)))
    with pytest.raises(RequestTooLarge, match="secondary indexes"):
        check(*[("name", str(i)) for i in range(MAX_SECONDARY_INDEXES_PER_PUT + 1)])
