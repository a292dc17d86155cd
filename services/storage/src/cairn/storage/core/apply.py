"""Applying committed log entries to the shard's state.

`apply_write` is a deterministic function of (state, entry): the same entry
applied to the same state yields the same changes and the same response on
every replica, because everything it uses (offset, timestamp) comes from the
entry, never from a clock. Several entries are applied into one
`PendingChanges` overlay and written to the KV as one atomic batch together
with the new commit offset.
"""

from __future__ import annotations

from collections.abc import Callable

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.meta import COMMIT_OFFSET_KEY, encode_i64
from cairn.storage.kv.store import Change, Column, KvReader
from cairn.storage.records import RecordMeta, decode_meta, encode_record

OK = pb.OK
KEY_NOT_FOUND = pb.KEY_NOT_FOUND
UNEXPECTED_VERSION_ID = pb.UNEXPECTED_VERSION_ID
SESSION_DOES_NOT_EXIST = pb.SESSION_DOES_NOT_EXIST
EXPECTED_RECORD_DOES_NOT_EXIST = -1

_RECORDS = Column.RECORDS


class PendingChanges:
    """Changes of a group of entries not yet written, readable as the new state."""

    def __init__(self, reader: KvReader) -> None:
        self._reader = reader
        self._records: dict[bytes, bytes | None] = {}
        self._meta: dict[bytes, bytes | None] = {}

    def get_record(self, encoded_key: bytes) -> bytes | None:
        if encoded_key in self._records:
            return self._records[encoded_key]
        return self._reader.get(_RECORDS, encoded_key)

    def put_record(self, encoded_key: bytes, data: bytes) -> None:
        self._records[encoded_key] = data

    def delete_record(self, encoded_key: bytes) -> None:
        self._records[encoded_key] = None

    def record_keys_in_range(self, start: bytes, end: bytes) -> list[bytes]:
        """Keys present in [start, end) in the new state, ascending."""
        keys = {key for key, _ in self._reader.scan(_RECORDS, start, end)}
        for key, data in self._records.items():
            if start <= key < end:
                if data is None:
                    keys.discard(key)
                else:
                    keys.add(key)
        return sorted(keys)

    def set_meta(self, key: bytes, data: bytes | None) -> None:
        self._meta[key] = data

    def set_commit_offset(self, offset: int) -> None:
        self._meta[COMMIT_OFFSET_KEY] = encode_i64(offset)

    def changes(self) -> list[Change]:
        result: list[Change] = [(_RECORDS, key, data) for key, data in self._records.items()]
        result.extend((Column.META, key, data) for key, data in self._meta.items())
        return result

    def __len__(self) -> int:
        return len(self._records) + len(self._meta)


def version_of(meta: RecordMeta) -> pb.Version:
    version = pb.Version(
        version_id=meta.version_id,
        modifications_count=meta.modifications_count,
        created_timestamp=meta.created_ms,
        modified_timestamp=meta.modified_ms,
    )
    if meta.session_id is not None:
        version.session_id = meta.session_id
    if meta.client_identity is not None:
        version.client_identity = meta.client_identity
    return version


def apply_write(
    state: PendingChanges,
    request: pb.WriteRequest,
    offset: int,
    timestamp_ms: int,
    key_order: KeyOrder,
    session_exists: Callable[[int], bool],
) -> pb.WriteResponse:
    """Apply one entry's write request: puts, then deletes, then delete ranges."""
    response = pb.WriteResponse()
    encode = key_order.encode
    put_results = response.puts
    for put in request.puts:
        put_results.append(
            _apply_put(state, put, encode(put.key), offset, timestamp_ms, session_exists)
        )
    delete_results = response.deletes
    for delete in request.deletes:
        delete_results.append(_apply_delete(state, delete, encode(delete.key)))
    range_results = response.delete_ranges
    for delete_range in request.delete_ranges:
        start = encode(delete_range.start_inclusive)
        end = encode(delete_range.end_exclusive)
        if start < end:
            for key in state.record_keys_in_range(start, end):
                state.delete_record(key)
        range_results.append(pb.DeleteRangeResponse(status=OK))
    return response


def _apply_put(
    state: PendingChanges,
    put: pb.PutRequest,
    encoded_key: bytes,
    offset: int,
    timestamp_ms: int,
    session_exists: Callable[[int], bool],
) -> pb.PutResponse:
    existing_data = state.get_record(encoded_key)
    existing = None if existing_data is None else decode_meta(existing_data)
    if put.HasField("expected_version_id"):
        expected = put.expected_version_id
        if expected == EXPECTED_RECORD_DOES_NOT_EXIST:
            if existing is not None:
                return pb.PutResponse(status=UNEXPECTED_VERSION_ID)
        elif existing is None or existing.version_id != expected:
            return pb.PutResponse(status=UNEXPECTED_VERSION_ID)
    session_id: int | None = None
    client_identity: str | None = None
    if put.HasField("session_id"):
        if not session_exists(put.session_id):
            return pb.PutResponse(status=SESSION_DOES_NOT_EXIST)
        session_id = put.session_id
        client_identity = put.client_identity if put.HasField("client_identity") else None
    meta = RecordMeta(
        version_id=offset,
        modifications_count=0 if existing is None else existing.modifications_count + 1,
        created_ms=timestamp_ms if existing is None else existing.created_ms,
        modified_ms=timestamp_ms,
        session_id=session_id,
        client_identity=client_identity,
        partition_key=put.partition_key if put.HasField("partition_key") else None,
    )
    state.put_record(encoded_key, encode_record(meta, put.value))
    return pb.PutResponse(status=OK, version=version_of(meta))


def _apply_delete(
    state: PendingChanges, delete: pb.DeleteRequest, encoded_key: bytes
) -> pb.DeleteResponse:
    existing_data = state.get_record(encoded_key)
    if existing_data is None:
        return pb.DeleteResponse(status=KEY_NOT_FOUND)
    if (
        delete.HasField("expected_version_id")
        and decode_meta(existing_data).version_id != delete.expected_version_id
    ):
        return pb.DeleteResponse(status=UNEXPECTED_VERSION_ID)
    state.delete_record(encoded_key)
    return pb.DeleteResponse(status=OK)
