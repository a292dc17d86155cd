"""Sessions at the core: ownership of ephemeral records, and the expiry tracker."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.apply import (
    MAX_RECORDS_PER_CLOSE_ENTRY,
    CloseOutcome,
    HeaderCache,
    PendingChanges,
    apply_close_session,
    apply_create_session,
    apply_write,
)
from cairn.storage.core.meta import EPHEMERAL_PREFIX, ephemeral_key, prefix_end, session_key
from cairn.storage.core.sessions import SessionTracker, owning_session
from cairn.storage.kv import Column, MemoryKv
from support.memory_shard import ORDER, Shard, put


def ephemeral_index(shard: Shard | MemoryKv) -> list[bytes]:
    kv = shard.kv if isinstance(shard, Shard) else shard
    return [k for k, _ in kv.scan(Column.META, EPHEMERAL_PREFIX, prefix_end(EPHEMERAL_PREFIX))]


def session_id_of_index_key(index_key: bytes) -> int:
    """ephemeral/<id, 8 bytes big endian><encoded key>"""
    session_id: int = struct.unpack_from(">q", index_key, len(EPHEMERAL_PREFIX))[0]
    return session_id


def test_closing_a_session_deletes_exactly_the_records_it_still_owns() -> None:
    shard = Shard()
    first = shard.create_session()
    second = shard.create_session()
    assert first != second
    for key in ("/lock/a", "/lock/b", "/lock/c", "/lock/d"):
        assert shard.write(put(key, session_id=first)).puts[0].status == pb.OK
    shard.write(put("/lock/b"))  # a persistent put detaches the record
    shard.write(put("/lock/c", session_id=second))  # another session takes it over
    shard.write(pb.WriteRequest(deletes=[pb.DeleteRequest(key="/lock/d")]))
    shard.write(put("/persistent"))

    assert shard.close_session(first)
    assert shard.get("/lock/a").status == pb.KEY_NOT_FOUND
    assert shard.get("/lock/b").value == b"v"
    assert not shard.get("/lock/b").version.HasField("session_id")
    assert shard.get("/lock/c").version.session_id == second
    assert shard.get("/persistent").status == pb.OK
    # the index held only what the session owned: only the second session's entry is left
    assert len(ephemeral_index(shard)) == 1

    # puts to the closed session are refused, closing again is a no-op
    assert shard.write(put("/late", session_id=first)).puts[0].status == pb.SESSION_DOES_NOT_EXIST
    assert not shard.close_session(first)
    assert shard.close_session(second)
    assert shard.get("/lock/c").status == pb.KEY_NOT_FOUND
    assert ephemeral_index(shard) == []


def test_delete_range_cleans_the_session_index() -> None:
    shard = Shard()
    session = shard.create_session()
    for i in range(5):
        shard.write(put(f"/e/{i}", session_id=session))
    shard.write(
        pb.WriteRequest(
            delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/e/", end_exclusive="/e//")]
        )
    )
    assert ephemeral_index(shard) == []
    assert shard.close_session(session)


def test_tracker_expires_after_a_full_timeout_without_heartbeat() -> None:
    tracker = SessionTracker()
    tracker.open(1, timeout_ms=2000, now_ms=0)
    tracker.open(2, timeout_ms=5000, now_ms=0)
    assert tracker.expired(1999) == []
    assert tracker.heartbeat(1, now_ms=1500)
    assert tracker.expired(3000) == []
    assert tracker.expired(3500) == [1]
    assert tracker.start_closing(1)
    assert not tracker.start_closing(1)
    assert not tracker.heartbeat(1, now_ms=3600)  # closing sessions take no heartbeats
    assert tracker.expired(5000) == [2]
    tracker.forget(1)
    assert not tracker.is_open(1)
    assert not tracker.heartbeat(99, now_ms=0)


def test_a_large_session_closes_over_several_bounded_entries() -> None:
    shard = Shard()
    session = shard.create_session()
    owned = MAX_RECORDS_PER_CLOSE_ENTRY * 2 + 500
    for start in range(0, owned, 500):
        puts = [
            pb.PutRequest(key=f"/big/{i:06d}", value=b"e", session_id=session)
            for i in range(start, start + 500)
        ]
        shard.write(pb.WriteRequest(puts=puts))
    outcomes = []
    remaining = []
    while True:
        outcomes.append(shard.close_session_step(session))
        remaining.append(len(list(shard.kv.scan(Column.RECORDS, b"", None))))
        # While being closed, the session takes no more puts.
        assert shard.write(put("/late", session_id=session)).puts[0].status == (
            pb.SESSION_DOES_NOT_EXIST
        )
        if outcomes[-1] is not CloseOutcome.MORE:
            break
    assert outcomes == [CloseOutcome.MORE, CloseOutcome.MORE, CloseOutcome.CLOSED]
    assert remaining == [owned - MAX_RECORDS_PER_CLOSE_ENTRY, 500, 0]
    assert ephemeral_index(shard) == []
    assert shard.close_session_step(session) is CloseOutcome.NOT_OPEN


# Ownership under any interleaving, with the write path's header cache or without
# it: a replaced record is detached from its owner by the session id its version
# header carries (records.version_header), and whether a session takes puts is
# remembered within a group until a session's state changes in it.
_SESSION_KEYS = ["/o/a", "/o/b", "/o/c/d", "/p"]
_session_ops = st.one_of(
    st.tuples(
        st.just("put"),
        st.sampled_from(_SESSION_KEYS),
        st.sampled_from([None, 0, 1, 2]),  # a session by its index, or a persistent put
        st.booleans(),  # with a client identity (stored after the session id)
    ),
    st.tuples(st.just("delete"), st.sampled_from(_SESSION_KEYS)),
    st.tuples(st.just("delete_range"), st.sampled_from(["/o/", "/"])),
    st.tuples(st.just("close"), st.sampled_from([0, 1, 2])),
)


def _apply_session_op(
    state: PendingChanges, op: tuple[object, ...], sessions: list[int], offset: int
) -> None:
    kind = op[0]
    if kind == "put":
        _, key, index, with_identity = op
        request = pb.PutRequest(key=str(key), value=b"v")
        if isinstance(index, int):
            request.session_id = sessions[index]
            if with_identity:
                request.client_identity = "client/one"
        apply_write(state, pb.WriteRequest(puts=[request]), offset, 1000 + offset, ORDER)
    elif kind == "delete":
        request = pb.WriteRequest(deletes=[pb.DeleteRequest(key=str(op[1]))])
        apply_write(state, request, offset, 1000 + offset, ORDER)
    elif kind == "delete_range":
        start = str(op[1])
        range_request = pb.DeleteRangeRequest(start_inclusive=start, end_exclusive=start + "/")
        apply_write(state, pb.WriteRequest(delete_ranges=[range_request]), offset, 1000, ORDER)
    else:
        session_id = sessions[int(str(op[1]))]
        apply_close_session(state, internal_pb.CloseSessionEntry(session_id=session_id), ORDER)


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.lists(_session_ops, min_size=1, max_size=6), min_size=1, max_size=8),
    cache_entries=st.sampled_from([None, 1, 2, 16]),
)
def test_the_session_index_holds_exactly_each_ephemeral_record_and_its_owner(
    groups: list[list[tuple[object, ...]]], cache_entries: int | None
) -> None:
    kv = MemoryKv()
    cache = None if cache_entries is None else HeaderCache(cache_entries)
    opening = PendingChanges(kv, cache)
    sessions = [
        apply_create_session(opening, internal_pb.CreateSessionEntry(timeout_ms=5000), offset)
        for offset in range(3)
    ]
    kv.write(opening.changes())
    offset = 3
    for group in groups:
        state = PendingChanges(kv, cache)
        for op in group:
            _apply_session_op(state, op, sessions, offset)
            offset += 1
        kv.write(state.changes())
        state.written()
        owned = {
            ephemeral_key(owner, key)
            for key, record in kv.scan(Column.RECORDS, b"", None)
            if (owner := owning_session(record)) is not None
        }
        assert set(ephemeral_index(kv)) == owned
        # A closed session owns nothing: no put after its close (in the same group
        # or later) was taken.
        for index_key in owned:
            owner = session_id_of_index_key(index_key)
            assert kv.get(Column.META, session_key(owner)) is not None
