"""Sequence keys at the core: numbering, where the counter comes from, and refusals."""

from __future__ import annotations

import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.errors import InvalidRequest, RequestTooLarge
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits
from cairn.storage.core import apply, sequences
from cairn.storage.core.apply import PendingChanges, apply_write
from cairn.storage.core.notifications import EntryNotifications
from cairn.storage.core.sequences import highest_sequence_key
from cairn.storage.core.validation import validate_write
from cairn.storage.kv import Column, MemoryKv
from support.memory_shard import Shard, put


def seq(i: int, *more: int) -> str:
    return "".join(f"-{n:020d}" for n in (i, *more))


def sequence_put(key: str, *deltas: int, **kwargs: object) -> pb.WriteRequest:
    return put(key, partition_key="p", sequence_key_delta=list(deltas), **kwargs)


def generated(shard: Shard, key: str, *deltas: int) -> str:
    response = shard.write(sequence_put(key, *deltas)).puts[0]
    assert response.status == pb.OK
    assert response.HasField("key")
    return response.key


def test_one_delta_counts_up_from_the_highest_existing_key() -> None:
    shard = Shard()
    assert generated(shard, "/seq", 1) == "/seq" + seq(1)
    assert generated(shard, "/seq", 1) == "/seq" + seq(2)
    assert generated(shard, "/seq", 5) == "/seq" + seq(7)
    got = shard.get("/seq" + seq(7))
    assert got.status == pb.OK and got.value == b"v"
    # an ordinary put answers no key
    assert not shard.write(put("/plain")).puts[0].HasField("key")


def test_several_deltas_build_one_component_each() -> None:
    shard = Shard()
    assert generated(shard, "/seq", 1, 5) == "/seq" + seq(1, 5)
    assert generated(shard, "/seq", 1, 5) == "/seq" + seq(2, 10)
    # later deltas may be 0; components the highest key lacks start from 0
    assert generated(shard, "/seq", 3, 0, 4) == "/seq" + seq(5, 10, 4)
    # fewer deltas than the highest key has components: refused, nothing stored (Oxia too)
    refused = shard.write(sequence_put("/seq", 1)).puts[0]
    assert refused.status == pb.INVALID_ARGUMENT and not refused.HasField("key")
    assert shard.get("/seq" + seq(6)).status == pb.KEY_NOT_FOUND


def test_prefixes_with_slashes_count_only_their_own_keys() -> None:
    shard = Shard()
    shard.write(put("/a/b/seq" + seq(40) + "/child"))  # one segment more: not in the sequence
    shard.write(put("/a/b/seqq" + seq(50)))  # another prefix
    shard.write(put("/a/seq" + seq(60)))  # fewer segments
    shard.write(put("/a/b/c/seq" + seq(70)))
    assert generated(shard, "/a/b/seq", 1) == "/a/b/seq" + seq(1)
    assert generated(shard, "/a/b/seq", 1) == "/a/b/seq" + seq(2)
    assert generated(shard, "/a/b/", 1) == "/a/b/" + seq(1)  # a prefix ending in '/'
    assert generated(shard, "/a/b/", 1) == "/a/b/" + seq(2)
    assert generated(shard, "/a/b/seqq", 1) == "/a/b/seqq" + seq(51)


@pytest.mark.parametrize("order", list(KeyOrder))
def test_both_key_orders_place_the_suffix_after_the_prefix(order: KeyOrder) -> None:
    kv = MemoryKv()
    keys = []
    for offset, deltas in enumerate(([1], [1], [2, 3], [1, 1])):
        state = PendingChanges(kv)
        request = sequence_put("/x/y", *deltas)
        response = pb.WriteResponse.FromString(apply_write(state, request, offset, 1, order))
        kv.write(state.changes())
        keys.append(response.puts[0].key)
    assert keys == ["/x/y" + s for s in (seq(1), seq(2), seq(4, 3), seq(5, 4))]


def test_the_counter_is_derived_from_what_exists() -> None:
    shard = Shard()
    for _ in range(3):
        generated(shard, "/q", 1)
    # deleting the highest key lowers the counter, deleting all resets it
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/q" + seq(3))]))
    assert generated(shard, "/q", 1) == "/q" + seq(3)
    shard.write(
        pb.WriteRequest(
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/q", end_exclusive="/r")]
        )
    )
    assert generated(shard, "/q", 1) == "/q" + seq(1)


