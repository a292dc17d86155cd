"""The fast constructors of the client's values make exactly what their
dataclass constructors make, and the values stay immutable."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.client.records import PutResult, Version
from cairn.proto import oxia_client_pb2 as pb

int64 = st.integers(min_value=0, max_value=2**63 - 1)


@given(
    version_id=int64,
    modifications=int64,
    created=st.integers(min_value=0, max_value=2**64 - 1),
    modified=st.integers(min_value=0, max_value=2**64 - 1),
    session_id=st.none() | int64,
    identity=st.none() | st.text(max_size=8),
    key=st.text(max_size=8),
)
def test_from_proto_equals_the_constructor(
    version_id: int,
    modifications: int,
    created: int,
    modified: int,
    session_id: int | None,
    identity: str | None,
    key: str,
) -> None:
    message = pb.Version(
        version_id=version_id,
        modifications_count=modifications,
        created_timestamp=created,
        modified_timestamp=modified,
    )
    if session_id is not None:
        message.session_id = session_id
    if identity is not None:
        message.client_identity = identity
    made = Version.from_proto(message)
    expected = Version(version_id, modifications, created, modified, session_id, identity)
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert PutResult.of(key, made) == PutResult(key, expected)


def test_fast_made_values_are_immutable() -> None:
    version = Version.from_proto(pb.Version(version_id=3))
    result = PutResult.of("/a", version)
    with pytest.raises(dataclasses.FrozenInstanceError):
        version.version_id = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.key = "/b"  # type: ignore[misc]
