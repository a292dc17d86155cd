"""Secondary indexes at the core: entries kept exact through every kind of change,
and reads by index with every comparison."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.errors import InvalidRequest, RequestTooLarge
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.config import Limits
from cairn.storage.core import reads
from cairn.storage.core.apply import (
    HeaderCache,
    PendingChanges,
    apply_close_session,
    apply_create_session,
    apply_write,
)
from cairn.storage.core.indexes import (
    HAS_INDEXES,
    INDEX_PREFIX,
    MAX_CARRIED_MIDDLES_BYTES,
    RECORD_INDEXES_PREFIX,
    add_entries,
)
from cairn.storage.core.meta import prefix_end
from cairn.storage.core.validation import MAX_SECONDARY_INDEXES_PER_PUT, validate_write
from cairn.storage.kv import Column, MemoryKv
from cairn.storage.records import FLAGS_OFFSET
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


# Exactness under any interleaving, with the write path's header cache or without
# it: a replaced or deleted record's entries are found from the middles its version
# header carries when it was indexed in this process (indexes.with_carried_middles),
# else from its reverse entry; middles too long to carry are always read.
_INDEX_KEYS = ["/a", "/b", "/c"]
_LONG_SECONDARY = "s" * (MAX_CARRIED_MIDDLES_BYTES + 1)
_index_pairs = st.lists(
    st.tuples(st.sampled_from(["name", "city"]), st.sampled_from(["x", "y", _LONG_SECONDARY])),
    max_size=3,
)
_index_ops = st.one_of(
    # kind: "plain" (the fast path), "general" (a partition key), "ephemeral" (owned
    # by the session, which a "close" ends)
    st.tuples(
        st.just("put"),
        st.sampled_from(_INDEX_KEYS),
        st.sampled_from(["plain", "general", "ephemeral"]),
        _index_pairs,
    ),
    st.tuples(st.just("delete"), st.sampled_from(_INDEX_KEYS)),
    st.tuples(st.just("delete_range"), st.sampled_from(_INDEX_KEYS)),
    st.tuples(st.just("close")),
)


def _index_entries(kv: MemoryKv) -> set[bytes]:
    return {
        key
        for prefix in (INDEX_PREFIX, RECORD_INDEXES_PREFIX)
        for key, _ in kv.scan(Column.META, prefix, prefix_end(prefix))
    }


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.lists(_index_ops, min_size=1, max_size=6), min_size=1, max_size=8),
    cache_entries=st.sampled_from([None, 1, 2, 16]),
)
def test_index_entries_are_exactly_those_of_the_live_indexed_records(
    groups: list[list[tuple[object, ...]]], cache_entries: int | None
) -> None:
    kv = MemoryKv()
    cache = None if cache_entries is None else HeaderCache(cache_entries)
    opening = PendingChanges(kv, cache)
    session = apply_create_session(opening, internal_pb.CreateSessionEntry(timeout_ms=5000), 0)
    kv.write(opening.changes())
    last_pairs: dict[str, list[tuple[str, str]]] = {}
    offset = 1
    for group in groups:
        state = PendingChanges(kv, cache)
        for op in group:
            if op[0] == "put":
                _, key, kind, pairs = op
                assert isinstance(key, str) and isinstance(pairs, list)
                request = pb.PutRequest(key=key, value=b"v")
                for name, secondary in pairs:
                    request.secondary_indexes.add(index_name=name, secondary_key=secondary)
                if kind == "general":
                    request.partition_key = "p"
                elif kind == "ephemeral":
                    request.session_id = session
                plain = kind == "plain" and not pairs  # what fastpath.has_plain_puts says
                raw = apply_write(
                    state, pb.WriteRequest(puts=[request]), offset, 1000 + offset, ORDER, plain
                )
                if pb.WriteResponse.FromString(raw).puts[0].status == pb.OK:
                    last_pairs[key] = list(pairs)
            elif op[0] == "delete":
                request_delete = pb.WriteRequest(deletes=[pb.DeleteRequest(key=str(op[1]))])
                apply_write(state, request_delete, offset, 1000 + offset, ORDER)
            elif op[0] == "delete_range":
                start = str(op[1])
                span = pb.DeleteRangeRequest(start_inclusive=start, end_exclusive=start + "/")
                apply_write(state, pb.WriteRequest(delete_ranges=[span]), offset, 1000, ORDER)
            else:
                apply_close_session(state, internal_pb.CloseSessionEntry(session_id=session), ORDER)
            offset += 1
        kv.write(state.changes())
        state.written()
        # What the live records' last puts index, written afresh into an empty store.
        expected_kv = MemoryKv()
        expected = PendingChanges(expected_kv)
        for encoded_key, record in kv.scan(Column.RECORDS, b"", None):
            pairs = last_pairs[ORDER.decode(encoded_key)]
            assert bool(record[FLAGS_OFFSET] & HAS_INDEXES) == bool(pairs)
            if pairs:
                wanted = [pb.SecondaryIndex(index_name=n, secondary_key=s) for n, s in pairs]
                add_entries(expected, encoded_key, wanted, ORDER.encoder)
        expected_kv.write(expected.changes())
        assert _index_entries(kv) == _index_entries(expected_kv)
