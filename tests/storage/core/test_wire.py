"""The hand-encoded responses are exactly what the protobuf library would produce."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import wire

int64s = st.integers(min_value=0, max_value=2**63 - 1)
uint64s = st.integers(min_value=0, max_value=2**64 - 1)


@given(
    version_id=int64s,
    modifications=int64s,
    created=uint64s,
    modified=uint64s,
    session_id=st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    client_identity=st.one_of(st.none(), st.text(max_size=40)),
)
def test_put_ok_matches_protobuf(
    version_id: int,
    modifications: int,
    created: int,
    modified: int,
    session_id: int | None,
    client_identity: str | None,
) -> None:
    expected = pb.WriteResponse()
    put = expected.puts.add()
    version = put.version
    version.version_id = version_id
    version.modifications_count = modifications
    version.created_timestamp = created
    version.modified_timestamp = modified
    if session_id is not None:
        version.session_id = session_id
    if client_identity is not None:
        version.client_identity = client_identity
    encoded = wire.field(
        wire.PUTS,
        wire.put_ok(version_id, modifications, created, modified, session_id, client_identity),
    )
    assert encoded == expected.SerializeToString()
    assert pb.WriteResponse.FromString(encoded) == expected


@given(
    st.lists(
        st.sampled_from(
            [pb.OK, pb.KEY_NOT_FOUND, pb.UNEXPECTED_VERSION_ID, pb.SESSION_DOES_NOT_EXIST]
        ),
        max_size=5,
    )
)
def test_status_only_responses_match_protobuf(statuses: list[int]) -> None:
    expected = pb.WriteResponse()
    encoded = b""
    for status in statuses:
        expected.puts.add(status=status)  # type: ignore[arg-type]
        encoded += wire.field(wire.PUTS, wire.status_only(status))
    for status in statuses:
        expected.deletes.add(status=status)  # type: ignore[arg-type]
        encoded += wire.field(wire.DELETES, wire.status_only(status))
    expected.delete_ranges.add()
    encoded += wire.field(wire.DELETE_RANGES, wire.status_only(pb.OK))
    assert encoded == expected.SerializeToString()


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_varint_round_trips_through_protobuf(value: int) -> None:
    message = pb.Version()
    if value < 0 or value >= 2**63:
        return
    message.version_id = value
    assert (b"\x08" + wire.varint(value) if value else b"") == message.SerializeToString()


@given(version_id=int64s, modifications=int64s, created=uint64s, modified=uint64s)
# Each width of the modification count's varint that has its own packed form, at
# both ends, and the first count past them.
@example(version_id=7, modifications=127, created=1, modified=2)
@example(version_id=7, modifications=128, created=1, modified=2)
@example(version_id=7, modifications=2**14 - 1, created=1, modified=2)
@example(version_id=7, modifications=2**14, created=1, modified=2)
@example(version_id=7, modifications=2**21 - 1, created=1, modified=2)
@example(version_id=7, modifications=2**21, created=1, modified=2)
@example(version_id=7, modifications=300, created=0, modified=2)
def test_entry_put_responses_match_general_encoding(
    version_id: int, modifications: int, created: int, modified: int
) -> None:
    responses = wire.PutResponses(version_id, modified)
    assert responses.created == wire.field(
        wire.PUTS, wire.put_ok(version_id, 0, modified, modified)
    )
    assert responses.updated(modifications, created) == wire.field(
        wire.PUTS, wire.put_ok(version_id, modifications, created, modified)
    )
