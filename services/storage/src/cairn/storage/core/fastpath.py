"""Recognising write requests whose puts are plain (key, value, expected version).

Most writes are plain; they skip per-put validation and the general put path.
Recognition happens in C: parse the bytes with a schema in which a put has only
those three fields, drop every field that schema does not know, and compare
sizes. A request with anything more (or encoded non-canonically) takes the
general path, which is always correct.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from cairn.proto import storage_internal_pb2 as internal_pb


def has_plain_puts(raw_request: bytes) -> bool:
    try:
        narrow = internal_pb.NarrowWriteRequest.FromString(raw_request)
    except DecodeError:
        return False
    narrow.DiscardUnknownFields()
    size: int = narrow.ByteSize()
    return size == len(raw_request)
