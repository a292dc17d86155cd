"""Sessions for `ephemeral`: opened before the phase, kept alive through it, closed after.

`per_shard` sessions on every shard (as many clients would each hold one), each
with its own client identity. They are kept alive by one KeepAlive per session
every `keep_alive_interval_s` (a tenth of the timeout: a late heartbeat or two
cannot expire a session mid-run), from this process's loop, whichever process
drives the puts. At the end every session is closed at once, and the time that
takes is a figure: closing deletes the session's ephemeral records, all of them in
one log entry. Then one KeepAlive per session checks it is really gone (NOT_FOUND).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from cairn.bench.storage.rpc import (
    METHOD_CLOSE_SESSION,
    METHOD_CREATE_SESSION,
    METHOD_KEEP_ALIVE,
    Channels,
    ShardInfo,
    describe,
)
from cairn.bench.storage.specs import SessionRef
from cairn.proto import oxia_client_pb2 as pb

SESSION_TIMEOUT_MS = 30_000
KEEP_ALIVE_INTERVAL_S = 3.0
MAX_SESSIONS_PER_SHARD = 256
MAX_SESSIONS = 4096


@dataclass(slots=True)
class SessionFigures:
    sessions: int = 0
    create_s: float = 0.0  # opening them all (at once)
    keep_alives: int = 0
    keep_alive_errors: int = 0
    close_s: float = 0.0  # closing them all (at once)
    close_max_ms: float = 0.0  # the slowest single CloseSession
    close_errors: int = 0
    left_open: int = 0  # sessions a KeepAlive still found after they were closed
    first_error: str | None = None

    @property
    def errors(self) -> int:
        return self.keep_alive_errors + self.close_errors + self.left_open

    def note(self, error: BaseException) -> None:
        if self.first_error is None:
            self.first_error = describe(error)


def _method(channel: grpc.aio.Channel, name: str, response: Any) -> Any:
    return channel.unary_unary(
        name,
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=response.FromString,
    )


class SessionHold:
    """The sessions of one ephemeral phase. Use `open`, `start_keep_alive`, `close`."""

    def __init__(
        self,
        shards: Sequence[ShardInfo],
        per_shard: int,
        rpc_timeout_s: float,
        timeout_ms: int = SESSION_TIMEOUT_MS,
        keep_alive_interval_s: float = KEEP_ALIVE_INTERVAL_S,
    ) -> None:
        if not 1 <= per_shard <= MAX_SESSIONS_PER_SHARD:
            raise ValueError(f"sessions per shard must be in [1, {MAX_SESSIONS_PER_SHARD}]")
        if per_shard * len(shards) > MAX_SESSIONS:
            raise ValueError(f"sessions x shards must not exceed {MAX_SESSIONS}")
        self._shards = list(shards)
        self._per_shard = per_shard
        self._rpc_timeout_s = rpc_timeout_s
        self._timeout_ms = timeout_ms
        self._interval_s = keep_alive_interval_s
        self._channels = Channels(1)
        self._leaders = {shard.shard_id: shard.leader for shard in shards}
        self.sessions: list[SessionRef] = []
        self.figures = SessionFigures()
        self._keep_alive_task: asyncio.Task[None] | None = None

    def _call(self, shard_id: int, name: str, response: Any) -> Any:
        return _method(self._channels.get(self._leaders[shard_id]), name, response)

    async def open(self) -> list[SessionRef]:
        """Create every session, all at once; raises if any fails (nothing to measure)."""
        started_s = time.monotonic()
        await self._channels.ready(self._rpc_timeout_s)
        prefix = f"cairn-bench-{os.getpid()}"

        async def create(shard_id: int, index: int) -> SessionRef:
            identity = f"{prefix}/{shard_id}/{index}"
            request = pb.CreateSessionRequest(
                shard=shard_id, session_timeout_ms=self._timeout_ms, client_identity=identity
            )
            method = self._call(shard_id, METHOD_CREATE_SESSION, pb.CreateSessionResponse)
            response = await method(request, timeout=self._rpc_timeout_s)
            return SessionRef(shard_id, int(response.session_id), identity)

        creations = [
            create(shard.shard_id, index)
            for shard in self._shards
            for index in range(self._per_shard)
        ]
        results = await asyncio.gather(*creations, return_exceptions=True)
        self.sessions = [r for r in results if isinstance(r, SessionRef)]
        self.figures.sessions = len(self.sessions)
        self.figures.create_s = time.monotonic() - started_s
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise RuntimeError(f"CreateSession failed: {describe(failures[0])}")
        return self.sessions

    def start_keep_alive(self) -> None:
        self._keep_alive_task = asyncio.create_task(self._keep_alive_loop())

    async def _keep_alive_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            outcomes = await self._each(self._keep_alive)
            for outcome in outcomes:
                self.figures.keep_alives += 1
                if isinstance(outcome, BaseException):
                    self.figures.keep_alive_errors += 1
                    self.figures.note(outcome)

    async def _keep_alive(self, session: SessionRef) -> None:
        method = self._call(session.shard_id, METHOD_KEEP_ALIVE, pb.KeepAliveResponse)
        request = pb.SessionHeartbeat(shard=session.shard_id, session_id=session.session_id)
        await method(request, timeout=self._rpc_timeout_s)

    async def _each(
        self, action: Callable[[SessionRef], Awaitable[Any]]
    ) -> list[Any | BaseException]:
        return list(
            await asyncio.gather(*(action(s) for s in self.sessions), return_exceptions=True)
        )

    async def _stop_keep_alive(self) -> None:
        task, self._keep_alive_task = self._keep_alive_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> SessionFigures:
        """Stop the heartbeats, close every session at once (timed), check they are gone."""
        await self._stop_keep_alive()
        figures = self.figures
        close_ms: list[float] = []

        async def close_one(session: SessionRef) -> None:
            started_s = time.monotonic()
            method = self._call(session.shard_id, METHOD_CLOSE_SESSION, pb.CloseSessionResponse)
            request = pb.CloseSessionRequest(shard=session.shard_id, session_id=session.session_id)
            await method(request, timeout=self._rpc_timeout_s)
            close_ms.append((time.monotonic() - started_s) * 1000.0)

        started_s = time.monotonic()
        for outcome in await self._each(close_one):
            if isinstance(outcome, BaseException):
                figures.close_errors += 1
                figures.note(outcome)
        figures.close_s = time.monotonic() - started_s
        figures.close_max_ms = max(close_ms, default=0.0)
        for outcome in await self._each(self._keep_alive):
            gone = (
                isinstance(outcome, grpc.aio.AioRpcError)
                and outcome.code() == grpc.StatusCode.NOT_FOUND
            )
            if not gone:
                figures.left_open += 1
                if isinstance(outcome, BaseException):
                    figures.note(outcome)
        self.sessions = []
        return figures

    async def release(self) -> None:
        """On any exit: no heartbeats, no channels (sessions not closed expire)."""
        await self._stop_keep_alive()
        await self._channels.close()
