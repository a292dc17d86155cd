"""What a WAL entry's payload holds.

The first byte says what kind of entry it is, so that session lifecycle and
leadership changes share the log with client writes. A client write is
stored as the exact bytes the client sent: the leader parses each request once
and forwards bytes, never re-serializes.
"""

from __future__ import annotations

from google.protobuf.message import Message

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb

CLIENT_WRITE = 0x01
CREATE_SESSION = 0x02
CLOSE_SESSION = 0x03
TERM_START = 0x04

_BODIES: dict[int, type[Message]] = {
    CLIENT_WRITE: pb.WriteRequest,
    CREATE_SESSION: internal_pb.CreateSessionEntry,
    CLOSE_SESSION: internal_pb.CloseSessionEntry,
    TERM_START: internal_pb.TermStartEntry,
}


def encode_entry(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + body


def encode_client_write(raw_request: bytes) -> bytes:
    return encode_entry(CLIENT_WRITE, raw_request)


def decode_entry(payload: bytes) -> tuple[int, Message]:
    if not payload:
        raise ValueError("empty log entry payload")
    kind = payload[0]
    body_type = _BODIES.get(kind)
    if body_type is None:
        raise ValueError(f"unknown log entry kind {kind:#04x}")
    return kind, body_type.FromString(payload[1:])
