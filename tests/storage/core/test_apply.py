"""The write semantics, applied directly to an in-memory KV."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import reads
from cairn.storage.core.apply import HeaderCache, PendingChanges, apply_write
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.notifications import EntryNotifications
from cairn.storage.kv import Column, MemoryKv
from support.memory_shard import Shard, put
from support.write_strategies import plain_puts

ORDER = KeyOrder.HIERARCHICAL


def test_version_id_is_the_entry_offset_and_counts_modifications() -> None:
    shard = Shard()
    first = shard.write(put("/a"), timestamp_ms=100).puts[0]
    second = shard.write(put("/a"), timestamp_ms=200).puts[0]
    assert (first.version.version_id, second.version.version_id) == (0, 1)
    assert (first.version.modifications_count, second.version.modifications_count) == (0, 1)
    assert second.version.created_timestamp == 100
    assert second.version.modified_timestamp == 200
    assert not second.version.HasField("session_id")
    assert not second.version.HasField("client_identity")


def test_operations_of_one_entry_apply_in_order_puts_deletes_ranges() -> None:
    shard = Shard()
    request = pb.WriteRequest(
        puts=[
            pb.PutRequest(key="/x", value=b"1"),
            pb.PutRequest(key="/x", value=b"2"),
            pb.PutRequest(key="/r/1", value=b"r"),
        ],
        deletes=[pb.DeleteRequest(key="/x"), pb.DeleteRequest(key="/x")],
        delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/r/", end_exclusive="/r//")],
    )
    response = shard.write(request)
    assert [p.version.modifications_count for p in response.puts] == [0, 1, 0]
    assert [d.status for d in response.deletes] == [pb.OK, pb.KEY_NOT_FOUND]
    assert [r.status for r in response.delete_ranges] == [pb.OK]
    assert shard.get("/x").status == pb.KEY_NOT_FOUND
    assert shard.get("/r/1").status == pb.KEY_NOT_FOUND


def test_expected_version_rules() -> None:
    shard = Shard()
    assert shard.write(put("/k", expected_version_id=-1)).puts[0].status == pb.OK
    assert shard.write(put("/k", expected_version_id=-1)).puts[0].status == pb.UNEXPECTED_VERSION_ID
    assert shard.write(put("/k", expected_version_id=5)).puts[0].status == pb.UNEXPECTED_VERSION_ID
    assert (
        shard.write(put("/new", expected_version_id=0)).puts[0].status == pb.UNEXPECTED_VERSION_ID
    )
    ok = shard.write(put("/k", b"2", expected_version_id=0)).puts[0]
    assert ok.status == pb.OK and ok.version.modifications_count == 1
    # failed operations change nothing
    assert shard.get("/k").value == b"2"
    assert shard.get("/new").status == pb.KEY_NOT_FOUND
    delete = pb.WriteRequest(deletes=[pb.DeleteRequest(key="/k", expected_version_id=0)])
    assert shard.write(delete).deletes[0].status == pb.UNEXPECTED_VERSION_ID
    delete = pb.WriteRequest(
        deletes=[pb.DeleteRequest(key="/k", expected_version_id=ok.version.version_id)]
    )
    assert shard.write(delete).deletes[0].status == pb.OK


def test_put_with_unknown_session_is_refused_per_operation() -> None:
    shard = Shard()
    response = shard.write(
        pb.WriteRequest(
            puts=[
                pb.PutRequest(key="/e", value=b"x", session_id=7),
                pb.PutRequest(key="/p", value=b"y"),
            ]
        )
    )
    assert [p.status for p in response.puts] == [pb.SESSION_DOES_NOT_EXIST, pb.OK]
    assert shard.get("/e").status == pb.KEY_NOT_FOUND
    session = shard.create_session()
    ok = shard.write(put("/e", session_id=session, client_identity="me")).puts[0]
    assert ok.version.session_id == session
    assert ok.version.client_identity == "me"


def test_commit_offset_is_written_with_the_data() -> None:
    shard = Shard()
    shard.write(put("/a"))
    shard.write(put("/b"))
    assert shard.kv.get(Column.META, b"commit_offset") is not None
    assert [k for k, _ in shard.kv.scan(Column.RECORDS, b"", None)] == [
        ORDER.encode("/a"),
        ORDER.encode("/b"),
    ]


def test_get_answers_found_key_and_omits_value_when_not_asked() -> None:
    shard = Shard()
    shard.write(put("/a/1", b"one"))
    shard.write(put("/a/3", b"three"))
    floor = shard.get("/a/2", pb.FLOOR)
    assert (floor.key, floor.value) == ("/a/1", b"one")
    bare = reads.get(shard.kv, pb.GetRequest(key="/a/3", include_value=False), ORDER)
    assert bare.status == pb.OK and not bare.HasField("value") and bare.key == "/a/3"


def test_plain_put_detection() -> None:
    plain = pb.WriteRequest(
        shard=3, puts=[pb.PutRequest(key="/a", value=b"v", expected_version_id=4)]
    )
    assert has_plain_puts(plain.SerializeToString())
    for extra in (
        {"session_id": 1},
        {"partition_key": "p"},
        {"client_identity": "c"},
        {"sequence_key_delta": [1]},
        {"override_version_id": 9},
    ):
        request = pb.WriteRequest(puts=[pb.PutRequest(key="/a", value=b"v", **extra)])  # type: ignore[arg-type]
        assert not has_plain_puts(request.SerializeToString()), extra
    assert not has_plain_puts(b"\x12\xff\xff")


def test_plain_and_general_paths_agree() -> None:
    requests = [
        pb.WriteRequest(
            puts=[pb.PutRequest(key=f"/k/{i % 3}", value=bytes([i])) for i in range(6)]
        ),
        pb.WriteRequest(puts=[pb.PutRequest(key="/k/0", value=b"c", expected_version_id=0)]),
        pb.WriteRequest(puts=[pb.PutRequest(key="/k/1", value=b"c", expected_version_id=1)]),
        pb.WriteRequest(puts=[pb.PutRequest(key="/k/9", value=b"c", expected_version_id=-1)]),
        pb.WriteRequest(
            deletes=[pb.DeleteRequest(key="/k/2")], puts=[pb.PutRequest(key="/k/2", value=b"z")]
        ),
    ]
    outcomes = []
    for plain in (True, False):
        kv = MemoryKv()
        responses = []
        for offset, request in enumerate(requests):
            state = PendingChanges(kv)
            responses.append(apply_write(state, request, offset, 100 + offset, ORDER, plain))
            kv.write(state.changes())
        outcomes.append((responses, list(kv.scan(Column.RECORDS, b"", None))))
    assert outcomes[0] == outcomes[1]


# The plain-put loop is written out for speed (apply._apply_plain_puts): it must
# decide, store, answer and notify exactly as the general put path does, whatever
# the overlay, the header cache (small here, so it evicts) and the KV hold.
_plain_keys = st.sampled_from(["/k/a", "/k/b", "/k/c", "/k/d/e", "/l", "x"])
_plain_puts = plain_puts(_plain_keys, max_expected=12)
_plain_requests = st.builds(
    lambda puts, deletes: pb.WriteRequest(
        puts=puts, deletes=[pb.DeleteRequest(key=key) for key in deletes]
    ),
    st.lists(_plain_puts, max_size=6),
    st.lists(_plain_keys, max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.lists(_plain_requests, min_size=1, max_size=4), min_size=1, max_size=6),
    cache_entries=st.integers(1, 8),
)
def test_plain_put_loop_matches_the_general_path(
    groups: list[list[pb.WriteRequest]], cache_entries: int
) -> None:
    outcomes = []
    for plain in (True, False):
        kv = MemoryKv()
        cache = HeaderCache(cache_entries)
        responses = []
        offset = 0
        for group in groups:
            state = PendingChanges(kv, cache)
            for request in group:
                notes = EntryNotifications()
                response = apply_write(
                    state, request, offset, 1000 + offset, ORDER, plain, notes, answer=True
                )
                responses.append((response, notes.encode(0, offset, 1000 + offset)))
                offset += 1
            kv.write(state.changes())
            state.written()
        outcomes.append((responses, list(kv.scan(Column.RECORDS, b"", None))))
    assert outcomes[0] == outcomes[1]
