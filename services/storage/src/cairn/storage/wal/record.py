"""The WAL record codec: pure functions over byte buffers, no I/O.

A record is a fixed 28-byte little-endian header followed by the payload::

    length u32 | crc32 u32 | term u64 | offset u64 | timestamp_ms u64 | payload

``length`` is the payload length. The CRC (zlib.crc32) covers every other byte of the
record in order: length, term, offset, timestamp_ms, payload. Covering the length means a
damaged length is caught by the CRC even when it happens to stay within bounds.
"""

from __future__ import annotations

import struct
import zlib

from cairn.storage.core.entries import LogEntry

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1

_HEADER = struct.Struct("<IIQQQ")
HEADER_SIZE_BYTES = _HEADER.size  # 28
# Byte ranges of the header that the CRC covers (everything but the CRC itself).
_LENGTH_END = 4
_CRC_END = 8


class WalError(Exception):
    """Base class of every error the WAL raises on purpose."""


class WalCorruptionError(WalError):
    """Damage to data that was durable (not a torn tail); the message names file and byte."""


class TornRecordError(Exception):
    """The buffer ends inside the record: more bytes are needed (or the write was torn)."""


class BadRecordError(Exception):
    """The bytes are there but are not a valid record (bad CRC or impossible length)."""


def check_entry(entry: LogEntry, max_record_bytes: int) -> None:
    """Raise ValueError if ``entry`` cannot be encoded (field out of range, payload too big)."""
    for name in ("term", "offset", "timestamp_ms"):
        value = getattr(entry, name)
        if not isinstance(value, int) or not 0 <= value <= U64_MAX:
            raise ValueError(f"LogEntry.{name} must be a u64, got {value!r}")
    if not isinstance(entry.payload, bytes):
        raise ValueError(f"LogEntry.payload must be bytes, got {type(entry.payload).__name__}")
    if len(entry.payload) > max_record_bytes:
        raise ValueError(
            f"payload of {len(entry.payload)} bytes exceeds max_record_bytes={max_record_bytes}"
        )


def encoded_size_bytes(entry: LogEntry) -> int:
    return HEADER_SIZE_BYTES + len(entry.payload)


def encode_into(out: bytearray, entry: LogEntry) -> int:
    """Append the record for ``entry`` to ``out``; return its size in bytes.

    The caller must have validated the entry (see ``check_entry``).
    """
    start = len(out)
    payload = entry.payload
    out += _HEADER.pack(len(payload), 0, entry.term, entry.offset, entry.timestamp_ms)
    out += payload
    with memoryview(out) as view:
        crc = zlib.crc32(view[start + _CRC_END :], zlib.crc32(view[start : start + _LENGTH_END]))
    struct.pack_into("<I", out, start + _LENGTH_END, crc)
    return len(out) - start


def encode(entry: LogEntry) -> bytes:
    out = bytearray()
    encode_into(out, entry)
    return bytes(out)


def decode(buffer: bytes | bytearray, position: int, max_record_bytes: int) -> tuple[LogEntry, int]:
    """Decode the record starting at ``position``; return it and the position just past it.

    Raises TornRecordError if the buffer ends before the record does, BadRecordError if the
    length is impossible or the CRC does not match. Does not check the offset sequence.
    """
    available = len(buffer) - position
    if available < HEADER_SIZE_BYTES:
        raise TornRecordError(f"{available} bytes left, header needs {HEADER_SIZE_BYTES}")
    length, crc, term, offset, timestamp_ms = _HEADER.unpack_from(buffer, position)
    if length > max_record_bytes:
        raise BadRecordError(f"record length {length} exceeds max_record_bytes={max_record_bytes}")
    end = position + HEADER_SIZE_BYTES + length
    if end > len(buffer):
        raise TornRecordError(f"record needs {end - position} bytes, {available} left")
    # The memoryview is released before returning: a live export would stop the caller
    # from resizing a bytearray buffer.
    with memoryview(buffer) as view:
        actual = zlib.crc32(
            view[position + _CRC_END : end], zlib.crc32(view[position : position + _LENGTH_END])
        )
        if actual != crc:
            raise BadRecordError(f"CRC mismatch (stored {crc:#010x}, computed {actual:#010x})")
        payload = bytes(view[position + HEADER_SIZE_BYTES : end])
    return LogEntry(term, offset, timestamp_ms, payload), end
