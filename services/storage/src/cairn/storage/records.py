"""The stored form of a user record: version metadata followed by the value.

Layout (little endian):
    version_id i64 | modifications_count i64 | created_ms u64 | modified_ms u64 | flags u8
    [session_id i64]                      if flags & HAS_SESSION
    [u16 length + client_identity utf-8]  if flags & HAS_CLIENT_IDENTITY
    [u16 length + partition_key utf-8]    if flags & HAS_PARTITION_KEY
    value bytes (the rest)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_FIXED = struct.Struct("<qqQQB")
# The fixed header alone, for hot paths that need no dataclass.
HEADER = _FIXED
HEADER_SIZE = _FIXED.size
_SESSION = struct.Struct("<q")
_LENGTH = struct.Struct("<H")

HAS_SESSION = 0x01
HAS_CLIENT_IDENTITY = 0x02
HAS_PARTITION_KEY = 0x04
FLAGS_OFFSET = HEADER_SIZE - 1
# A session's id comes first after the fixed header.
_SESSION_END = HEADER_SIZE + _SESSION.size


def version_header(record: bytes) -> bytes:
    """What a write needs of a stored record before replacing it: the fixed header,
    and the owning session's id if it has one (so that detaching the record from its
    session needs no read of the whole record)."""
    if len(record) > FLAGS_OFFSET and record[FLAGS_OFFSET] & HAS_SESSION:
        return record[:_SESSION_END]
    return record[:HEADER_SIZE]


def version_header_size(header: bytes) -> int:
    """The length of the `version_header` part of a header (the apply overlay's and
    the header cache's headers may carry more after it: see indexes.py)."""
    return _SESSION_END if header[FLAGS_OFFSET] & HAS_SESSION else HEADER_SIZE


def header_session(header: bytes) -> int | None:
    """The owning session's id from a `version_header` (or a whole record); None for
    a persistent record."""
    if header[FLAGS_OFFSET] & HAS_SESSION:
        session_id: int = _SESSION.unpack_from(header, HEADER_SIZE)[0]
        return session_id
    return None


@dataclass(frozen=True, slots=True)
class RecordMeta:
    version_id: int
    modifications_count: int
    created_ms: int
    modified_ms: int
    session_id: int | None = None
    client_identity: str | None = None
    partition_key: str | None = None


def encode_record(
    version_id: int,
    modifications_count: int,
    created_ms: int,
    modified_ms: int,
    session_id: int | None,
    client_identity: str | None,
    partition_key: str | None,
    value: bytes,
) -> bytes:
    """A record's stored form (see the layout above). Built from the fields, not a
    RecordMeta: constructing a frozen dataclass costs as much as the encoding
    (measurements: docs/performance.md, "Record encoding without RecordMeta"), and
    the write path runs this for every put beyond the fast path."""
    flags = 0
    tail: list[bytes] = []
    if session_id is not None:
        flags |= HAS_SESSION
        tail.append(_SESSION.pack(session_id))
    if client_identity is not None:
        flags |= HAS_CLIENT_IDENTITY
        raw = client_identity.encode("utf-8")
        tail.append(_LENGTH.pack(len(raw)))
        tail.append(raw)
    if partition_key is not None:
        flags |= HAS_PARTITION_KEY
        raw = partition_key.encode("utf-8")
        tail.append(_LENGTH.pack(len(raw)))
        tail.append(raw)
    head = _FIXED.pack(version_id, modifications_count, created_ms, modified_ms, flags)
    if not tail:
        return head + value
    return b"".join((head, *tail, value))


def _decode(data: bytes) -> tuple[RecordMeta, int]:
    version_id, modifications, created, modified, flags = _FIXED.unpack_from(data, 0)
    position = _FIXED.size
    session_id = client_identity = partition_key = None
    if flags & HAS_SESSION:
        (session_id,) = _SESSION.unpack_from(data, position)
        position += _SESSION.size
    if flags & HAS_CLIENT_IDENTITY:
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        client_identity = data[position : position + length].decode("utf-8")
        position += length
    if flags & HAS_PARTITION_KEY:
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        partition_key = data[position : position + length].decode("utf-8")
        position += length
    meta = RecordMeta(
        version_id, modifications, created, modified, session_id, client_identity, partition_key
    )
    return meta, position


def decode_meta(data: bytes) -> RecordMeta:
    return _decode(data)[0]


def decode_record(data: bytes) -> tuple[RecordMeta, bytes]:
    meta, position = _decode(data)
    return meta, data[position:]
