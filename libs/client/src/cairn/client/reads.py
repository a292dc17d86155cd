"""Batched point reads of one shard: gets queue, and whenever fewer than
`max_inflight` Read calls are out, everything queued (up to `max_batch`) goes
as one Read request. Each get's future receives its GetResponse, or a
`failures.Retry` / ClientError for the caller to act on (reads are always safe
to send again)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Any

import grpc.aio
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind

from cairn.client import errors
from cairn.client.channels import SERVICE, ChannelPool
from cairn.client.failures import Retry, classify, connection_status, server_status, settle
from cairn.common import tracing
from cairn.proto import oxia_client_pb2 as pb


class ReadOp:
    __slots__ = ("future", "message", "trace")

    def __init__(self, message: pb.GetRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.message = message
        # The caller's trace context (tracing on, its span sampled): the Read call
        # that carries this get is traced, as a child of the first such caller.
        self.trace: Context | None = None
        self.future: asyncio.Future[Any] = loop.create_future()


class ShardReader:
    def __init__(
        self,
        shard: int,
        pool: ChannelPool,
        leader_of: Callable[[int], str | None],
        max_batch: int,
        max_inflight: int,
        max_pending: int,
        answer_timeout_s: float,
    ) -> None:
        self.shard = shard
        # The deadline of each Read call (a hung server fails it; callers retry).
        self._answer_timeout_s = answer_timeout_s
        self._pool = pool
        self._leader_of = leader_of
        self._max_batch = max_batch
        self._max_inflight = max_inflight
        self._max_pending = max_pending
        self._queue: collections.deque[ReadOp] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False

    def try_submit(self, op: ReadOp) -> bool:
        """Queue the get if there is room (the common case, without awaiting)."""
        if len(self._queue) >= self._max_pending or self._closed:
            return False
        self._queue.append(op)
        self._send_more()
        return True

    async def submit(self, op: ReadOp) -> None:
        while len(self._queue) >= self._max_pending:
            self._room.clear()
            await self._room.wait()
        if self._closed:
            raise errors.ClientClosed("the client is closed")
        self._queue.append(op)
        self._send_more()

    def _send_more(self) -> None:
        while self._queue and len(self._inflight) < self._max_inflight:
            count = min(len(self._queue), self._max_batch)
            batch = [self._queue.popleft() for _ in range(count)]
            task = asyncio.create_task(self._read(batch))
            self._inflight.add(task)
            task.add_done_callback(self._done)
        if len(self._queue) < self._max_pending:
            self._room.set()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not self._closed:
            self._send_more()

    async def _read(self, batch: list[ReadOp]) -> None:
        if tracing.ENABLED:
            traced = [op.trace for op in batch if op.trace is not None]
            if traced:
                # One CLIENT span per Read call (never per get): the first traced
                # caller is its parent, the others are linked.
                with tracing.tracer().start_as_current_span(
                    f"{SERVICE}/Read",
                    context=traced[0],
                    kind=SpanKind.CLIENT,
                    links=tracing.links_to(traced[1:]),
                    attributes={
                        "rpc.system": "grpc",
                        "rpc.service": SERVICE,
                        "rpc.method": "Read",
                        "cairn.shard": self.shard,
                        "cairn.gets": len(batch),
                    },
                ) as span:
                    await self._call(batch, tracing.metadata_for(span))
                return
        await self._call(batch, None)

    async def _call(self, batch: list[ReadOp], metadata: list[tuple[str, str]] | None) -> None:
        address = self._leader_of(self.shard)
        if address is None:
            outcome: Any = Retry(connection_status(f"shard {self.shard} has no leader yet"))
            for op in batch:
                settle(op.future, outcome)
            return
        answered = 0
        try:
            call = self._pool.stubs(address).read(
                pb.ReadRequest(shard=self.shard, gets=[op.message for op in batch]),
                timeout=self._answer_timeout_s,
                metadata=metadata,
            )
            async for response in call:
                for get in response.gets:
                    if answered < len(batch):
                        settle(batch[answered].future, get)
                    answered += 1
            if answered != len(batch):
                outcome = Retry(connection_status("the read answered too few gets"))
            else:
                return
        except grpc.aio.AioRpcError as error:
            outcome = classify(server_status(error), sent=False)
        except RuntimeError as error:  # the pool is closed
            outcome = errors.ClientClosed(str(error))
        except asyncio.CancelledError:
            for op in batch[answered:]:
                settle(op.future, errors.ClientClosed("the client is closed"))
            raise
        for op in batch[answered:]:
            settle(op.future, outcome)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._inflight):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        closed = errors.ClientClosed("the client is closed")
        while self._queue:
            settle(self._queue.popleft().future, closed)
        self._room.set()
