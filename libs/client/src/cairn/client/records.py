"""The values the client hands back: versions, records, notifications."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cairn.proto import oxia_client_pb2 as pb

# `expected_version` meaning "the record must not exist yet" (create only).
EXPECTED_RECORD_DOES_NOT_EXIST = -1


class Comparison(enum.IntEnum):
    """Which record a `get` returns, relative to the key asked for."""

    EQUAL = pb.EQUAL  # the key itself
    FLOOR = pb.FLOOR  # the highest key <= it
    CEILING = pb.CEILING  # the lowest key >= it
    LOWER = pb.LOWER  # the highest key < it
    HIGHER = pb.HIGHER  # the lowest key > it


@dataclass(frozen=True, slots=True)
class Version:
    """A record's version. `version_id` increases with every change of the shard;
    `modifications_count` is 0 when created and grows by one per update."""

    version_id: int
    modifications_count: int
    created_timestamp_ms: int
    modified_timestamp_ms: int
    session_id: int | None = None  # set on ephemeral records only
    client_identity: str | None = None

    @property
    def ephemeral(self) -> bool:
        return self.session_id is not None

    @classmethod
    def from_proto(cls, version: pb.Version) -> Version:
        return cls(
            version_id=version.version_id,
            modifications_count=version.modifications_count,
            created_timestamp_ms=version.created_timestamp,
            modified_timestamp_ms=version.modified_timestamp,
            session_id=version.session_id if version.HasField("session_id") else None,
            client_identity=(
                version.client_identity if version.HasField("client_identity") else None
            ),
        )


@dataclass(frozen=True, slots=True)
class PutResult:
    """The key written (the generated one, for a sequence put) and its new version."""

    key: str
    version: Version


@dataclass(frozen=True, slots=True)
class Record:
    """A stored record. `value` is None when it was read without its value.
    `secondary_index_key` is set on reads through a secondary index."""

    key: str
    value: bytes | None
    version: Version
    secondary_index_key: str | None = None

    @classmethod
    def from_proto(cls, response: pb.GetResponse, asked_key: str = "") -> Record:
        """`asked_key` stands in for a response without a key (an EQUAL get's)."""
        return cls(
            key=response.key if response.HasField("key") else asked_key,
            value=response.value if response.HasField("value") else None,
            version=Version.from_proto(response.version),
            secondary_index_key=(
                response.secondary_index_key if response.HasField("secondary_index_key") else None
            ),
        )


class NotificationType(enum.IntEnum):
    CREATED = pb.KEY_CREATED
    MODIFIED = pb.KEY_MODIFIED
    DELETED = pb.KEY_DELETED
    RANGE_DELETED = pb.KEY_RANGE_DELETED


@dataclass(frozen=True, slots=True)
class Notification:
    """One key's change. `version_id` is set for CREATED and MODIFIED; a
    RANGE_DELETED notification is keyed by the range's first key and
    `key_range_last` is its end (exclusive)."""

    key: str
    type: NotificationType
    version_id: int | None = None
    key_range_last: str | None = None


@dataclass(frozen=True, slots=True)
class NotificationBatch:
    """The changes one committed log entry of a shard made, one per key.

    The first batch of each shard's subscription (without a start offset) is empty
    and says where that shard's feed starts; `offset` is the position to resume
    after (pass `{shard: offset}` as `start_offsets`)."""

    shard: int
    offset: int
    timestamp_ms: int
    notifications: tuple[Notification, ...]
