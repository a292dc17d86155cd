"""What a WAL entry's payload holds.

The first byte says what kind of entry it is, so that later kinds (session
lifecycle, ensemble changes) share the log with client writes. A client write
is stored as the exact bytes the client sent: the leader parses each request
once and forwards bytes, never re-serializes.
"""

from __future__ import annotations

from cairn.proto import oxia_client_pb2 as pb

CLIENT_WRITE = 0x01


def encode_client_write(raw_request: bytes) -> bytes:
    return bytes((CLIENT_WRITE,)) + raw_request


def decode_entry(payload: bytes) -> tuple[int, pb.WriteRequest]:
    if not payload:
        raise ValueError("empty log entry payload")
    kind = payload[0]
    if kind == CLIENT_WRITE:
        return kind, pb.WriteRequest.FromString(payload[1:])
    raise ValueError(f"unknown log entry kind {kind:#04x}")
