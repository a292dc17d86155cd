"""Keys and codecs of a replica's internal state (the META column)."""

from __future__ import annotations

import struct

COMMIT_OFFSET_KEY = b"commit_offset"
TERM_KEY = b"term"

_I64 = struct.Struct("<q")


def encode_i64(value: int) -> bytes:
    return _I64.pack(value)


def decode_i64(data: bytes | None, default: int) -> int:
    if data is None:
        return default
    value: int = _I64.unpack(data)[0]
    return value
