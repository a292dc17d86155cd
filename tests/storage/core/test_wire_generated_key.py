"""PutResponse.key (sequence puts) in the hand-encoded responses is exactly what the
protobuf library would produce, and absent unless the server generated the key; also
as an entry's PutResponses builds it."""

from __future__ import annotations

from hypothesis import given
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
    client_identity=st.one_of(st.none(), st.text(max_size=10)),
    generated_key=st.one_of(st.none(), st.text(max_size=300)),
)
def test_put_ok_with_a_generated_key_matches_protobuf(
    version_id: int,
    modifications: int,
    created: int,
    modified: int,
    session_id: int | None,
    client_identity: str | None,
    generated_key: str | None,
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
    if generated_key is not None:
        put.key = generated_key  # even "": present, as proto3 optional
    encoded = wire.field(
        wire.PUTS,
        wire.put_ok(
            version_id, modifications, created, modified, session_id, client_identity, generated_key
        ),
    )
    assert encoded == expected.SerializeToString()
    decoded = pb.WriteResponse.FromString(encoded)
    assert decoded == expected
    assert decoded.puts[0].HasField("key") == (generated_key is not None)
    # The same from an entry's responses, as puts beyond the fast path answer; a
    # replica nobody waits on builds none of it.
    named = (modifications, created, session_id, client_identity, generated_key)
    assert wire.PutResponses(version_id, modified).owned_or_named(*named) == encoded
    assert wire.NoPutResponses().owned_or_named(*named) == b""
