"""Column changes as bytes: what a leader's apply step wrote, sent to followers.

A follower that holds the same entries would compute exactly the same changes
(applying is deterministic), so it may write the leader's instead; that spares
it the per-put work of the apply step, which was most of a follower's event loop.

Layout: one record per change, in the order given: a flags byte (bit 0: the
column, 0 records and 1 meta; bit 1: a deletion), the key's length and the
value's length (little-endian u32; 0 for a deletion), the key, the value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from cairn.storage.kv.store import Column, ColumnChanges

CHANGE_HEADER = struct.Struct("<BII")
COLUMNS = (Column.RECORDS, Column.META)
COLUMN_BITS = {column: index for index, column in enumerate(COLUMNS)}
DELETION = 2
KNOWN_FLAGS = 1 | DELETION


class EncodedChangesError(ValueError):
    """Bytes that are not a whole, well-formed encoding."""


def encode_changes(changes: ColumnChanges) -> bytes:
    parts: list[bytes] = []
    extend = parts.extend
    pack = CHANGE_HEADER.pack
    for column, items in changes.items():
        bits = COLUMN_BITS[column]
        deletion = bits | DELETION
        for key, value in items.items():
            if value is None:
                extend((pack(deletion, len(key), 0), key))
            else:
                extend((pack(bits, len(key), len(value)), key, value))
    return b"".join(parts)


def decode_changes(encoded: bytes) -> Iterator[tuple[Column, bytes, bytes | None]]:
    """The changes in order; raises EncodedChangesError at the first malformed
    record (a caller that builds one batch from them writes nothing then)."""
    unpack = CHANGE_HEADER.unpack_from
    header_size = CHANGE_HEADER.size
    position, end = 0, len(encoded)
    while position < end:
        if position + header_size > end:
            raise EncodedChangesError(f"a change header cut short at byte {position}")
        flags, key_size, value_size = unpack(encoded, position)
        position += header_size
        if flags & ~KNOWN_FLAGS or (flags & DELETION and value_size):
            raise EncodedChangesError(f"unknown change flags {flags:#x} at byte {position}")
        stop = position + key_size + value_size
        if stop > end:
            raise EncodedChangesError(f"a change cut short at byte {position}")
        key = encoded[position : position + key_size]
        value = None if flags & DELETION else encoded[position + key_size : stop]
        yield COLUMNS[flags & 1], key, value
        position = stop
