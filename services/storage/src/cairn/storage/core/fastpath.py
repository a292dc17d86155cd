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
    return _narrows_exactly(internal_pb.NarrowWriteRequest, raw_request)


def folds_only_plain_puts(raw_folded: bytes) -> bool:
    """The same test for a FoldedWrites body: every request's puts are plain."""
    return _narrows_exactly(internal_pb.NarrowFoldedWrites, raw_folded)


def _narrows_exactly(
    narrow_type: type[internal_pb.NarrowWriteRequest] | type[internal_pb.NarrowFoldedWrites],
    raw: bytes,
) -> bool:
    try:
        narrow = narrow_type.FromString(raw)
    except DecodeError:
        return False
    narrow.DiscardUnknownFields()
    size: int = narrow.ByteSize()
    return size == len(raw)
