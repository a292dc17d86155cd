"""A leader's client sessions (one shard replica's): created and closed through
the log, kept alive in memory (core/sessions.py's SessionTracker), expired by a
loop, and given a fresh full timeout each when a new leader takes over (it
cannot know how long ago the last heartbeat reached the old one).

A session's ephemeral records are deleted by CloseSession entries, each
deleting a bounded number of them; a close interrupted by a crash or a
failover is finished by the next leader as an expiry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from google.protobuf.message import Message

from cairn.common.errors import CairnError, InvalidRequest, SessionNotFound
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.apply import CloseOutcome
from cairn.storage.core.entries import CLOSE_SESSION, CREATE_SESSION
from cairn.storage.core.sessions import (
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
    SessionTracker,
    session_key,
    stored_sessions,
)
from cairn.storage.kv.store import Column, KvReader

log = logging.getLogger(__name__)
# How often the leader looks for expired sessions; expiry happens at most this
# late after a full timeout without a heartbeat.
SESSION_CHECK_INTERVAL_S = 0.25


class SessionLog(Protocol):
    """What sessions need of their replica (shard.py)."""

    shard_id: int

    @property
    def kv(self) -> KvReader: ...

    @property
    def serving(self) -> bool: ...

    async def wait_taken_over(self, timeout_s: float | None = None) -> None: ...

    async def wait_serving(self, timeout_s: float | None = None) -> None: ...

    async def append(self, kind: int, raw_body: bytes, body: Message) -> asyncio.Future[Any]:
        """Log one entry as leader; the future of its apply result."""
        ...


class ShardSessions:
    def __init__(self, replica: SessionLog, clock_ms: Callable[[], int]) -> None:
        self.replica = replica
        self.clock_ms = clock_ms
        self.tracker = SessionTracker()
        self.created = self.expired = 0

    def __len__(self) -> int:
        return len(self.tracker)

    def owned_by(self, owner: str) -> int:
        return self.tracker.owned_by(owner)

    async def create(self, timeout_ms: int, client_identity: str, owner: str = "") -> int:
        """`owner`: the authenticated principal, recorded in the replicated state."""
        if not MIN_SESSION_TIMEOUT_MS <= timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidRequest(
                f"session timeout {timeout_ms} ms is outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}] ms"
            )
        await self.replica.wait_taken_over()
        entry = internal_pb.CreateSessionEntry(
            timeout_ms=timeout_ms, client_identity=client_identity, owner=owner
        )
        future = await self.replica.append(CREATE_SESSION, entry.SerializeToString(), entry)
        session_id: int = await future
        self.tracker.open(session_id, timeout_ms, self.clock_ms(), owner)
        self.created += 1
        return session_id

    def owner(self, session_id: int) -> str | None:
        """Who opened the session: the leader's tracker, else the replicated state
        (a session an inherited entry created after this leader took over); None
        if it exists in neither."""
        owner = self.tracker.owner(session_id)
        if owner is not None:
            return owner
        stored = self.replica.kv.get(Column.META, session_key(session_id))
        return None if stored is None else internal_pb.SessionState.FromString(stored).owner

    async def keep_alive(self, session_id: int) -> None:
        await self.replica.wait_serving()
        if not self.tracker.heartbeat(session_id, self.clock_ms()):
            raise self._not_found(session_id)

    async def close(self, session_id: int) -> None:
        """Delete the session's ephemeral records, through the log, then answer."""
        await self.replica.wait_serving()
        if not self.tracker.start_closing(session_id):
            raise self._not_found(session_id)
        await self._close(session_id, internal_pb.CLOSED_BY_CLIENT)

    def _not_found(self, session_id: int) -> SessionNotFound:
        return SessionNotFound(
            f"session {session_id} does not exist on shard {self.replica.shard_id}"
        )

    async def _close(self, session_id: int, reason: internal_pb.SessionCloseReason) -> None:
        """Append CloseSession entries until one reports the session gone."""
        entry = internal_pb.CloseSessionEntry(session_id=session_id, reason=reason)
        raw = entry.SerializeToString()
        try:
            while await (await self.replica.append(CLOSE_SESSION, raw, entry)) is CloseOutcome.MORE:
                pass
        finally:
            self.tracker.forget(session_id)

    def rearm(self) -> None:
        """A new leader gives every stored session a fresh full timeout."""
        self.tracker = SessionTracker()
        now = self.clock_ms()
        for session_id, state in stored_sessions(self.replica.kv):
            # A close interrupted by a crash or failover is finished at once (as an expiry).
            self.tracker.open(
                session_id, 0 if state.closing else state.timeout_ms, now, state.owner
            )

    async def expire(self, closing: Callable[[], bool]) -> None:
        """Close expired sessions while this replica serves, until `closing()`."""
        shard_id = self.replica.shard_id
        while not closing():
            await asyncio.sleep(SESSION_CHECK_INTERVAL_S)
            if not self.replica.serving:
                continue
            for session_id in self.tracker.expired(self.clock_ms()):
                if not self.tracker.start_closing(session_id):
                    continue
                log.info("shard %d: session %d expired", shard_id, session_id)
                self.expired += 1
                # Expiry waits its turn in the log like any write; a failure leaves
                # the session for the next leader (it restarts the timeout), and
                # never ends this loop: this replica may lead again.
                try:
                    await self._close(session_id, internal_pb.EXPIRED)
                except CairnError as error:  # not leading any more, closing, ...
                    log.info(
                        "shard %d: session %d not closed here: %s", shard_id, session_id, error
                    )
                except Exception:
                    log.exception(
                        "shard %d: closing expired session %d failed", shard_id, session_id
                    )
