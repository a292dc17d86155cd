"""Answering reads from a shard's committed state."""

from __future__ import annotations

from collections.abc import Iterator

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.apply import version_of
from cairn.storage.kv.store import Column, KvReader
from cairn.storage.records import decode_meta, decode_record

_RECORDS = Column.RECORDS
_NOT_FOUND = pb.GetResponse(status=pb.KEY_NOT_FOUND)


def record_response(
    key: str, data: bytes, include_value: bool, response: pb.GetResponse | None = None
) -> pb.GetResponse:
    if response is None:
        response = pb.GetResponse()
    if include_value:
        meta, value = decode_record(data)
        response.value = value
    else:
        meta = decode_meta(data)
    response.version.CopyFrom(version_of(meta))
    response.key = key
    return response


def get(reader: KvReader, request: pb.GetRequest, key_order: KeyOrder) -> pb.GetResponse:
    encoded = key_order.encode(request.key)
    comparison = request.comparison_type
    if comparison == pb.EQUAL:
        data = reader.get(_RECORDS, encoded)
        if data is None:
            return _NOT_FOUND
        return record_response(request.key, data, request.include_value)
    if comparison == pb.FLOOR:
        found = reader.floor(_RECORDS, encoded, inclusive=True)
    elif comparison == pb.LOWER:
        found = reader.floor(_RECORDS, encoded, inclusive=False)
    elif comparison == pb.CEILING:
        found = reader.ceiling(_RECORDS, encoded, inclusive=True)
    elif comparison == pb.HIGHER:
        found = reader.ceiling(_RECORDS, encoded, inclusive=False)
    else:
        raise ValueError(f"unknown comparison type {comparison}")
    if found is None:
        return _NOT_FOUND
    found_key, data = found
    return record_response(key_order.decode(found_key), data, request.include_value)


def scan_records(
    reader: KvReader, start: str, end: str, key_order: KeyOrder
) -> Iterator[tuple[str, bytes]]:
    """(key, stored record) for start <= key < end, in the key order."""
    encoded_start, encoded_end = key_order.encode(start), key_order.encode(end)
    if encoded_end <= encoded_start:
        return
    decode = key_order.decode
    for encoded, data in reader.scan(_RECORDS, encoded_start, encoded_end):
        yield decode(encoded), data
