"""The values the client hands back: versions, records, notifications."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
        made: Version = _new(cls)
        _set_version_id(made, version.version_id)
        _set_modifications_count(made, version.modifications_count)
        _set_created(made, version.created_timestamp)
        _set_modified(made, version.modified_timestamp)
        _set_session_id(made, version.session_id if version.HasField("session_id") else None)
        _set_client_identity(
            made, version.client_identity if version.HasField("client_identity") else None
        )
        return made


@dataclass(frozen=True, slots=True)
class PutResult:
    """The key written (the generated one, for a sequence put) and its new version."""

    key: str
    version: Version

    @classmethod
    def of(cls, key: str, version: Version) -> PutResult:
        made: PutResult = _new(cls)
        _set_put_key(made, key)
        _set_put_version(made, version)
        return made


# Every put and get makes a Version, and every put a PutResult: built through their
# slots' descriptors, which skips the frozen dataclass __init__ (one
# object.__setattr__ call per field) at about a third of its cost; the values stay
# immutable to callers. The result equals what the constructor makes.
_new = object.__new__


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    setter: Callable[[Any, Any], None] = cls.__dict__[name].__set__
    return setter


_set_version_id = _slot_setter(Version, "version_id")
_set_modifications_count = _slot_setter(Version, "modifications_count")
_set_created = _slot_setter(Version, "created_timestamp_ms")
_set_modified = _slot_setter(Version, "modified_timestamp_ms")
_set_session_id = _slot_setter(Version, "session_id")
_set_client_identity = _slot_setter(Version, "client_identity")
_set_put_key = _slot_setter(PutResult, "key")
_set_put_version = _slot_setter(PutResult, "version")


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
    after (pass `{shard: offset}` as `start_offsets`). A subscription filtered by key
    prefixes also gets empty batches now and then: the offset its shard's stream
    reached past entries with no matching change."""

    shard: int
    offset: int
    timestamp_ms: int
    notifications: tuple[Notification, ...]
