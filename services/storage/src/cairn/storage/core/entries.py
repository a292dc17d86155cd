"""What a WAL entry's payload holds.

The first byte says what kind of entry it is, so that session lifecycle and
leadership changes share the log with client writes. A client write is
stored as the exact bytes the client sent: the leader parses each request once
and forwards bytes, never re-serializes. Folded writes (several clients'
requests in one entry) are those bytes, each framed as a repeated field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.wire import varint

CLIENT_WRITE = 0x01
CREATE_SESSION = 0x02
CLOSE_SESSION = 0x03
TERM_START = 0x04
FOLDED_WRITES = 0x05

_BODIES: dict[int, type[Message]] = {
    CLIENT_WRITE: pb.WriteRequest,
    CREATE_SESSION: internal_pb.CreateSessionEntry,
    CLOSE_SESSION: internal_pb.CloseSessionEntry,
    TERM_START: internal_pb.TermStartEntry,
}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of a replica's log (the WAL's record; u64 fields)."""

    term: int
    offset: int  # consecutive within the log
    timestamp_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Folded:
    """The body of a FOLDED_WRITES entry: client write requests, applied in order."""

    requests: Sequence[pb.WriteRequest]


# FoldedWrites.requests: field 1, length-delimited.
_FOLDED_REQUEST_TAG = b"\x0a"


def encode_entry(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + body


def encode_client_write(raw_request: bytes) -> bytes:
    return encode_entry(CLIENT_WRITE, raw_request)


def encode_folded_writes(raw_requests: Sequence[bytes]) -> bytes:
    """A FOLDED_WRITES payload: a serialized FoldedWrites built from the requests'
    own bytes (no re-serialization)."""
    parts = [bytes((FOLDED_WRITES,))]
    for raw in raw_requests:
        parts.extend((_FOLDED_REQUEST_TAG, varint(len(raw)), raw))
    return b"".join(parts)


def decode_entry(payload: bytes) -> tuple[int, Message | Folded]:
    if not payload:
        raise ValueError("empty log entry payload")
    kind = payload[0]
    if kind == FOLDED_WRITES:
        return kind, Folded(internal_pb.FoldedWrites.FromString(payload[1:]).requests)
    body_type = _BODIES.get(kind)
    if body_type is None:
        raise ValueError(f"unknown log entry kind {kind:#04x}")
    return kind, body_type.FromString(payload[1:])