def test_keys_that_are_not_sequence_keys_are_stepped_over() -> None:
    shard = Shard()
    generated(shard, "/s", 3)
    for junk in (
        "/s-5",
        "/s-x",
        "/s-" + "9" * 21,
        "/s" + seq(8) + "x",
        "/s" + seq(9) + "-",
        "/s" + seq(9) + "-junk",
        "/s" + seq(9) + "!",
        "/s-",
        "/s",
        "/s-0000000000000000001",
    ):
        shard.write(put(junk))
    assert generated(shard, "/s", 1) == "/s" + seq(4)


def test_a_search_through_too_many_malformed_keys_refuses_the_put(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sequences, "MAX_SEQUENCE_PROBES", 5)
    shard = Shard()
    generated(shard, "/m", 1)
    for i in range(9, 2, -1):
        shard.write(put(f"/m-{i}"))  # each costs the search one step
    refused = shard.write(sequence_put("/m", 1)).puts[0]
    assert refused.status == pb.INVALID_ARGUMENT
    assert shard.get("/m" + seq(2)).status == pb.KEY_NOT_FOUND


def test_a_component_past_uint64_is_refused() -> None:
    shard = Shard()
    shard.write(put("/big" + f"-{2**64 - 2:020d}"))
    assert generated(shard, "/big", 1) == "/big" + f"-{2**64 - 1:020d}"
    assert shard.write(sequence_put("/big", 1)).puts[0].status == pb.INVALID_ARGUMENT


def test_puts_in_one_group_see_each_other() -> None:
    """Sequence puts applied into one overlay, with deletes of earlier sequence keys in
    between, generate what applying them one by one generates."""
    requests = [
        sequence_put("/g", 1),
        pb.WriteRequest(puts=[sequence_put("/g", 1).puts[0]] * 3),
        pb.WriteRequest(deletes=[pb.DeleteRequest(key="/g" + seq(4))]),
        sequence_put("/g", 2),
        pb.WriteRequest(
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/g", end_exclusive="/h")]
        ),
        sequence_put("/g", 1),
        sequence_put("/g", 1),
    ]
    one_by_one, grouped_kv = MemoryKv(), MemoryKv()
    grouped_kv.write([(Column.RECORDS, KeyOrder.HIERARCHICAL.encode("/g" + seq(1)), b"x" * 40)])
    one_by_one.write([(Column.RECORDS, KeyOrder.HIERARCHICAL.encode("/g" + seq(1)), b"x" * 40)])
    expected = []
    for offset, request in enumerate(requests):
        state = PendingChanges(one_by_one)
        expected.append(apply_write(state, request, offset, 1, KeyOrder.HIERARCHICAL))
        one_by_one.write(state.changes())
    group = PendingChanges(grouped_kv)
    got = [
        apply_write(group, request, offset, 1, KeyOrder.HIERARCHICAL)
        for offset, request in enumerate(requests)
    ]
    grouped_kv.write(group.changes())
    assert got == expected
    assert [k for k, _ in grouped_kv.scan(Column.RECORDS, b"", None)] == [
        k for k, _ in one_by_one.scan(Column.RECORDS, b"", None)
    ]
    last = pb.WriteResponse.FromString(got[-1]).puts[0].key
    assert last == "/g" + seq(2)


def test_a_sequence_put_notifies_the_generated_key_and_may_be_ephemeral() -> None:
    shard = Shard()
    session = shard.create_session()
    notes = EntryNotifications()
    state = PendingChanges(shard.kv)
    response = pb.WriteResponse.FromString(
        apply_write(
            state,
            sequence_put("/e", 1, session_id=session),
            100,
            1,
            KeyOrder.HIERARCHICAL,
            notes=notes,
        )
    )
    shard.kv.write(state.changes())
    key = response.puts[0].key
    assert key == "/e" + seq(1)
    batch = pb.NotificationBatch.FromString(notes.encode(0, 100, 1))
    assert dict(batch.notifications) == {key: pb.Notification(type=pb.KEY_CREATED, version_id=100)}
    assert shard.close_session(session)
    assert shard.get(key).status == pb.KEY_NOT_FOUND


