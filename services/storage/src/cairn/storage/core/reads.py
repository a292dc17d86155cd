"""Answering reads from a shard's committed state."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from cairn.common.errors import InvalidRequest
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import indexes
from cairn.storage.core.wire import field, put_ok, read_varint, varint
from cairn.storage.kv.store import Column, KvReader
from cairn.storage.records import HEADER, HEADER_SIZE, decode_record

if TYPE_CHECKING:
    from cairn.storage.core.read_cache import ReadCache

_RECORDS = Column.RECORDS
# Tags, (field number << 3) | 2 (length-delimited): ReadResponse.gets, and
# GetResponse's version, value and key.
_GETS = b"\x0a"
_VERSION = 0x12
_VALUE = b"\x1a"
_GET_KEY = b"\x22"
_NOT_FOUND = field(_GETS, pb.GetResponse(status=pb.KEY_NOT_FOUND).SerializeToString())


def _fill(data: bytes, include_value: bool, response: pb.GetResponse) -> pb.GetResponse:
    """Set a stored record's version (and value, if asked) on `response`."""
    version_id, modifications, created_ms, modified_ms, flags = HEADER.unpack_from(data)
    version = response.version
    version.version_id = version_id
    version.modifications_count = modifications
    version.created_timestamp = created_ms
    version.modified_timestamp = modified_ms
    if flags:
        meta, value = decode_record(data)
        if meta.session_id is not None:
            version.session_id = meta.session_id
        if meta.client_identity is not None:
            version.client_identity = meta.client_identity
        if include_value:
            response.value = value
    elif include_value:
        response.value = data[HEADER_SIZE:]
    return response


def record_response(
    key: str, data: bytes, include_value: bool, response: pb.GetResponse
) -> pb.GetResponse:
    """Fill `response` (typically just added to a chunk) with a stored record."""
    _fill(data, include_value, response)
    response.key = key
    return response


def answer_fields(data: bytes) -> bytes:
    """A stored record as the answer to an exact get asking for the value, all but the
    key: the serialized version and value fields of its GetResponse, encoded directly
    as the protobuf library would (fields in number order: status, absent when OK,
    then version, value, key; an exact get's answer appends its key field). The
    version is a PutResponse's, field number included."""
    version_id, modifications, created_ms, modified_ms, flags = HEADER.unpack_from(data)
    if flags:
        meta, value = decode_record(data)
        version = put_ok(
            version_id,
            modifications,
            created_ms,
            modified_ms,
            meta.session_id,
            meta.client_identity,
        )
    else:
        value = data[HEADER_SIZE:]
        version = put_ok(version_id, modifications, created_ms, modified_ms)
    return b"".join((version, _VALUE, varint(len(value)), value))


def _without_value(fields: bytes) -> bytes:
    """`answer_fields` for a get that did not ask for the value: its version field."""
    if fields[0] != _VERSION:
        raise ValueError("answer fields must start with the version")
    length, position = read_varint(fields, 1)
    return fields[: position + length]


def get(
    reader: KvReader,
    request: pb.GetRequest,
    key_order: KeyOrder,
    response: pb.GetResponse | None = None,
) -> pb.GetResponse:
    """Answer one get into `response` (a new message if None)."""
    if response is None:
        response = pb.GetResponse()
    return _get(reader, request, key_order, key_order.encoder, response)


def get_chunks(
    reader: KvReader,
    requests: Sequence[pb.GetRequest],
    key_order: KeyOrder,
    max_gets_per_chunk: int,
    cache: ReadCache | None = None,
) -> Iterator[bytes]:
    """The answers to a Read's gets, in order, as serialized ReadResponses of at most
    `max_gets_per_chunk` answers (one, empty, for no gets). The key order's encoder
    is looked up once for them all: a Read carries up to thousands of gets.
    `cache`, if given, holds answers of `reader`'s records (read_cache.py); each
    chunk reads both at one point, between two applied groups."""
    if not requests:
        yield b""
        return
    encode = key_order.encoder
    for first in range(0, len(requests), max_gets_per_chunk):
        chunk_requests = requests[first : first + max_gets_per_chunk]
        yield _chunk(reader, chunk_requests, key_order, encode, cache)


def read_answers(reader: KvReader, encoded_keys: Sequence[bytes]) -> list[bytes | None]:
    """`answer_fields` of each key's record (None: absent), read together."""
    return [
        None if data is None else answer_fields(data)
        for data in reader.get_many(_RECORDS, encoded_keys)
    ]


