"""Sessions at the core: ownership of ephemeral records, and the expiry tracker."""

from __future__ import annotations

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.apply import MAX_RECORDS_PER_CLOSE_ENTRY, CloseOutcome
from cairn.storage.core.meta import EPHEMERAL_PREFIX, prefix_end
from cairn.storage.core.sessions import SessionTracker
from cairn.storage.kv import Column
from support.memory_shard import Shard, put


def ephemeral_index(shard: Shard) -> list[bytes]:
    return [
        k for k, _ in shard.kv.scan(Column.META, EPHEMERAL_PREFIX, prefix_end(EPHEMERAL_PREFIX))
    ]


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
