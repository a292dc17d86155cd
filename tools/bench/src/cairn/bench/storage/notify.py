"""`notify`: change-notification subscribers next to a put load, matched by offset.

`subscribers` subscribers, each on its own channel (its own TCP connection, as
separate clients would be), each with one GetNotifications stream per shard. A
stream is opened without a start offset, so the server first sends an empty batch
at the shard's commit offset: the window starts once every stream has had it, so
no write of the window can precede a subscription. The writer is the put load
(`load.py`); the probe observes each answered write (`observe`) and each received
batch, and the ledger (`ledger.py`) matches the two and keeps the figures.

Everything runs in this process's asyncio loop (grpc.aio), next to the writer:
the client's CPU is shared between them, and `client_cores` in the output shows
how much of it the run used.

After the writer finishes (its own bounded drain), the subscribers get at most
`drain_s` more to reach the last offset written on their shard, and stop as soon
as they all have; then the streams are cancelled and the figures taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import grpc.aio

from cairn.bench.storage.ledger import DeliveryLedger, DeliveryStats
from cairn.bench.storage.pools import distinct_put_keys, entry_offset
from cairn.bench.storage.rpc import METHOD_NOTIFICATIONS, Channels, ShardInfo, describe
from cairn.bench.storage.timing import Window
from cairn.proto import oxia_client_pb2 as pb

MAX_SUBSCRIBERS = 256
MAX_STREAMS = 4096  # subscribers x shards
# How often `start` looks whether every stream is open, and `finish` whether every
# stream has caught up: short against any lag worth measuring, cheap for the loop.
CATCH_UP_POLL_S = 0.005


@dataclass(slots=True)
class _Stream:
    subscriber: int
    shard_id: int
    call: grpc.aio.UnaryStreamCall | None = None
    task: asyncio.Task[None] | None = None
    position: int = -1  # offset of the last batch received
    subscribed: bool = False


@dataclass(slots=True)
class NotifyResult:
    stats: DeliveryStats
    shards: int
    streams: int
    stream_errors: int
    first_error: str | None
    window_bytes: int  # serialized batches received in the window, all streams
    subscribe_s: float  # opening every stream up to its first batch
    drain_s: float  # from the writer's end to every stream caught up (or the bound)
    caught_up: bool

    def notifications_per_s(self, window_s: float) -> float:
        return self.stats.window_entries / window_s if window_s > 0 else 0.0

    def batches_per_s(self, window_s: float) -> float:
        return self.stats.window_batches / window_s if window_s > 0 else 0.0

    def bytes_per_s(self, window_s: float) -> float:
        return self.window_bytes / window_s if window_s > 0 else 0.0


class NotifyProbe:
    """The subscribers of a notify phase, and the observer of its writes (a Companion)."""

    def __init__(
        self,
        shards: Sequence[ShardInfo],
        subscribers: int,
        drain_s: float,
        stream_timeout_s: float,
        watch_prefix: str | None = None,
    ) -> None:
        """`watch_prefix`: subscriber i asks only for keys with the prefix
        `watch_prefix.format(i=i)` (filtered on the server); its batches then hold
        fewer changes than the writes made, so only their bytes and count are
        measured, not their delivery."""
        if not 1 <= subscribers <= MAX_SUBSCRIBERS:
            raise ValueError(f"subscribers must be in [1, {MAX_SUBSCRIBERS}]")
        if subscribers * len(shards) > MAX_STREAMS:
            raise ValueError(f"subscribers x shards must not exceed {MAX_STREAMS}")
        self._shards = list(shards)
        self._subscribers = subscribers
        self._drain_s = drain_s
        self._stream_timeout_s = stream_timeout_s
        self._channels = [Channels(1) for _ in range(subscribers)]
        self._streams = [
            _Stream(index, shard.shard_id) for index in range(subscribers) for shard in shards
        ]
        self._ledger: DeliveryLedger | None = None
        # request bytes -> (shard id, keys it changes); requests come from the load's
        # pool, so this holds at most one entry per pooled request
        self._requests: dict[bytes, tuple[int, int]] = {}
        self._stopping = False
        self._stream_errors = 0
        self._first_error: str | None = None
        self._subscribe_s = 0.0
        self._drain_took_s = 0.0
        self._caught_up = False
        self._watch_prefix = watch_prefix
        self._window: Window | None = None
        self._window_bytes = 0
        self._unmatched = DeliveryStats(subscribers)

    # ---- Companion ------------------------------------------------------------------

    async def start(self, timeout_s: float) -> None:
        """Open every stream and wait for its first (empty) batch, within `timeout_s`."""
        started_s = time.monotonic()
        leaders = {shard.shard_id: shard.leader for shard in self._shards}
        for channels in self._channels:
            for leader in set(leaders.values()):
                channels.get(leader)
            await channels.ready(timeout_s)
        request = pb.NotificationsRequest
        for stream in self._streams:
            channel = self._channels[stream.subscriber].get(leaders[stream.shard_id])
            method = channel.unary_stream(METHOD_NOTIFICATIONS)
            subscription = request(shard=stream.shard_id)
            if self._watch_prefix is not None:
                subscription.key_prefixes.append(self._watch_prefix.format(i=stream.subscriber))
            raw = subscription.SerializeToString()
            stream.call = method(raw, timeout=self._stream_timeout_s)
            stream.task = asyncio.create_task(self._read(stream))
        deadline_s = started_s + timeout_s
        while not all(s.subscribed for s in self._streams):
            if self._first_error is not None:
                raise RuntimeError(f"a notification stream failed: {self._first_error}")
            if time.monotonic() > deadline_s:
                raise RuntimeError(f"notification streams not all open after {timeout_s:g} s")
            await asyncio.sleep(CATCH_UP_POLL_S)
        self._subscribe_s = time.monotonic() - started_s

    def begin(self, window: Window) -> None:
        self._window = window
        if self._watch_prefix is None:
            self._ledger = DeliveryLedger(self._subscribers, window.measure_start_s, window.end_s)

    async def finish(self) -> None:
        """Give the streams at most drain_s to reach the last offset written, then stop."""
        started_s = time.monotonic()
        deadline_s = started_s + self._drain_s
        while True:
            self._caught_up = self._all_caught_up()
            if self._caught_up or time.monotonic() >= deadline_s:
                break
            await asyncio.sleep(CATCH_UP_POLL_S)
        self._drain_took_s = time.monotonic() - started_s
        await self._stop()

    async def close(self) -> None:
        await self._stop()
        for channels in self._channels:
            await channels.close()

    # ---- the writer's side ----------------------------------------------------------

    def observe(
        self,
        request: bytes,
        response: bytes,
        start_s: float,
        sent_s: float | None,
        answered_s: float,
    ) -> None:
        """An answered put request (an AnswerObserver): give the ledger its offset.

        Every put of a bench request succeeds or the first one says why not (no
        expected versions, no sessions here), so an offset means all its keys changed.
        """
        ledger = self._ledger
        if ledger is None:
            return
        offset = entry_offset(response)
        if offset is None:
            return
        known = self._requests.get(request)
        if known is None:
            shard_id = int(pb.WriteRequest.FromString(request).shard)
            known = (shard_id, distinct_put_keys(request))
            self._requests[request] = known
        shard_id, keys = known
        sent = start_s if sent_s is None else sent_s
        ledger.written(shard_id, offset, sent, answered_s, keys, ledger.counts(start_s))

    # ---- the subscribers' side ------------------------------------------------------

    async def _read(self, stream: _Stream) -> None:
        call = stream.call
        assert call is not None
        shard_id = stream.shard_id
        parse = pb.NotificationBatch.FromString
        try:
            while True:
                raw = await call.read()
                if raw is grpc.aio.EOF:
                    raise RuntimeError(f"shard {shard_id}: notification stream ended")
                received_s = time.monotonic()
                batch = parse(raw)
                stream.position = batch.offset
                if not stream.subscribed:
                    stream.subscribed = True  # the empty batch at the commit offset
                    continue
                window = self._window
                if window is not None and window.measure_start_s <= received_s < window.end_s:
                    self._window_bytes += len(raw)
                    if self._ledger is None:  # filtered: counted here, not matched
                        self._unmatched.window_batches += 1
                        self._unmatched.window_entries += len(batch.notifications)
                ledger = self._ledger
                if ledger is not None:
                    ledger.received(shard_id, batch.offset, len(batch.notifications), received_s)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        except Exception as error:
            if not self._stopping:
                self._stream_errors += 1
                if self._first_error is None:
                    self._first_error = describe(error)

    def _all_caught_up(self) -> bool:
        ledger = self._ledger
        if ledger is None:
            return True
        for stream in self._streams:
            last = ledger.last_offset.get(stream.shard_id)
            if last is not None and stream.position < last:
                if stream.task is not None and stream.task.done():
                    continue  # a failed stream will not catch up; counted as an error
                return False
        return True

    async def _stop(self) -> None:
        self._stopping = True
        for stream in self._streams:
            if stream.call is not None:
                stream.call.cancel()
            if stream.task is not None:
                stream.task.cancel()
        for stream in self._streams:
            if stream.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await stream.task

    def result(self) -> NotifyResult:
        ledger = self._ledger
        stats = ledger.stats if ledger is not None else self._unmatched
        return NotifyResult(
            stats=stats,
            shards=len(self._shards),
            streams=len(self._streams),
            stream_errors=self._stream_errors,
            first_error=self._first_error,
            window_bytes=self._window_bytes,
            subscribe_s=self._subscribe_s,
            drain_s=self._drain_took_s,
            caught_up=self._caught_up,
        )