def _chunk(
    reader: KvReader,
    requests: Sequence[pb.GetRequest],
    key_order: KeyOrder,
    encode: Callable[[str], bytes],
    cache: ReadCache | None,
) -> bytes:
    """One serialized ReadResponse, written out directly (a repeated field is its
    elements, each tagged and length-prefixed). Its exact-key gets (no index, EQUAL:
    nearly all of them) are read together, from the cache or with one `get_many`,
    which costs a fifth less per get than a call each, and each answer is its
    record's `answer_fields` and its key; the other gets are answered one by one."""
    keys = [request.key for request in requests]
    exact = [_is_exact(request) for request in requests]
    exact_keys = [encode(key) for key in itertools.compress(keys, exact)]
    if cache is None:
        answers = iter(read_answers(reader, exact_keys))
    else:
        answers = iter(cache.answers(reader, exact_keys))
    parts: list[bytes] = []
    for request, key, is_exact in zip(requests, keys, exact, strict=True):
        if not is_exact:
            response = _get(reader, request, key_order, encode, pb.GetResponse())
            parts.append(field(_GETS, response.SerializeToString()))
            continue
        fields = next(answers)
        if fields is None:
            parts.append(_NOT_FOUND)
            continue
        if not request.include_value:
            fields = _without_value(fields)
        key_bytes = key.encode()
        key_length = varint(len(key_bytes))
        size = len(fields) + 1 + len(key_length) + len(key_bytes)
        parts += (_GETS, varint(size), fields, _GET_KEY, key_length, key_bytes)
    return b"".join(parts)


def _is_exact(request: pb.GetRequest) -> bool:
    return request.comparison_type == pb.EQUAL and not request.HasField("secondary_index_name")


def _get(
    reader: KvReader,
    request: pb.GetRequest,
    key_order: KeyOrder,
    encode: Callable[[str], bytes],
    response: pb.GetResponse,
) -> pb.GetResponse:
    encoded = encode(request.key)
    comparison = request.comparison_type
    if request.HasField("secondary_index_name"):
        return _get_by_index(reader, request, encoded, key_order, response)
    if comparison == pb.EQUAL:
        data = reader.get(_RECORDS, encoded)
        if data is None:
            response.status = pb.KEY_NOT_FOUND
            return response
        return record_response(request.key, data, request.include_value, response)
    if comparison == pb.FLOOR:
        found = reader.floor(_RECORDS, encoded, inclusive=True)
    elif comparison == pb.LOWER:
        found = reader.floor(_RECORDS, encoded, inclusive=False)
    elif comparison == pb.CEILING:
        found = reader.ceiling(_RECORDS, encoded, inclusive=True)
    elif comparison == pb.HIGHER:
        found = reader.ceiling(_RECORDS, encoded, inclusive=False)
    else:
        raise InvalidRequest(f"unknown comparison type {comparison}")
    if found is None:
        response.status = pb.KEY_NOT_FOUND
        return response
    found_key, data = found
    return record_response(key_order.decode(found_key), data, request.include_value, response)


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


def _get_by_index(
    reader: KvReader,
    request: pb.GetRequest,
    encoded_secondary: bytes,
    key_order: KeyOrder,
    response: pb.GetResponse,
) -> pb.GetResponse:
    """The primary record whose secondary key matches, with both keys set."""
    comparison = request.comparison_type
    if comparison not in _COMPARISONS:
        raise InvalidRequest(f"unknown comparison type {comparison}")
    found = indexes.find_entry(reader, request.secondary_index_name, encoded_secondary, comparison)
    data = None if found is None else reader.get(_RECORDS, found[1])
    if found is None or data is None:
        response.status = pb.KEY_NOT_FOUND
        return response
    secondary, primary = found
    record_response(key_order.decode(primary), data, request.include_value, response)
    response.secondary_index_key = key_order.decode(secondary)
    return response


_COMPARISONS = frozenset((pb.EQUAL, pb.FLOOR, pb.CEILING, pb.LOWER, pb.HIGHER))


def scan_index(
    reader: KvReader, index_name: str, start: str, end: str, key_order: KeyOrder
) -> Iterator[tuple[str, bytes]]:
    """(primary key, stored record) of the index entries with start <= secondary key
    < end, ordered by secondary key then primary key; a record indexed under several
    secondary keys in the range comes once per entry. A record deleted while a long
    scan is paused between chunks is skipped."""
    for primary, data, _ in scan_index_records(reader, index_name, start, end, key_order):
        yield primary, data


def scan_index_records(
    reader: KvReader, index_name: str, start: str, end: str, key_order: KeyOrder
) -> Iterator[tuple[str, bytes, str]]:
    """`scan_index` with each entry's secondary key: (primary key, stored record,
    secondary key). A RangeScan through an index answers the secondary key too, so
    that clients can merge shards in index order."""
    decode = key_order.decode
    entries = indexes.scan_entries(
        reader, index_name, key_order.encode(start), key_order.encode(end)
    )
    for secondary, primary in entries:
        data = reader.get(_RECORDS, primary)
        if data is not None:
            yield decode(primary), data, decode(secondary)


def list_index(
    reader: KvReader, index_name: str, start: str, end: str, key_order: KeyOrder
) -> Iterator[str]:
    """The primary keys of the index entries with start <= secondary key < end, in
    index order (from one consistent view: the entries are exact, no record read)."""
    decode = key_order.decode
    entries = indexes.scan_entries(
        reader, index_name, key_order.encode(start), key_order.encode(end)
    )
    for _, primary in entries:
        yield decode(primary)
