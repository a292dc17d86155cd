"""Keys and codecs of a replica's internal state (the META column)."""

from __future__ import annotations

import struct

COMMIT_OFFSET_KEY = b"commit_offset"
TERM_KEY = b"term"
# session/<id>: SessionState of an open session.
SESSION_PREFIX = b"session/"
# ephemeral/<id><encoded key>: the records a session owns, so closing it finds them.
EPHEMERAL_PREFIX = b"ephemeral/"
# notification/<offset>: the serialized NotificationBatch of that entry.
NOTIFICATION_PREFIX = b"notification/"
# Notifications of offsets below this value were trimmed (retention).
NOTIFICATIONS_TRIMMED_BEFORE_KEY = b"notifications_trimmed_before"
# The (term, offset) of the entry just before the WAL's first one, set when a snapshot
# is installed: the replica's head while its WAL holds no entry.
LOG_BASE_KEY = b"log_base"
# The incarnation of this replica's data: drawn when the replica's storage is
# created empty, never copied to another replica (a snapshot leaves it out, see
# LOCAL_META_KEYS). A replica that lost its disk is created again with another
# one, so leader and controller can tell it from the replica it was.
INCARNATION_KEY = b"incarnation"
# META keys that describe this replica, not the shard's state: never sent in a
# snapshot, and kept across the install of one.
LOCAL_META_KEYS = frozenset({INCARNATION_KEY})
_ID = struct.Struct(">q")  # big endian: keys of one prefix sort by id

_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_ENTRY_ID = struct.Struct("<qq")  # term, offset


def encode_i64(value: int) -> bytes:
    return _I64.pack(value)


def decode_i64(data: bytes | None, default: int) -> int:
    if data is None:
        return default
    value: int = _I64.unpack(data)[0]
    return value


def encode_u64(value: int) -> bytes:
    return _U64.pack(value)


def decode_u64(data: bytes | None) -> int | None:
    if data is None:
        return None
    value: int = _U64.unpack(data)[0]
    return value


def encode_entry_id(term: int, offset: int) -> bytes:
    return _ENTRY_ID.pack(term, offset)


def decode_entry_id(data: bytes | None) -> tuple[int, int] | None:
    """(term, offset), or None if the key is absent."""
    if data is None:
        return None
    term, offset = _ENTRY_ID.unpack(data)
    return term, offset


def session_key(session_id: int) -> bytes:
    return SESSION_PREFIX + _ID.pack(session_id)


def session_id_of(key: bytes) -> int:
    value: int = _ID.unpack_from(key, len(SESSION_PREFIX))[0]
    return value


def ephemeral_prefix(session_id: int) -> bytes:
    return EPHEMERAL_PREFIX + _ID.pack(session_id)


def ephemeral_key(session_id: int, encoded_key: bytes) -> bytes:
    return EPHEMERAL_PREFIX + _ID.pack(session_id) + encoded_key


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix`."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        raise ValueError("a prefix of only 0xFF bytes has no end")
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


def notification_key(offset: int) -> bytes:
    return NOTIFICATION_PREFIX + _ID.pack(offset)


def notification_offset_of(key: bytes) -> int:
    value: int = _ID.unpack_from(key, len(NOTIFICATION_PREFIX))[0]
    return value
