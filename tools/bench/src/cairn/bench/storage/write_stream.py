"""The pipelined put driver: requests written down one WriteStream per shard (or
several, `streams_per_shard`), answers read by a task and matched to them in order.

In-flight requests are bounded twice: per stream (its share of the load's
concurrency) and per load (the concurrency itself). Closed loop sends as soon
as a slot frees up; open loop (`schedule`) waits for each request's scheduled
time first. A stream that breaks fails its unanswered requests and is reopened
after a short backoff, until the window ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from cairn.bench.storage.pools import count_put_results
from cairn.bench.storage.rpc import METHOD_WRITE_STREAM, NAMESPACE
from cairn.bench.storage.specs import LoadSpec
from cairn.bench.storage.timing import AnswerObserver, Schedule, Tally, Window, sleep_until

STREAM_REOPEN_BACKOFF_S = 0.1


@dataclass(slots=True)
class StreamSlots:
    """In-flight bounds of one stream: its own window and the load's total."""

    stream: asyncio.Semaphore
    total: asyncio.Semaphore

    async def acquire(self) -> None:
        await self.stream.acquire()
        await self.total.acquire()

    def release(self) -> None:
        self.stream.release()
        self.total.release()


class _WriteStreamSession:
    """One open WriteStream: a writer (the caller) and a reader task, FIFO-matched."""

    def __init__(
        self,
        call: Any,
        batch: int,
        slots: StreamSlots,
        tally: Tally,
        observer: AnswerObserver | None,
    ) -> None:
        self.call = call
        self.batch = batch
        self.slots = slots
        self.tally = tally
        self.observer = observer
        # (start, sent-or-None, request) per unanswered request, in request order; the
        # request is a reference into the pool, kept for the observer.
        self.pending: collections.deque[tuple[float, float | None, bytes]] = collections.deque()
        self.error: BaseException | None = None
        self.reader = asyncio.create_task(self._read_responses())

    def fail_pending(self, error: BaseException) -> None:
        """The stream broke: every unanswered request failed."""
        if self.error is None:
            self.error = error
        now_s = time.monotonic()
        while self.pending:
            self.tally.failed(self.pending.popleft()[0], now_s, error)
            self.slots.release()

    async def _read_responses(self) -> None:
        try:
            while True:
                raw = await self.call.read()
                if raw is grpc.aio.EOF:
                    if self.pending:
                        self.fail_pending(RuntimeError("stream ended with requests unanswered"))
                    return
                now_s = time.monotonic()
                ok, failed = count_put_results(raw, self.batch)
                start_s, sent_s, request = self.pending.popleft()
                self.tally.done(start_s, sent_s, now_s, ok, failed)
                self.slots.release()
                if self.observer is not None:
                    self.observer(request, raw, start_s, sent_s, now_s)
        except Exception as error:
            self.fail_pending(error)

    async def send(self, start_s: float, sent_s: float | None, request: bytes) -> None:
        self.pending.append((start_s, sent_s, request))
        await self.call.write(request)

    async def close(self, drain_deadline_s: float) -> None:
        """Half-close, wait for the answers until the deadline, then cancel what is left."""
        try:
            if self.error is None:
                await self.call.done_writing()
            remaining_s = max(0.0, drain_deadline_s - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.reader), remaining_s)
        except Exception as error:
            self.fail_pending(error)
        finally:
            if not self.reader.done():
                self.call.cancel()
                self.fail_pending(TimeoutError("no response before the drain deadline"))
                self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
            self.call.cancel()


async def write_stream(
    channel: grpc.aio.Channel,
    shard_id: int,
    requests: Sequence[bytes],
    offset: int,
    spec: LoadSpec,
    window: Window,
    schedule: Schedule | None,
    slots: StreamSlots,
    tally: Tally,
    observer: AnswerObserver | None = None,
) -> None:
    """Pipelined WriteStream to one shard; reopened after a failure until the window ends."""
    method = channel.stream_stream(METHOD_WRITE_STREAM)
    metadata = (("shard-id", str(shard_id)), ("namespace", NAMESPACE))
    index = offset
    count = len(requests)
    while time.monotonic() < window.end_s:
        timeout_s = window.drain_deadline_s - time.monotonic() + 5.0
        session = _WriteStreamSession(
            method(metadata=metadata, timeout=timeout_s), spec.batch, slots, tally, observer
        )
        try:
            while session.error is None:
                if schedule is not None:
                    start_s = schedule.take()
                    if start_s >= window.end_s:
                        break
                    if time.monotonic() >= window.drain_deadline_s:
                        tally.unsent(1 + schedule.count_before(window.end_s))
                        break
                    await sleep_until(start_s)
                    await slots.acquire()
                    sent_s: float | None = time.monotonic()
                else:
                    await slots.acquire()
                    start_s = time.monotonic()
                    sent_s = None
                    if start_s >= window.end_s:
                        slots.release()
                        break
                if session.error is not None:
                    slots.release()
                    tally.failed(start_s, time.monotonic(), session.error)
                    break
                await session.send(start_s, sent_s, requests[index % count])
                index += 1
        except Exception as error:
            session.fail_pending(error)
        finally:
            await session.close(window.drain_deadline_s)
        if session.error is None:
            break
        await asyncio.sleep(STREAM_REOPEN_BACKOFF_S)
