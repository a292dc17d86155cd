"""Hand-encoded WriteResponse bytes.

A write's response is built for every put of every entry, and building it as
protobuf objects costs more than the rest of the put. Its shape is tiny and
fixed, so we encode it directly, canonically (fields in number order, proto3
zero values omitted, optional fields emitted when present); a property test
checks the bytes against the protobuf library's own serialization.
"""

from __future__ import annotations

import functools
import struct

_FIXED64 = struct.Struct("<Q")
_SMALL = [bytes((n,)) for n in range(128)]

# Tags: (field_number << 3) | wire_type.
_STATUS = b"\x08"  # field 1, varint (PutResponse/DeleteResponse/DeleteRangeResponse.status)
_VERSION = b"\x12"  # PutResponse.version: field 2, length-delimited
_KEY = b"\x1a"  # PutResponse.key: field 3, length-delimited (only for generated keys)
_VERSION_ID = b"\x08"
_MODIFICATIONS = b"\x10"
_CREATED = b"\x19"  # field 3, fixed64
_MODIFIED = b"\x21"  # field 4, fixed64
_SESSION_ID = b"\x28"
_CLIENT_IDENTITY = b"\x32"
# WriteResponse repeated fields.
PUTS = b"\x0a"
DELETES = b"\x12"
DELETE_RANGES = b"\x1a"


def varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf does
    out = bytearray()
    while value > 127:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(raw: bytes, position: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `position`; IndexError if cut short."""
    value = 0
    shift = 0
    while True:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return b"".join((tag, varint(len(payload)), payload))


def status_only(status: int) -> bytes:
    """A PutResponse / DeleteResponse / DeleteRangeResponse holding only a status."""
    return _STATUS + varint(status) if status else b""


def put_ok(
    version_id: int,
    modifications_count: int,
    created_ms: int,
    modified_ms: int,
    session_id: int | None = None,
    client_identity: str | None = None,
    generated_key: str | None = None,
) -> bytes:
    """A successful PutResponse (status OK is the default, so it is omitted).
    `generated_key`: the key the server chose (sequence keys); None omits the field."""
    return _put_ok(
        _version_id_field(version_id),
        modifications_count,
        created_ms,
        _modified_field(modified_ms),
        session_id,
        client_identity,
        generated_key,
    )


def _version_id_field(version_id: int) -> bytes:
    return _VERSION_ID + varint(version_id) if version_id else b""


def _modified_field(modified_ms: int) -> bytes:
    return _MODIFIED + _FIXED64.pack(modified_ms) if modified_ms else b""


def _put_ok(
    version_id_field: bytes,
    modifications_count: int,
    created_ms: int,
    modified_field: bytes,
    session_id: int | None,
    client_identity: str | None,
    generated_key: str | None,
) -> bytes:
    """put_ok with the version id and modified time already encoded (an entry's
    puts share them)."""
    parts = [version_id_field]
    if modifications_count:
        parts.append(_MODIFICATIONS + varint(modifications_count))
    if created_ms:
        parts.append(_CREATED + _FIXED64.pack(created_ms))
    parts.append(modified_field)
    if session_id is not None:
        parts.append(_SESSION_ID + varint(session_id))
    if client_identity is not None:
        parts.append(field(_CLIENT_IDENTITY, client_identity.encode("utf-8")))
    version = field(_VERSION, b"".join(parts))
    if generated_key is None:
        return version
    return version + field(_KEY, generated_key.encode("utf-8"))


class PutResponses:
    """Framed PutResponses for one entry, with the parts shared by every put of the
    entry (version id = the entry's offset, modified time = its timestamp) encoded once."""

    def __init__(self, version_id: int, modified_ms: int) -> None:
        self._version_id = _version_id_field(version_id)
        self._modified = _modified_field(modified_ms)
        self.created = self._framed(0, modified_ms)
        # The common update (a count under 2**21 and a created time) is one struct
        # pack: everything before the count and after the created time is the same
        # for every put of the entry whose count has as many varint bytes. A key
        # rewritten for good (a lease, an owner) soon counts past 127: its answer
        # took 5 times longer built in full (500 ns against 100), on every put.
        heads = []
        for count_bytes in (1, 2, 3):
            size = len(self._version_id) + 1 + count_bytes + 1 + _FIXED64.size
            size += len(self._modified)
            head = b"".join(
                (PUTS, _SMALL[size + 2], _VERSION, _SMALL[size], self._version_id, _MODIFICATIONS)
            )
            heads.append((head, _update_struct(len(head), count_bytes, len(self._modified)).pack))
        (self._head_1, self._pack_1), (self._head_2, self._pack_2), (self._head_3, self._pack_3) = (
            heads
        )

    def _framed(self, modifications_count: int, created_ms: int) -> bytes:
        payload = b"".join(
            (
                self._version_id,
                _MODIFICATIONS + varint(modifications_count) if modifications_count else b"",
                _CREATED + _FIXED64.pack(created_ms) if created_ms else b"",
                self._modified,
            )
        )
        # At most 40 bytes, so both lengths are one-byte varints.
        return b"".join((PUTS, _SMALL[len(payload) + 2], _VERSION, _SMALL[len(payload)], payload))

    def updated(self, modifications_count: int, created_ms: int) -> bytes:
        count = modifications_count
        if not created_ms or count <= 0:
            return self._framed(count, created_ms)
        if count < 1 << 7:
            return self._pack_1(self._head_1, count, _CREATED_TAG, created_ms, self._modified)
        if count < 1 << 14:
            return self._pack_2(
                self._head_2, count & 0x7F | 0x80, count >> 7, _CREATED_TAG, created_ms,
                self._modified,
            )  # fmt: skip
        if count < 1 << 21:
            return self._pack_3(
                self._head_3, count & 0x7F | 0x80, count >> 7 & 0x7F | 0x80, count >> 14,
                _CREATED_TAG, created_ms, self._modified,
            )  # fmt: skip
        return self._framed(count, created_ms)

    def owned_or_named(
        self,
        modifications_count: int,
        created_ms: int,
        session_id: int | None,
        client_identity: str | None,
        generated_key: str | None,
    ) -> bytes:
        """A put's response that also names its session (and client) or the key the
        server generated: built in full, but for the entry's shared parts."""
        version = _put_ok(
            self._version_id,
            modifications_count,
            created_ms,
            self._modified,
            session_id,
            client_identity,
            generated_key,
        )
        return field(PUTS, version)


_CREATED_TAG = _CREATED[0]


@functools.lru_cache(maxsize=256)
def _update_struct(head_size: int, count_bytes: int, tail_size: int) -> struct.Struct:
    """head, modification count (its varint bytes, one B each), created tag, created
    time (fixed64), tail."""
    return struct.Struct(f"<{head_size}s{'B' * count_bytes}BQ{tail_size}s")


class NoPutResponses(PutResponses):
    """For a replica that answers no one (a follower, a replay): no bytes built."""

    def __init__(self) -> None:
        self.created = b""

    def updated(self, modifications_count: int, created_ms: int) -> bytes:
        return b""

    def owned_or_named(
        self,
        modifications_count: int,
        created_ms: int,
        session_id: int | None,
        client_identity: str | None,
        generated_key: str | None,
    ) -> bytes:
        return b""


# NotificationBatch: shard (1, varint), offset (2, varint), timestamp (3, fixed64),
# notifications (4, map<string, Notification> = repeated {key 1, value 2}).
_BATCH_SHARD = b"\x08"
_BATCH_OFFSET = b"\x10"
_BATCH_TIMESTAMP = b"\x19"
_BATCH_ENTRY = b"\x22"
_ENTRY_KEY = b"\x0a"
_ENTRY_VALUE = b"\x12"
_NOTIFICATION_TYPE = b"\x08"
_NOTIFICATION_VERSION = b"\x10"
_NOTIFICATION_RANGE_LAST = b"\x1a"


def notification_batch_header(shard_id: int, offset: int, timestamp_ms: int) -> bytes:
    return b"".join(
        (
            _BATCH_SHARD + varint(shard_id) if shard_id else b"",
            _BATCH_OFFSET + varint(offset) if offset else b"",
            _BATCH_TIMESTAMP + _FIXED64.pack(timestamp_ms) if timestamp_ms else b"",
        )
    )


def notification_value(kind: int, version_id: int | None, range_last: str | None) -> bytes:
    """A Notification framed as the value field of its map entry: shared by every
    key that changed the same way in one entry."""
    value = b"".join(
        (
            _NOTIFICATION_TYPE + varint(kind) if kind else b"",
            _NOTIFICATION_VERSION + varint(version_id) if version_id is not None else b"",
            field(_NOTIFICATION_RANGE_LAST, range_last.encode("utf-8"))
            if range_last is not None
            else b"",
        )
    )
    return field(_ENTRY_VALUE, value)


def notification_entries(changes: dict[str, bytes]) -> list[bytes]:
    """The framed map entries key -> Notification of a NotificationBatch, from
    each key's framed value (notification_value). One flat list of parts and no
    call per key: this runs for every change of every entry."""
    parts: list[bytes] = []
    extend = parts.extend
    small = _SMALL
    for key, value in changes.items():
        encoded = key.encode("utf-8")
        size = len(encoded)
        if size < 126:
            entry_size = size + 2 + len(value)
            length = small[entry_size] if entry_size < 128 else varint(entry_size)
            extend((_BATCH_ENTRY, length, _ENTRY_KEY, small[size], encoded, value))
        else:
            head = _ENTRY_KEY + varint(size)
            extend((_BATCH_ENTRY, varint(len(head) + size + len(value)), head, encoded, value))
    return parts
