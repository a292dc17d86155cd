"""Batch read: one input partition per shard, each streaming that shard's records
in key order as Arrow record batches.

The reader object is pickled from the driver to the executors, so it holds
settings and plans only; a client is made inside `partitions` (driver: the shard
map and key order) and inside `read` (each task)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from cairn.client.records import Record
from cairn.client.sync import Client
from cairn.spark.keyspace import KeyRange, narrowed
from cairn.spark.options import ConnectionSettings, ReadSettings
from cairn.spark.pushdown import Pushed, push
from cairn.spark.schema import record_arrow


@dataclass(frozen=True)
class ShardPartition(InputPartition):
    """One shard, and the ranges of it to scan (in key order, disjoint)."""

    shard: int
    ranges: tuple[KeyRange, ...]


class CairnReader(DataSourceReader):
    """Reads every record of the shards (Spark filters the rows)."""

    def __init__(self, connection: ConnectionSettings, settings: ReadSettings) -> None:
        self.connection = connection
        self.settings = settings
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        with Client(
            self.connection.address,
            namespace=self.connection.namespace,
            options=self.connection.client_options(),
        ) as client:
            shard_map = client.shard_map
        ranges = tuple(self.pushed.keys.ranges(shard_map.key_order))
        shards = narrowed(shard_map.shard_ids(), self.pushed.shards)
        # Spark needs at least one partition; a pruned-away read scans nothing.
        return [ShardPartition(shard, ranges) for shard in shards] or [ShardPartition(-1, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardPartition)
        if partition.shard < 0 or not partition.ranges:
            return
        connection = self.connection
        with Client(
            connection.address, namespace=connection.namespace, options=connection.client_options()
        ) as client:
            builder = RecordBatches(connection.namespace, partition.shard, self.settings.batch_rows)
            accepts = self.pushed.keys.accepts
            for start, end in partition.ranges:
                for record in client.shard_scan(partition.shard, start, end):
                    if accepts(record.key) and builder.add(record):
                        yield builder.take()
            if builder.rows:
                yield builder.take()


class RecordBatches:
    """Records gathered into Arrow batches of at most `batch_rows` rows."""

    def __init__(self, namespace: str, shard: int, batch_rows: int) -> None:
        self.namespace = namespace
        self.shard = shard
        self.batch_rows = batch_rows
        self.rows: list[Record] = []

    def add(self, record: Record) -> bool:
        """Whether a batch is full."""
        self.rows.append(record)
        return len(self.rows) >= self.batch_rows

    def take(self) -> pa.RecordBatch:
        rows, self.rows = self.rows, []
        count = len(rows)
        versions = [r.version for r in rows]
        return pa.RecordBatch.from_arrays(
            [
                pa.array([self.namespace] * count, pa.string()),
                pa.array([self.shard] * count, pa.int64()),
                pa.array([r.key for r in rows], pa.string()),
                pa.array([r.value for r in rows], pa.binary()),
                pa.array([v.version_id for v in versions], pa.int64()),
                pa.array([v.modifications_count for v in versions], pa.int64()),
                pa.array([v.created_timestamp_ms for v in versions], pa.int64()),
                pa.array([v.modified_timestamp_ms for v in versions], pa.int64()),
                pa.array([v.session_id for v in versions], pa.int64()),
                pa.array([v.client_identity for v in versions], pa.string()),
                pa.nulls(count, pa.string()),
            ],
            schema=record_arrow(),
        )


class CairnPushdownReader(CairnReader):
    """Reads only the ranges that can match the pushed filters. A separate class
    because Spark refuses every read of a reader that has `pushFilters` unless
    spark.sql.python.filterPushdown.enabled is true (option pushdown=false picks
    the plain reader for sessions without it)."""

    def pushFilters(self, filters: Sequence[Filter]) -> list[Filter]:
        """Takes the filters it applies exactly; the rest go back to Spark."""
        self.pushed, rejected = push(list(filters))
        return rejected
