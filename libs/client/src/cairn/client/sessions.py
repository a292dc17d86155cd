"""The client's own sessions, one per shard, created on the first ephemeral write
there and kept alive until the client closes.

A keep-alive goes every `heartbeat_interval_s(timeout)`; one that fails for a
transient reason (leader moving) is retried until the session's timeout has
passed since the last success. A session the server no longer knows is gone,
and its ephemeral records with it: the next ephemeral write makes a new one
(writes that raced with the loss fail with SessionExpired).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from cairn.client import errors

log = logging.getLogger(__name__)

MIN_HEARTBEAT_INTERVAL_S = 0.5


def heartbeat_interval_s(timeout_ms: int) -> float:
    """A tenth of the timeout, as Oxia clients do, but never less than half a second
    and always at least three heartbeats per timeout."""
    timeout_s = timeout_ms / 1000
    return min(max(timeout_s / 10, MIN_HEARTBEAT_INTERVAL_S), timeout_s / 3)


class ManagedSession:
    def __init__(
        self,
        shard: int,
        session_id: int,
        timeout_ms: int,
        keep_alive: Callable[[int, int], Awaitable[None]],
    ) -> None:
        self.shard = shard
        self.session_id = session_id
        self.timeout_ms = timeout_ms
        self.lost = False
        self._keep_alive = keep_alive
        self._task = asyncio.create_task(self._heartbeat(), name=f"session:{shard}:{session_id}")

    async def _heartbeat(self) -> None:
        interval_s = heartbeat_interval_s(self.timeout_ms)
        last_success_s = time.monotonic()
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._keep_alive(self.shard, self.session_id)
                last_success_s = time.monotonic()
            except errors.SessionExpired:
                log.warning("session %d of shard %d expired", self.session_id, self.shard)
                self.lost = True
                return
            except Exception as error:
                if not isinstance(error, errors.ClientError):
                    # Unforeseen, but retried like a transient failure: a heartbeat
                    # that ended here would let the session expire on the server
                    # without `lost` ever saying so.
                    log.exception(
                        "session %d of shard %d: keep-alive failed", self.session_id, self.shard
                    )
                if time.monotonic() - last_success_s > self.timeout_ms / 1000:
                    log.warning(
                        "session %d of shard %d: no keep-alive got through for its whole "
                        "timeout (%s); taking it as expired",
                        self.session_id,
                        self.shard,
                        error,
                    )
                    self.lost = True
                    return

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class SessionManager:
    def __init__(
        self,
        create: Callable[[int], Awaitable[int]],
        keep_alive: Callable[[int, int], Awaitable[None]],
        close: Callable[[int, int], Awaitable[None]],
        timeout_ms: int,
    ) -> None:
        self._create = create
        self._keep_alive = keep_alive
        self._close = close
        self._timeout_ms = timeout_ms
        self._sessions: dict[int, ManagedSession] = {}
        self._creating: dict[int, asyncio.Future[ManagedSession]] = {}

    async def session_for(self, shard: int) -> int:
        """The id of this client's live session on the shard, made if needed."""
        session = self._sessions.get(shard)
        if session is not None and not session.lost:
            return session.session_id
        pending = self._creating.get(shard)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._creating[shard] = pending
            try:
                session_id = await self._create(shard)
                made = ManagedSession(shard, session_id, self._timeout_ms, self._keep_alive)
                old = self._sessions.pop(shard, None)
                if old is not None:
                    await old.stop()
                self._sessions[shard] = made
                pending.set_result(made)
            except BaseException as error:
                pending.set_exception(error)
                # Others waiting see the failure; nobody else retrieves it here.
                pending.exception()
                raise
            finally:
                del self._creating[shard]
        return (await asyncio.shield(pending)).session_id

    def forget(self, shard: int, session_id: int) -> None:
        """The server no longer knows this session: the next ephemeral write makes a new one."""
        session = self._sessions.get(shard)
        if session is not None and session.session_id == session_id:
            session.lost = True

    async def close(self) -> None:
        """Close every session (deleting its ephemeral records) on a best-effort basis."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.stop()
        results = await asyncio.gather(
            *(self._close(s.shard, s.session_id) for s in sessions if not s.lost),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, errors.SessionExpired):
                log.info("closing a session failed: %s", result)
