"""Streams and single calls to a shard's leader, with retries: lists and range
scans (merged across shards in key order, resumed after the last key seen when a
stream breaks), notification and sequence-update feeds (resumed after the last
offset seen), and the session calls.

A stream is retried until `request_timeout_s` passes without progress: a scan
that keeps receiving keys is never cut short by the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import grpc.aio

from cairn.client import errors
from cairn.client.assignments import ShardMapFollower
from cairn.client.attempts import Attempts
from cairn.client.channels import ChannelPool
from cairn.client.failures import Retry, classify, connection_status, server_status
from cairn.client.merge import merge_sorted
from cairn.client.options import ClientOptions
from cairn.client.records import Notification, NotificationBatch, NotificationType, Record
from cairn.proto import oxia_client_pb2 as pb

# A list through a secondary index cannot be merged as it streams (each shard
# answers in secondary-key order with primary keys only), so it is gathered and
# sorted: at most this many keys.
MAX_INDEX_LIST_KEYS = 100_000
# Notification batches received but not yet taken by the consumer, over all shards.
MAX_QUEUED_NOTIFICATION_BATCHES = 1024

# An end key above every key that does not begin with U+10FFFF (a Unicode
# noncharacter, which no application key should hold), in both key orders: its first
# segment sorts above any other first segment bytewise, and in the hierarchical
# order it has a second segment, so it also sorts above every key with more
# segments. The protocol has no open-ended range, so "to the end" is this key.
KEYS_END = "\U0010ffff/"


def _successor(key: str) -> str:
    """The smallest key after `key`, in both key orders."""
    return key + "\x00"


def _batch(message: pb.NotificationBatch) -> NotificationBatch:
    return NotificationBatch(
        shard=message.shard,
        offset=message.offset,
        timestamp_ms=message.timestamp,
        notifications=tuple(
            Notification(
                key=key,
                type=NotificationType(n.type),
                version_id=n.version_id if n.HasField("version_id") else None,
                key_range_last=n.key_range_last if n.HasField("key_range_last") else None,
            )
            for key, n in sorted(message.notifications.items())
        ),
    )


class Scans:
    def __init__(
        self,
        pool: ChannelPool,
        follower: ShardMapFollower,
        options: ClientOptions,
        check_open: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._follower = follower
        self._options = options
        self._check_open = check_open

    def _attempts(self, what: str) -> Attempts:
        return Attempts.of(what, None, self._options)

    def _stubs(self, shard: int) -> Any:
        self._check_open()
        address = self._follower.leader(shard)
        if address is None:
            return None
        return self._pool.stubs(address)

    def _failure(self, error: grpc.aio.AioRpcError) -> Retry:
        outcome = classify(server_status(error), sent=False)
        if isinstance(outcome, errors.ClientError):
            raise outcome from None
        return outcome

    # ---- single calls ---------------------------------------------------------------

    async def unary(self, shard: int, method: str, request: Any, what: str) -> Any:
        attempts = self._attempts(what)
        while True:
            stubs = self._stubs(shard)
            if stubs is None:
                retry = Retry(connection_status(f"shard {shard} has no leader yet"))
            else:
                try:
                    return await getattr(stubs, method)(request, timeout=attempts.check())
                except grpc.aio.AioRpcError as error:
                    retry = self._failure(error)
            await self._follower.pause(shard, retry, attempts)

    # ---- lists and scans ------------------------------------------------------------

    def _shards(self, partition_key: str | None) -> list[int]:
        shard_map = self._follower.map
        if partition_key is not None:
            return [shard_map.shard_for("", partition_key)]
        return shard_map.shard_ids()

    async def _shard_stream(
        self,
        shard: int,
        call_of: Callable[[Any, str], Any],
        items_of: Callable[[Any], Any],
        start: str,
        resume_key: Callable[[Any], str] | None,
        what: str,
    ) -> AsyncIterator[Any]:
        """Items of one shard's List/RangeScan. After a break the stream starts again
        after the last item's key (`resume_key`), or, when it has none, from the
        start skipping what was already yielded."""
        attempts = self._attempts(what)
        yielded = 0
        next_start = start
        while True:
            stubs = self._stubs(shard)
            if stubs is None:
                retry = Retry(connection_status(f"shard {shard} has no leader yet"))
            else:
                skip = 0 if resume_key is not None else yielded
                try:
                    async for response in call_of(stubs, next_start):
                        for item in items_of(response):
                            if skip:
                                skip -= 1
                                continue
                            yield item
                            yielded += 1
                            if resume_key is not None:
                                next_start = _successor(resume_key(item))
                        attempts = self._attempts(what)  # progress renews the budget
                    return
                except grpc.aio.AioRpcError as error:
                    retry = self._failure(error)
            await self._follower.pause(shard, retry, attempts)

    def iter_list(
        self, start: str, end: str, partition_key: str | None, index: str | None
    ) -> AsyncGenerator[str]:
        shards = self._shards(partition_key)

        def call_of(shard: int) -> Callable[[Any, str], Any]:
            def call(stubs: Any, from_key: str) -> Any:
                request = pb.ListRequest(shard=shard, start_inclusive=from_key, end_exclusive=end)
                if index is not None:
                    request.secondary_index_name = index
                return stubs.list(request)

            return call

        def keys_of(response: pb.ListResponse) -> Any:
            return response.keys

        streams = [
            self._shard_stream(
                shard,
                call_of(shard),
                keys_of,
                start,
                None if index is not None else (lambda key: key),
                f"list [{start!r}, {end!r})",
            )
            for shard in shards
        ]
        encode = self._follower.map.key_order.encoder
        if index is None:
            return _closing(merge_sorted(streams, encode), streams)
        return _closing(_gathered_sorted(streams, encode), streams)

    def range_scan(
        self, start: str, end: str, partition_key: str | None, index: str | None
    ) -> AsyncGenerator[Record]:
        shards = self._shards(partition_key)
        encode = self._follower.map.key_order.encoder

        def call_of(shard: int) -> Callable[[Any, str], Any]:
            def call(stubs: Any, from_key: str) -> Any:
                request = pb.RangeScanRequest(
                    shard=shard, start_inclusive=from_key, end_exclusive=end
                )
                if index is not None:
                    request.secondary_index_name = index
                return stubs.range_scan(request)

            return call

        def records_of(response: pb.RangeScanResponse) -> Any:
            return [Record.from_proto(r) for r in response.records]

        def sort_key(record: Record) -> tuple[bytes, bytes]:
            if index is not None and record.secondary_index_key is not None:
                return encode(record.secondary_index_key), encode(record.key)
            return encode(record.key), b""

        streams = [
            self._shard_stream(
                shard,
                call_of(shard),
                records_of,
                start,
                # Through an index, keys of one secondary key may span a break: start
                # again from scratch and skip (the index order is stable).
                None if index is not None else (lambda record: record.key),
                f"range scan [{start!r}, {end!r})",
            )
            for shard in shards
        ]
        return _closing(merge_sorted(streams, sort_key), streams)

    def shard_range_scan(self, shard: int, start: str, end: str) -> AsyncGenerator[Record]:
        """The records of one shard in [start, end), in key order, resumed after the
        last key seen when the stream breaks."""

        def call(stubs: Any, from_key: str) -> Any:
            return stubs.range_scan(
                pb.RangeScanRequest(shard=shard, start_inclusive=from_key, end_exclusive=end)
            )

        def records_of(response: pb.RangeScanResponse) -> Any:
            return [Record.from_proto(r) for r in response.records]

        stream: AsyncGenerator[Record] = self._shard_stream(  # type: ignore[assignment]
            shard,
            call,
            records_of,
            start,
            lambda record: record.key,
            f"range scan of shard {shard} [{start!r}, {end!r})",
        )
        return stream

    # ---- feeds ----------------------------------------------------------------------

    async def notification_head(self, shard: int) -> int:
        """The shard's commit offset: where a new subscription's feed starts (its
        first batch, always sent at once, says so)."""
        attempts = self._attempts(f"notification head of shard {shard}")
        while True:
            stubs = self._stubs(shard)
            if stubs is None:
                retry = Retry(connection_status(f"shard {shard} has no leader yet"))
            else:
                call = stubs.get_notifications(pb.NotificationsRequest(shard=shard))
                try:
                    async with asyncio.timeout(attempts.check()):
                        message = await call.read()
                    if message is not grpc.aio.EOF:
                        offset: int = message.offset
                        return offset
                    retry = Retry(connection_status("the notification stream ended"))
                except TimeoutError:
                    raise attempts.timeout() from None
                except grpc.aio.AioRpcError as error:
                    retry = self._failure(error)
                finally:
                    call.cancel()
            await self._follower.pause(shard, retry, attempts)

    async def read_notifications(
        self,
        shard: int,
        after_offset: int,
        end_offset: int | None,
        max_batches: int,
        idle_timeout_s: float | None,
    ) -> list[NotificationBatch]:
        """The shard's batches with after_offset < offset <= end_offset (no end: any),
        at most `max_batches`, in offset order; resubscribed after the last offset
        seen when the stream breaks.

        Entries that changed no key (a new term, a session's creation) have no
        batch, so the feed can be caught up below `end_offset`. With
        `idle_timeout_s`, a wait that long for the next batch ends the read with what
        came (the caller learns how far the feed went from the last batch); without,
        the batch at `end_offset` is expected and not receiving any batch for
        `request_timeout_s` raises RequestTimeout. NotificationsTrimmed when
        `after_offset` is older than the server's retention."""
        if max_batches < 1:
            raise ValueError("max_batches must be at least 1")
        batches: list[NotificationBatch] = []
        position = after_offset
        what = f"notifications of shard {shard} after offset {after_offset}"
        attempts = self._attempts(what)
        idle_s = self._options.request_timeout_s if idle_timeout_s is None else idle_timeout_s
        while (end_offset is None or position < end_offset) and len(batches) < max_batches:
            stubs = self._stubs(shard)
            if stubs is None:
                retry = Retry(connection_status(f"shard {shard} has no leader yet"))
                await self._follower.pause(shard, retry, attempts)
                continue
            call = stubs.get_notifications(
                pb.NotificationsRequest(shard=shard, start_offset_exclusive=position)
            )
            try:
                while True:
                    try:
                        async with asyncio.timeout(idle_s):
                            message = await call.read()
                    except TimeoutError:
                        if idle_timeout_s is not None:
                            return batches
                        raise errors.RequestTimeout(
                            f"{what}: no batch for {idle_s:g} s before offset {end_offset}"
                        ) from None
                    if message is grpc.aio.EOF:
                        retry = Retry(connection_status("the notification stream ended"))
                        break
                    if end_offset is not None and message.offset > end_offset:
                        return batches
                    batches.append(_batch(message))
                    position = message.offset
                    attempts = self._attempts(what)  # progress renews the budget
                    reached_end = end_offset is not None and position >= end_offset
                    if reached_end or len(batches) >= max_batches:
                        return batches
            except grpc.aio.AioRpcError as error:
                retry = self._failure(error)
            finally:
                call.cancel()
            await self._follower.pause(shard, retry, attempts)
        return batches

    async def notifications(
        self, start_offsets: dict[int, int], key_prefixes: tuple[str, ...], include_stat: bool
    ) -> AsyncGenerator[NotificationBatch]:
        queue: asyncio.Queue[NotificationBatch | BaseException] = asyncio.Queue(
            MAX_QUEUED_NOTIFICATION_BATCHES
        )
        tasks = [
            asyncio.create_task(
                self._follow_notifications(
                    shard,
                    pb.NotificationsRequest(
                        shard=shard, key_prefixes=key_prefixes, include_stat=include_stat
                    ),
                    start_offsets.get(shard),
                    queue,
                )
            )
            for shard in self._follower.map.shard_ids()
        ]
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _follow_notifications(
        self,
        shard: int,
        subscription: pb.NotificationsRequest,
        offset: int | None,
        queue: asyncio.Queue[NotificationBatch | BaseException],
    ) -> None:
        """One shard's batches into the queue (waiting while it is full), for good:
        resubscribing after the last offset seen whenever the stream breaks."""
        attempts = self._attempts(f"notifications of shard {shard}")
        try:
            while True:
                stubs = self._stubs(shard)
                if stubs is None:
                    retry = Retry(connection_status(f"shard {shard} has no leader yet"))
                else:
                    request = pb.NotificationsRequest()
                    request.CopyFrom(subscription)
                    if offset is not None:
                        request.start_offset_exclusive = offset
                    try:
                        async for message in stubs.get_notifications(request):
                            offset = message.offset
                            await queue.put(_batch(message))
                            attempts = self._attempts(f"notifications of shard {shard}")
                        retry = Retry(connection_status("the notification stream ended"))
                    except grpc.aio.AioRpcError as error:
                        retry = self._failure(error)
                await self._follower.pause(shard, retry, attempts)
        except errors.ClientError as error:
            await queue.put(error)

    async def sequence_updates(self, key: str, partition_key: str) -> AsyncGenerator[str]:
        shard = self._follower.map.shard_for(key, partition_key)
        request = pb.GetSequenceUpdatesRequest(shard=shard, key=key)
        attempts = self._attempts(f"sequence updates of {key!r}")
        last: str | None = None
        while True:
            stubs = self._stubs(shard)
            if stubs is None:
                retry = Retry(connection_status(f"shard {shard} has no leader yet"))
            else:
                try:
                    async for message in stubs.get_sequence_updates(request):
                        attempts = self._attempts(f"sequence updates of {key!r}")
                        if message.highest_sequence_key != last:
                            last = message.highest_sequence_key
                            yield last
                    retry = Retry(connection_status("the sequence update stream ended"))
                except grpc.aio.AioRpcError as error:
                    retry = self._failure(error)
            await self._follower.pause(shard, retry, attempts)


async def _gathered_sorted(
    streams: list[AsyncIterator[str]], sort_key: Callable[[str], bytes]
) -> AsyncGenerator[str]:
    keys: set[str] = set()
    for stream in streams:
        async for key in stream:
            keys.add(key)
            if len(keys) > MAX_INDEX_LIST_KEYS:
                raise errors.InvalidArgument(
                    f"a list through a secondary index is limited to {MAX_INDEX_LIST_KEYS} "
                    "keys; narrow the range or use a partition key"
                )
    for key in sorted(keys, key=sort_key):
        yield key


async def _closing(merged: AsyncGenerator[Any], streams: list[Any]) -> AsyncGenerator[Any]:
    """`merged`, closing every shard stream when the consumer stops early."""
    try:
        async for item in merged:
            yield item
    finally:
        await merged.aclose()
        for stream in streams:
            await stream.aclose()