def test_validation_rules() -> None:
    limits = Limits()

    def check(**fields: object) -> None:
        request = pb.WriteRequest(puts=[pb.PutRequest(key="/k", value=b"v", **fields)])  # type: ignore[arg-type]
        validate_write(request, limits, request.ByteSize())

    check(partition_key="p", sequence_key_delta=[1, 0, 7])
    check(partition_key="", sequence_key_delta=[1])  # present though empty, as in Oxia
    for fields, message in (
        ({"sequence_key_delta": [1]}, "partition key"),
        ({"partition_key": "p", "sequence_key_delta": [1], "expected_version_id": -1}, "version"),
        ({"partition_key": "p", "sequence_key_delta": [0, 1]}, "greater than 0"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            check(**fields)
    # the generated key must fit the key limit
    deltas = [1] * (limits.max_key_bytes // sequences.COMPONENT_BYTES + 1)
    with pytest.raises(RequestTooLarge, match="generated sequence key"):
        check(partition_key="p", sequence_key_delta=deltas)


# ---- the search for the highest key, against a brute-force reference ------------------

_WELL_FORMED = re.compile(rb"(-[0-9]{20})+")
_SUFFIX_PIECES = st.sampled_from(
    ["-", "0", "1", "9", "x", ".", ",", ":", "/", "\x00", "00000000000000000001", seq(2), seq(9)]
)


@settings(max_examples=300, deadline=None)
@given(
    order=st.sampled_from(list(KeyOrder)),
    prefix=st.sampled_from(["/s", "s", "/a/s", "/a/", "-"]),
    junk=st.lists(st.lists(_SUFFIX_PIECES, max_size=5).map("".join), max_size=25),
    valid=st.lists(
        st.lists(st.integers(0, 12), min_size=1, max_size=3).map(lambda c: seq(*c)), max_size=5
    ),
    others=st.lists(st.sampled_from(["/s", "/t-1", "/a/s-1/b", "r", "/a/t"]), max_size=3),
)
def test_highest_sequence_key_matches_a_brute_force_search(
    order: KeyOrder, prefix: str, junk: list[str], valid: list[str], others: list[str]
) -> None:
    suffixes = junk + valid
    kv = MemoryKv()
    stored = {order.encode(prefix + suffix) for suffix in suffixes} | {
        order.encode(other) for other in others
    }
    kv.write([(Column.RECORDS, key, b"") for key in stored])
    encoded_prefix = order.encode(prefix)
    candidates = [
        key
        for key in stored
        if key.startswith(encoded_prefix)
        and _WELL_FORMED.fullmatch(key[len(encoded_prefix) :])
        and order.decode(key).startswith(prefix)
    ]

    def floor(key: bytes, inclusive: bool) -> bytes | None:
        found = kv.floor(Column.RECORDS, key, inclusive)
        return None if found is None else found[0]

    assert highest_sequence_key(floor, encoded_prefix) == max(candidates, default=None)


@settings(max_examples=200, deadline=None)
@given(
    stored=st.sets(st.binary(min_size=1, max_size=3), max_size=12),
    changes=st.lists(st.tuples(st.binary(min_size=1, max_size=3), st.booleans()), max_size=12),
    probes=st.lists(st.tuples(st.binary(max_size=4), st.booleans()), min_size=1, max_size=8),
)
def test_overlay_floor_matches_the_new_state(
    stored: set[bytes], changes: list[tuple[bytes, bool]], probes: list[tuple[bytes, bool]]
) -> None:
    kv = MemoryKv()
    kv.write([(Column.RECORDS, key, b"") for key in stored])
    # both ways of keeping the overlay's keys sorted: one by one, and all at once
    for inserts_before_resort in (64, 0):
        with mock.patch.object(apply, "_MAX_INSERTS_BEFORE_RESORT", inserts_before_resort):
            state = PendingChanges(kv)
            present = set(stored)
            for index, (key, keep) in enumerate(changes):
                if keep:
                    state.put_record(key, b"")
                    present.add(key)
                else:
                    state.delete_record(key)
                    present.discard(key)
                probe, inclusive = probes[index % len(probes)]
                below = [k for k in present if k < probe or (inclusive and k == probe)]
                assert state.floor_record_key(probe, inclusive) == max(below, default=None)


def test_a_large_delete_range_and_sequence_puts_in_one_group() -> None:
    kv = MemoryKv()
    order = KeyOrder.HIERARCHICAL
    kv.write([(Column.RECORDS, order.encode(f"/big{seq(i)}"), b"x" * 40) for i in range(1, 301)])
    state = PendingChanges(kv)
    requests = [
        sequence_put("/big", 1),
        pb.WriteRequest(
            delete_ranges=[
                pb.DeleteRangeRequest(start_inclusive="/big" + seq(100), end_exclusive="/bih")
            ]
        ),
        sequence_put("/big", 1),
        sequence_put("/big", 1),
    ]
    keys = [
        pb.WriteResponse.FromString(apply_write(state, request, offset, 1, order)).puts
        for offset, request in enumerate(requests)
    ]
    assert [p[0].key for p in keys if p] == [f"/big{seq(i)}" for i in (301, 100, 101)]
