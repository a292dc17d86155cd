"""The JSON shapes of keys, scans and sessions (the OpenAPI document's schemas).

Values travel as base64 (standard alphabet, padded) in JSON; the raw value
endpoints carry them as application/octet-stream instead.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, Field

from cairn.client.records import Record, Version
from cairn.gateway.settings import (
    MAX_CLIENT_IDENTITY_CHARS,
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
)


class VersionModel(BaseModel):
    versionId: int = Field(description="Increases with every change of the shard; the ETag")
    modificationsCount: int = Field(description="0 when created, +1 per update")
    createdTimestampMs: int = Field(description="Creation time, ms since the Unix epoch")
    modifiedTimestampMs: int = Field(description="Last update time, ms since the Unix epoch")
    ephemeral: bool = Field(description="Whether a session owns the record")
    sessionId: int | None = Field(description="The owning storage session (ephemeral only)")
    clientIdentity: str | None = Field(description="The owning session's client identity")

    @classmethod
    def of(cls, version: Version) -> VersionModel:
        return cls(
            versionId=version.version_id,
            modificationsCount=version.modifications_count,
            createdTimestampMs=version.created_timestamp_ms,
            modifiedTimestampMs=version.modified_timestamp_ms,
            ephemeral=version.ephemeral,
            sessionId=version.session_id,
            clientIdentity=version.client_identity,
        )


class RecordModel(BaseModel):
    key: str = Field(description="The record's key (the one found, for comparisons)")
    value: str | None = Field(description="The value, base64; null when read without it")
    version: VersionModel
    secondaryIndexKey: str | None = Field(
        default=None, description="The secondary key matched (reads through an index)"
    )

    @classmethod
    def of(cls, record: Record) -> RecordModel:
        return cls(
            key=record.key,
            value=None if record.value is None else base64.b64encode(record.value).decode("ascii"),
            version=VersionModel.of(record.version),
            secondaryIndexKey=record.secondary_index_key,
        )


class WriteAnswer(BaseModel):
    """A put's outcome: the key written (the generated one, for a sequence put)."""

    key: str
    version: VersionModel


class KeysPage(BaseModel):
    keys: list[str] = Field(description="Keys in the namespace's key order")
    nextCursor: str | None = Field(description="Pass as `cursor` for the next page; null: done")


class RecordsPage(BaseModel):
    records: list[RecordModel] = Field(description="Records in the namespace's key order")
    nextCursor: str | None = Field(description="Pass as `cursor` for the next page; null: done")


class SessionRequest(BaseModel):
    timeoutMs: int | None = Field(
        default=None,
        ge=MIN_SESSION_TIMEOUT_MS,
        le=MAX_SESSION_TIMEOUT_MS,
        description="Expires after this long without a keepalive (default: the gateway's, 30 s)",
    )
    clientIdentity: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLIENT_IDENTITY_CHARS,
        description="Recorded with the storage sessions and on the ephemeral records "
        "written under the session (default: the gateway's identity, `cairn-gateway`)",
    )


class SessionAnswer(BaseModel):
    session: str = Field(description="The opaque session token (`?session=` on writes)")
    timeoutMs: int
    clientIdentity: str | None
    shards: int = Field(description="Shards the session spans (one storage session each)")


class Change(BaseModel):
    """One key's change in a change feed event."""

    key: str = Field(description="The key (a range deletion: the range's first key)")
    type: Literal["created", "modified", "deleted", "rangeDeleted"]
    versionId: int | None = Field(default=None, description="created and modified only")
    keyRangeEnd: str | None = Field(
        default=None, description="rangeDeleted only: the range's end (exclusive)"
    )


class ChangeBatch(BaseModel):
    """A change feed event's data: the changes one committed log entry of one
    shard made (none in a shard's first event, which says where it starts)."""

    shard: int
    offset: int = Field(description="The entry's offset in the shard's log")
    timestampMs: int = Field(description="When it was committed, ms since the Unix epoch")
    changes: list[Change]


# The same documents as plain dicts, for the hot routes (fastpath.py), which
# serialize them without building models; the tests hold them equal to the
# models' dumps.


def version_document(version: Version) -> dict[str, Any]:
    return {
        "versionId": version.version_id,
        "modificationsCount": version.modifications_count,
        "createdTimestampMs": version.created_timestamp_ms,
        "modifiedTimestampMs": version.modified_timestamp_ms,
        "ephemeral": version.ephemeral,
        "sessionId": version.session_id,
        "clientIdentity": version.client_identity,
    }


def record_document(record: Record) -> dict[str, Any]:
    return {
        "key": record.key,
        "value": None if record.value is None else base64.b64encode(record.value).decode("ascii"),
        "version": version_document(record.version),
        "secondaryIndexKey": record.secondary_index_key,
    }
