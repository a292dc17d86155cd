"""Batched writes to one shard over a WriteStream.

Operations queue per shard. A writer task sends everything queued (within the
batch bounds) as one WriteRequest whenever the stream has fewer than
`max_inflight` requests unanswered, so batches grow with the load and a lone
operation goes at once. Answers come back in request order and are matched to
their operations.

When the stream breaks, its first unanswered request gets the server's verdict
(`failures.classify`); every later one is ambiguous, since the server may have
logged it before the stream ended. A request the server refused as invalid is
never partly applied: its operations are sent again one per request, so only
the offending one fails. Each operation's future receives its response message
or a `failures.Retry` / ClientError; the caller decides on retries.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, StatusCode

from cairn.client import errors
from cairn.client.channels import NAMESPACE_HEADER, SERVICE, SHARD_ID_HEADER, ChannelPool
from cairn.client.failures import Retry, classify, connection_status, server_status, settle
from cairn.common import tracing
from cairn.proto import oxia_client_pb2 as pb

log = logging.getLogger(__name__)

PUT, DELETE, DELETE_RANGE = 0, 1, 2
# Answers to at least this many operations wake their callers in two halves.
_MIN_SPLIT_OPS = 8
# Per-operation overhead in a WriteRequest beyond key and value (tags, lengths,
# version fields): an over-estimate keeps batches under the byte bound.
_OP_OVERHEAD_BYTES = 32


class WriteOp:
    __slots__ = ("future", "kind", "message", "size_bytes", "solo", "trace")

    def __init__(
        self, kind: int, message: Any, size_bytes: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.kind = kind
        self.message = message
        self.size_bytes = size_bytes + _OP_OVERHEAD_BYTES
        # Sent alone: after its batch was refused as invalid, to find the culprit.
        self.solo = False
        # The caller's trace context, when tracing is on and its span is sampled:
        # the operation then goes in a request of its own (`ShardWriter._send_traced`).
        self.trace: Context | None = None
        self.future: asyncio.Future[Any] = loop.create_future()

    def again(self, loop: asyncio.AbstractEventLoop) -> WriteOp:
        """The same operation for another attempt (a new future; still alone if it
        had to be)."""
        op = WriteOp(self.kind, self.message, 0, loop)
        op.size_bytes, op.solo, op.trace = self.size_bytes, self.solo, self.trace
        return op


class _Batch:
    __slots__ = ("deletes", "puts", "ranges", "watchdog")

    def __init__(self) -> None:
        self.puts: list[WriteOp] = []
        self.deletes: list[WriteOp] = []
        self.ranges: list[WriteOp] = []
        self.watchdog: asyncio.TimerHandle | None = None

    def add(self, op: WriteOp) -> None:
        (self.puts, self.deletes, self.ranges)[op.kind].append(op)

    def size(self) -> int:
        return len(self.puts) + len(self.deletes) + len(self.ranges)

    def ops(self) -> list[WriteOp]:
        return self.puts + self.deletes + self.ranges

    def request(self, shard: int) -> pb.WriteRequest:
        return pb.WriteRequest(
            shard=shard,
            puts=[op.message for op in self.puts],
            deletes=[op.message for op in self.deletes],
            delete_ranges=[op.message for op in self.ranges],
        )


class _Stream:
    """One open WriteStream to a leader and its unanswered batches."""

    def __init__(self, address: str, call: Any) -> None:
        self.address = address
        self.call = call
        self.inflight: collections.deque[_Batch] = collections.deque()
        self.inflight_ops = 0
        self.broken = False
        # Resolved when the stream breaks (wakes a writer blocked sending on it).
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reader: asyncio.Task[None] | None = None


class ShardWriter:
    def __init__(
        self,
        shard: int,
        namespace: str,
        pool: ChannelPool,
        leader_of: Callable[[int], str | None],
        max_batch_ops: int,
        max_batch_bytes: int,
        max_inflight: int,
        max_pending_ops: int,
        linger_s: float,
        answer_timeout_s: float,
    ) -> None:
        self.shard = shard
        # A request unanswered this long breaks its stream (its operations are then
        # ambiguous and retried by their callers, whose deadlines end the wait): one
        # timer per request rather than one per operation.
        self._answer_timeout_s = answer_timeout_s
        self._loop = asyncio.get_running_loop()
        self._namespace = namespace
        self._pool = pool
        self._leader_of = leader_of
        self._max_batch_ops = max_batch_ops
        self._max_batch_bytes = max_batch_bytes
        self._max_inflight = max_inflight
        self._max_pending_ops = max_pending_ops
        self._linger_s = linger_s
        self._queue: collections.deque[WriteOp] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()
        self._wake = asyncio.Event()
        self._stream: _Stream | None = None
        self._closed = False
        self._task = asyncio.create_task(self._run(), name=f"writer:{shard}")

    def try_submit(self, op: WriteOp) -> bool:
        """Queue the operation if there is room (the common case, without awaiting)."""
        if len(self._queue) >= self._max_pending_ops or self._closed:
            return False
        self._queue.append(op)
        self._wake.set()
        return True

    async def submit(self, op: WriteOp) -> None:
        """Queue the operation (waiting for room); its future gets the outcome."""
        while len(self._queue) >= self._max_pending_ops:
            self._room.clear()
            await self._room.wait()
        if self._closed:
            raise errors.ClientClosed("the client is closed")
        self._queue.append(op)
        self._wake.set()

    def leader_changed(self) -> None:
        """The shard map moved: a stream to a former leader is closed at once (its
        unanswered writes are ambiguous and go to the new leader)."""
        stream = self._stream
        if stream is not None and self._leader_of(self.shard) != stream.address:
            self._break(stream, connection_status("the shard's leader moved"), cancel=True)
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._stream is not None:
            self._break(self._stream, connection_status("the client is closed"), cancel=True)
        closed = errors.ClientClosed("the client is closed")
        while self._queue:
            settle(self._queue.popleft().future, closed)
        self._room.set()

    # ---- the writer task ------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            stream = self._stream
            if not self._ready(stream):
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._linger_s > 0 and len(self._queue) < self._max_batch_ops:
                await asyncio.sleep(self._linger_s)
            if stream is None or stream.broken:
                stream = self._open()
                if stream is None:
                    continue
            batch = self._take()
            if not (batch.puts or batch.deletes or batch.ranges):
                continue  # everything taken had expired
            if batch.ops()[0].trace is not None:
                await self._send_traced(stream, batch)
                continue
            stream.inflight.append(batch)
            stream.inflight_ops += batch.size()
            batch.watchdog = self._loop.call_later(
                self._answer_timeout_s, self._overdue, stream, batch
            )
            # A write pending on a call that ends (cancelled because the leader
            # moved, or failed) may never complete: wait for whichever comes first.
            sending = asyncio.ensure_future(stream.call.write(batch.request(self.shard)))
            try:
                await asyncio.wait((sending, stream.ended), return_when=asyncio.FIRST_COMPLETED)
                if not sending.done():
                    sending.cancel()
                    continue
                sending.result()
            except asyncio.CancelledError:
                sending.cancel()
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the writer itself is closing
                # grpc raises CancelledError from a write whose call was cancelled.
                self._break(stream, connection_status("the write stream was cancelled"))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError) as error:
                # The stream ended before this request left: the reader fails what
                # was unanswered; this batch is failed the same way.
                log.debug("shard %d: write to %s failed: %r", self.shard, stream.address, error)
                self._break(stream, connection_status(f"write stream failed: {error}"), cancel=True)
            except Exception:
                # Never let the writer die: every later write of the shard would hang.
                log.exception("shard %d: unexpected failure sending a write", self.shard)
                self._break(stream, connection_status("the write could not be sent"), cancel=True)

    async def _send_traced(self, stream: _Stream, batch: _Batch) -> None:
        """Send a traced caller's operation as a unary Write, whose metadata carries
        the trace context (a WriteStream has metadata once, for all its requests),
        under a CLIENT span. Writes keep their order: it waits for the stream's
        unanswered requests first, and the writer sends nothing else meanwhile."""
        ops = batch.ops()
        outcomes: list[tuple[WriteOp, Any]]
        try:
            while stream.inflight and not stream.broken:
                self._wake.clear()
                await self._wake.wait()
            with tracing.tracer().start_as_current_span(
                f"{SERVICE}/Write",
                context=ops[0].trace,
                kind=SpanKind.CLIENT,
                attributes={
                    "rpc.system": "grpc",
                    "rpc.service": SERVICE,
                    "rpc.method": "Write",
                    "server.address": stream.address,
                    "cairn.shard": self.shard,
                },
            ) as span:
                try:
                    async with asyncio.timeout(self._answer_timeout_s):
                        response = await self._pool.stubs(stream.address).write(
                            batch.request(self.shard), metadata=tracing.metadata_for(span)
                        )
                    outcomes = self._resolve(batch, response)
                except grpc.aio.AioRpcError as error:
                    span.set_status(StatusCode.ERROR, error.code().name)
                    outcome = classify(server_status(error), sent=True)
                    outcomes = [(op, outcome) for op in ops]
                except TimeoutError:
                    span.set_status(StatusCode.ERROR, "no answer in time")
                    outcome = Retry(connection_status("no answer in time"), ambiguous=True)
                    outcomes = [(op, outcome) for op in ops]
        except asyncio.CancelledError:  # the writer is closing
            for op in ops:
                settle(op.future, errors.ClientClosed("the client is closed"))
            raise
        except RuntimeError as error:  # the pool is closed
            outcomes = [(op, errors.ClientClosed(str(error))) for op in ops]
        except Exception:
            # Never let the writer die: every later write of the shard would hang.
            log.exception("shard %d: unexpected failure sending a traced write", self.shard)
            unsent = Retry(connection_status("the write could not be sent"), ambiguous=True)
            outcomes = [(op, unsent) for op in ops]
        for op, outcome in outcomes:
            settle(op.future, outcome)
        self._wake.set()

    def _ready(self, stream: _Stream | None) -> bool:
        """Whether to send a batch now. With nothing in flight: as soon as anything
        is queued. With a batch in flight (and room for another): once at least half
        as many operations wait as are in flight. Callers that each wait for their
        write would otherwise move in lockstep, one batch at a time, with this
        process and the server taking turns; two half batches keep both busy."""
        queued = len(self._queue)
        if not queued:
            return False
        if stream is None or stream.broken or not stream.inflight:
            return True
        if len(stream.inflight) >= self._max_inflight:
            return False
        return queued * 2 >= stream.inflight_ops or queued >= self._max_batch_ops

    def _take(self) -> _Batch:
        batch = _Batch()
        queue = self._queue
        if queue[0].solo or queue[0].trace is not None:
            batch.add(queue.popleft())
        else:
            count = 0
            size = 0
            limit_ops, limit_bytes = self._max_batch_ops, self._max_batch_bytes
            while queue and count < limit_ops and not queue[0].solo and queue[0].trace is None:
                op = queue[0]
                if count and size + op.size_bytes > limit_bytes:
                    break
                queue.popleft()
                if op.future.done():
                    continue  # its caller gave up (deadline) before it was sent
                batch.add(op)
                count += 1
                size += op.size_bytes
        if len(queue) < self._max_pending_ops:
            self._room.set()
        return batch

    def _open(self) -> _Stream | None:
        """A stream to the shard's leader; with none known, every queued operation
        is told to retry (after the caller's backoff, a new map may know one)."""
        address = self._leader_of(self.shard)
        if address is None:
            self._fail_queued(Retry(connection_status(f"shard {self.shard} has no leader yet")))
            return None
        try:
            call = self._pool.stubs(address).write_stream(
                metadata=((SHARD_ID_HEADER, str(self.shard)), (NAMESPACE_HEADER, self._namespace))
            )
        except RuntimeError as error:  # the pool is closed
            self._fail_queued(errors.ClientClosed(str(error)))
            return None
        stream = _Stream(address, call)
        stream.reader = asyncio.create_task(self._read(stream), name=f"writer-read:{self.shard}")
        self._stream = stream
        return stream

    def _fail_queued(self, outcome: Any) -> None:
        while self._queue:
            settle(self._queue.popleft().future, outcome)
        self._room.set()

    async def _read(self, stream: _Stream) -> None:
        try:
            while True:
                response = await stream.call.read()
                if response is grpc.aio.EOF:
                    self._break(stream, connection_status("the server ended the write stream"))
                    return
                if not stream.inflight:
                    self._break(stream, connection_status("an answer to no request"))
                    return
                batch = stream.inflight.popleft()
                stream.inflight_ops -= batch.size()
                if batch.watchdog is not None:
                    batch.watchdog.cancel()
                settled = self._resolve(batch, response)
                self._wake.set()
                if len(settled) >= _MIN_SPLIT_OPS and self._max_inflight > 1:
                    # Wake the first half of the writers, let the writer task send
                    # what they queued, then wake the rest: see `_ready`.
                    half = len(settled) // 2
                    for op, outcome in settled[:half]:
                        settle(op.future, outcome)
                    await asyncio.sleep(0)
                    settled = settled[half:]
                for op, outcome in settled:
                    settle(op.future, outcome)
        except grpc.aio.AioRpcError as error:
            self._break(stream, server_status(error))
        except asyncio.CancelledError:
            self._break(stream, connection_status("the write stream was cancelled"))

    @staticmethod
    def _resolve(batch: _Batch, response: pb.WriteResponse) -> list[tuple[WriteOp, Any]]:
        """Each operation of the batch with its answer."""
        settled: list[tuple[WriteOp, Any]] = []
        answers: tuple[Any, Any, Any] = (response.puts, response.deletes, response.delete_ranges)
        for ops, results in zip((batch.puts, batch.deletes, batch.ranges), answers, strict=True):
            if len(results) != len(ops):
                ambiguous = Retry(connection_status("a malformed answer"), ambiguous=True)
                settled.extend((op, ambiguous) for op in ops)
                continue
            settled.extend(zip(ops, results, strict=True))
        return settled

    def _overdue(self, stream: _Stream, batch: _Batch) -> None:
        if batch in stream.inflight:
            log.warning(
                "shard %d: no answer from %s within %.1f s; reconnecting",
                self.shard,
                stream.address,
                self._answer_timeout_s,
            )
            self._break(stream, connection_status("no answer in time"), cancel=True)

    def _break(self, stream: _Stream, status: Any, cancel: bool = False) -> None:
        if stream.broken:
            return
        stream.broken = True
        if not stream.ended.done():
            stream.ended.set_result(None)
        if self._stream is stream:
            self._stream = None
        if cancel:
            stream.call.cancel()
            if stream.reader is not None and stream.reader is not asyncio.current_task():
                stream.reader.cancel()
        first = True
        while stream.inflight:
            batch = stream.inflight.popleft()
            if batch.watchdog is not None:
                batch.watchdog.cancel()
            ops = batch.ops()
            if first:
                outcome = classify(status, sent=True)
                if isinstance(outcome, errors.InvalidArgument) and len(ops) > 1:
                    # Refused before logging; find the bad operation by sending each alone.
                    for op in ops:
                        op.solo = True
                    outcome = Retry(status)
            else:
                outcome = Retry(status, ambiguous=True)
            first = False
            for op in ops:
                settle(op.future, outcome)
        self._wake.set()
