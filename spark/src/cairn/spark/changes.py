"""Streaming read (change data capture) from the shards' notification feeds.

An offset is {"<shard>": <notification offset>} for every shard: the last entry
whose changes were delivered (the feed resumes after it). Planning a micro-batch
(`latestOffset`, on the driver) reads each shard's feed ahead from its start, up
to the read limit, and ends the batch at the offset of the last notification
batch it saw: an offset that has a batch, so a task reading (start, end] knows
exactly when it is done, and every retry of it delivers the same changes (stored
notifications never change). Spark's checkpoint keeps the offsets, so a sink
that commits by batch id gets every change exactly once, across restarts of the
query and of the pods.

The feed is read twice (once to plan, once in the task); planning reads only
offsets, and it stops as soon as a shard is caught up.

With `keyPrefix`/`keyPrefixes` both reads ask the pods for the matching changes
only. The pods then skip batches with no match and now and then send an empty
one with the offset reached; a batch end is still an offset the filtered stream
sent, and the filter is a pure function of the stored batches (the same on every
replica), so the task gets the same changes; a filtered read also ends at the
first batch past the end (nothing up to the end matched).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.records import NotificationBatch
from cairn.client.sync import Client
from cairn.spark.options import ConnectionSettings, ReadSettings, StreamSettings
from cairn.spark.schema import change_arrow

log = logging.getLogger(__name__)

# Batches asked for per read of a feed (a read is repeated until its end).
_PAGE_BATCHES = 1000

Offsets = dict[str, int]


class DataLoss(RuntimeError):
    """Changes were trimmed (retention) before the stream read them."""


def _lost(shard: int, offset: int) -> DataLoss:
    return DataLoss(
        f"the changes of shard {shard} after offset {offset} are older than the "
        "server's notification retention and were trimmed; start the query again from "
        "'latest' (or a newer offset), or set failOnDataLoss=false to skip what was lost"
    )


@dataclass(frozen=True)
class ChangePartition(InputPartition):
    shard: int
    start: int  # exclusive
    end: int  # inclusive; a batch exists at this offset


class CairnChangeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, connection: ConnectionSettings, settings: StreamSettings, read: ReadSettings
    ) -> None:
        self.connection = connection
        self.settings = settings
        self.read_settings = read
        # Trigger.AvailableNow: each shard's head when the query started; planning
        # goes no further (the query ends once it has read up to them).
        self.available_now: Offsets | None = None

    def _client(self) -> Client:
        c = self.connection
        return Client(c.address, namespace=c.namespace, options=c.client_options())

    def initialOffset(self) -> Offsets:
        settings = self.settings
        with self._client() as client:
            shards = client.shard_map.shard_ids()
            if settings.starting == "earliest":
                return {str(shard): -1 for shard in shards}
            if settings.starting == "latest":
                return {str(shard): client.notification_head(shard) for shard in shards}
        given = settings.starting_offsets or {}
        unknown = sorted(set(given) - {str(shard) for shard in shards})
        if unknown:
            raise ValueError(f"startingOffsets names shards the namespace lacks: {unknown}")
        # A shard left out starts from its earliest retained change.
        return {str(shard): given.get(str(shard), -1) for shard in shards}

    def prepareForTriggerAvailableNow(self) -> None:
        with self._client() as client:
            self.available_now = {
                str(shard): client.notification_head(shard)
                for shard in client.shard_map.shard_ids()
            }

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.settings.max_changes_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return asyncio.run(self._plan(start, max_rows))

    async def _plan(self, start: Offsets, max_rows: int | None) -> Offsets:
        """Each shard's end: the last batch within the budget of rows (shared by the
        shards in shard order; a shard gets at least one batch so that a batch
        larger than the limit cannot stall the stream)."""
        c = self.connection
        async with await AsyncClient.connect(
            c.address, namespace=c.namespace, options=c.client_options()
        ) as client:
            shards = client.shard_map.shard_ids()
            heads = await asyncio.gather(*(client.notification_head(s) for s in shards))
            if self.available_now is not None:
                limits = self.available_now
                heads = [min(h, limits.get(str(s), h)) for s, h in zip(shards, heads, strict=True)]
            end = dict(start)

            async def plan(shard: int, head: int, budget: int | None) -> int:
                """The shard's end offset; the rows it takes."""
                position = start.get(str(shard), -1)
                if position >= head:
                    return 0
                try:
                    batches = await self._ahead(client, shard, position, head, budget)
                except errors.NotificationsTrimmed:
                    if self.settings.fail_on_data_loss:
                        raise _lost(shard, position) from None
                    log.warning("%s; skipping to offset %d", _lost(shard, position), head)
                    end[str(shard)] = head
                    return 0
                if batches:
                    end[str(shard)] = batches[-1].offset
                return sum(len(b.notifications) for b in batches)

            if max_rows is None:
                # No budget to share: every shard at once (each may wait the caught-up
                # time once).
                await asyncio.gather(
                    *(plan(s, h, None) for s, h in zip(shards, heads, strict=True))
                )
                return end
            remaining = max_rows
            for shard, head in zip(shards, heads, strict=True):
                if remaining > 0:
                    remaining -= await plan(shard, head, remaining)
            return end

    async def _ahead(
        self, client: AsyncClient, shard: int, after: int, head: int, max_rows: int | None
    ) -> list[NotificationBatch]:
        taken: list[NotificationBatch] = []
        rows = 0
        while after < head:
            page = await client.read_notifications(
                shard,
                after,
                head,
                max_batches=_PAGE_BATCHES,
                idle_timeout_s=self.settings.caught_up_after_s,
                key_prefixes=self.settings.key_prefixes,
            )
            for batch in page:
                size = len(batch.notifications)
                if max_rows is not None and taken and rows + size > max_rows:
                    return taken
                taken.append(batch)
                rows += size
            if len(page) < _PAGE_BATCHES:
                return taken  # caught up (entries after the last batch changed nothing)
            after = page[-1].offset
        return taken

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return [
            ChangePartition(int(shard), start.get(shard, -1), offset)
            for shard, offset in sorted(end.items(), key=lambda item: int(item[0]))
            if offset > start.get(shard, -1)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangePartition)
        namespace = self.connection.namespace
        filtered = self.settings.key_prefixes
        with self._client() as client:
            position = partition.start
            while position < partition.end:
                try:
                    page = client.read_notifications(
                        partition.shard,
                        position,
                        partition.end,
                        max_batches=_PAGE_BATCHES,
                        key_prefixes=filtered,
                    )
                except errors.NotificationsTrimmed:
                    if self.settings.fail_on_data_loss:
                        raise _lost(partition.shard, position) from None
                    log.warning("%s; skipped", _lost(partition.shard, position))
                    return
                if not page:
                    if filtered:
                        return  # the pod's stream passed the end: nothing more matched
                    raise RuntimeError(
                        f"shard {partition.shard}: no notification batch up to offset "
                        f"{partition.end} after {position}"
                    )
                yield _changes(namespace, page)
                position = page[-1].offset

    def commit(self, end: Offsets) -> None:
        # The server keeps notifications for its retention whatever readers do.
        pass


def _changes(namespace: str, batches: list[NotificationBatch]) -> pa.RecordBatch:
    shard: list[int] = []
    offset: list[int] = []
    timestamp: list[int] = []
    key: list[str] = []
    kind: list[str] = []
    version: list[int | None] = []
    range_end: list[str | None] = []
    for batch in batches:
        for change in batch.notifications:
            shard.append(batch.shard)
            offset.append(batch.offset)
            timestamp.append(batch.timestamp_ms)
            key.append(change.key)
            kind.append(change.type.name)
            version.append(change.version_id)
            range_end.append(change.key_range_last)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([namespace] * len(key), pa.string()),
            pa.array(shard, pa.int64()),
            pa.array(offset, pa.int64()),
            pa.array(timestamp, pa.int64()),
            pa.array(key, pa.string()),
            pa.array(kind, pa.string()),
            pa.array(version, pa.int64()),
            pa.array(range_end, pa.string()),
        ],
        schema=change_arrow(),
    )
