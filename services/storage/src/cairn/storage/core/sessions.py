"""Client sessions: which ones the leader considers alive, and what opening and
closing one does to the shard's state.

Expiry is the leader's decision, made on its own clock by `SessionTracker`; its
effect (deleting the session and its ephemeral records) is a CloseSession log
entry, applied identically on every replica. A leader that starts (a restart,
later a failover) gives every stored session a fresh full timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.meta import (
    SESSION_PREFIX,
    ephemeral_prefix,
    prefix_end,
    session_id_of,
    session_key,
)
from cairn.storage.kv.store import Column, KvReader
from cairn.storage.records import header_session

MIN_SESSION_TIMEOUT_MS = 2_000
MAX_SESSION_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class _Tracked:
    timeout_ms: int
    deadline_ms: int
    # The principal that opened it ("role:name"); "" for sessions of older versions.
    owner: str = ""
    closing: bool = False


class SessionTracker:
    """The leader's view of session liveness. Pure: time comes in as arguments."""

    def __init__(self) -> None:
        self._sessions: dict[int, _Tracked] = {}

    def open(self, session_id: int, timeout_ms: int, now_ms: int, owner: str = "") -> None:
        self._sessions[session_id] = _Tracked(timeout_ms, now_ms + timeout_ms, owner)

    def owner(self, session_id: int) -> str | None:
        """Who opened the session; None if it is not tracked (unknown or gone)."""
        tracked = self._sessions.get(session_id)
        return None if tracked is None else tracked.owner

    def owned_by(self, owner: str) -> int:
        """Sessions of `owner` not yet closed (for the per-principal cap)."""
        return sum(1 for t in self._sessions.values() if t.owner == owner and not t.closing)

    def is_open(self, session_id: int) -> bool:
        tracked = self._sessions.get(session_id)
        return tracked is not None and not tracked.closing

    def heartbeat(self, session_id: int, now_ms: int) -> bool:
        """Push the deadline a full timeout ahead; False if the session is not open."""
        tracked = self._sessions.get(session_id)
        if tracked is None or tracked.closing:
            return False
        tracked.deadline_ms = now_ms + tracked.timeout_ms
        return True

    def start_closing(self, session_id: int) -> bool:
        """Mark the session as being closed; False if it already was, or is unknown."""
        tracked = self._sessions.get(session_id)
        if tracked is None or tracked.closing:
            return False
        tracked.closing = True
        return True

    def forget(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def expired(self, now_ms: int) -> list[int]:
        """Open sessions whose deadline has passed (a full timeout without heartbeat)."""
        return [
            session_id
            for session_id, tracked in self._sessions.items()
            if not tracked.closing and now_ms >= tracked.deadline_ms
        ]

    def __len__(self) -> int:
        return len(self._sessions)


def stored_sessions(reader: KvReader) -> list[tuple[int, internal_pb.SessionState]]:
    """Every open session recorded in the shard's state."""
    return [
        (session_id_of(key), internal_pb.SessionState.FromString(value))
        for key, value in reader.scan(Column.META, SESSION_PREFIX, prefix_end(SESSION_PREFIX))
    ]


def owning_session(record: bytes) -> int | None:
    """The session that owns a stored record, None for a persistent one."""
    return header_session(record)


def ephemeral_range(session_id: int) -> tuple[bytes, bytes]:
    prefix = ephemeral_prefix(session_id)
    return prefix, prefix_end(prefix)


__all__ = [
    "MAX_SESSION_TIMEOUT_MS",
    "MIN_SESSION_TIMEOUT_MS",
    "SessionTracker",
    "ephemeral_range",
    "owning_session",
    "session_key",
    "stored_sessions",
]
