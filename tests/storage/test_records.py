"""The stored record format: whatever a write encodes, reads decode unchanged, and the
version header a later write reads names the same version and owner."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.storage.records import (
    HEADER,
    RecordMeta,
    decode_record,
    encode_record,
    header_session,
    version_header,
    version_header_size,
)

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
uint64s = st.integers(min_value=0, max_value=2**64 - 1)
texts = st.one_of(st.none(), st.text(max_size=40))


@given(
    version_id=int64s,
    modifications=int64s,
    created=uint64s,
    modified=uint64s,
    session_id=st.one_of(st.none(), int64s),
    client_identity=texts,
    partition_key=texts,
    value=st.binary(max_size=64),
)
def test_a_record_decodes_to_what_was_encoded(
    version_id: int,
    modifications: int,
    created: int,
    modified: int,
    session_id: int | None,
    client_identity: str | None,
    partition_key: str | None,
    value: bytes,
) -> None:
    meta = RecordMeta(
        version_id, modifications, created, modified, session_id, client_identity, partition_key
    )
    record = encode_record(
        version_id,
        modifications,
        created,
        modified,
        session_id,
        client_identity,
        partition_key,
        value,
    )
    assert decode_record(record) == (meta, value)
    header = version_header(record)
    assert len(header) == version_header_size(header)
    assert HEADER.unpack_from(header)[:4] == (version_id, modifications, created, modified)
    assert header_session(header) == session_id
