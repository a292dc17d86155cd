"""Batch write (bulk load, restore): each task puts its Arrow batches through the
client library, which batches the puts per shard.

Writes are AT LEAST ONCE: a task that fails after some puts is run again by
Spark and puts them again. `upsert` makes that harmless (the same values land
again; versions and modification counts grow). `create-only` (expected version
-1) stays idempotent too: a record already there counts as a conflict and is left
alone, and a create whose outcome the client could not learn is read back and
counted as written when the stored value is ours. `overwrite` (Spark's mode)
deletes the records under the `prefix` option first, on the driver, before any
task writes."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.records import EXPECTED_RECORD_DOES_NOT_EXIST
from cairn.client.sync import Client
from cairn.spark.keyspace import prefix_ranges
from cairn.spark.options import ConnectionSettings, OptionError, WriteSettings

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("key", "value")


@dataclass
class ShardCounts:
    rows: int = 0
    bytes: int = 0
    conflicts: int = 0

    def add(self, other: ShardCounts) -> None:
        self.rows += other.rows
        self.bytes += other.bytes
        self.conflicts += other.conflicts


@dataclass
class WriteReport(WriterCommitMessage):
    """One task's counts per shard (rows written, key + value bytes, conflicts)."""

    shards: dict[int, ShardCounts] = field(default_factory=dict)

    def counts(self, shard: int) -> ShardCounts:
        return self.shards.setdefault(shard, ShardCounts())


def summary(reports: list[WriterCommitMessage | None]) -> dict[str, object]:
    """The job's totals and per-shard sums, as JSON-ready data."""
    per_shard: dict[int, ShardCounts] = {}
    for report in reports:
        if not isinstance(report, WriteReport):
            continue
        for shard, counts in report.shards.items():
            per_shard.setdefault(shard, ShardCounts()).add(counts)
    total = ShardCounts()
    for counts in per_shard.values():
        total.add(counts)
    return {
        "rows": total.rows,
        "bytes": total.bytes,
        "conflicts": total.conflicts,
        "shards": {
            str(shard): {"rows": c.rows, "bytes": c.bytes, "conflicts": c.conflicts}
            for shard, c in sorted(per_shard.items())
        },
    }


class CairnWriter(DataSourceArrowWriter):
    def __init__(
        self, connection: ConnectionSettings, settings: WriteSettings, overwrite: bool
    ) -> None:
        self.connection = connection
        self.settings = settings
        if overwrite:
            self._delete_prefix()

    def _delete_prefix(self) -> None:
        """Runs on the driver when the writer is made, before any task starts."""
        prefix = self.settings.prefix
        if not prefix:
            raise OptionError(
                "mode 'overwrite' deletes records first and needs the option 'prefix' "
                "(the key prefix to replace); it never clears a whole namespace"
            )
        connection = self.connection
        with Client(
            connection.address, namespace=connection.namespace, options=connection.client_options()
        ) as client:
            ranges, exact = prefix_ranges(prefix, client.shard_map.key_order)
            if not exact:
                raise OptionError(f"cannot delete exactly the keys with prefix {prefix!r}")
            for start, end in ranges:
                client.delete_range(start, end)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return asyncio.run(self._write(iterator))

    async def _write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        connection = self.connection
        report = WriteReport()
        create_only = self.settings.mode == "create-only"
        window = self.settings.max_inflight_puts
        async with await AsyncClient.connect(
            connection.address, namespace=connection.namespace, options=connection.client_options()
        ) as client:

            async def put(key: str, value: bytes, partition_key: str | None) -> None:
                counts = report.counts(client.shard_for(key, partition_key))
                try:
                    await client.put(
                        key,
                        value,
                        partition_key=partition_key,
                        expected_version=EXPECTED_RECORD_DOES_NOT_EXIST if create_only else None,
                    )
                except errors.UnexpectedVersion:
                    counts.conflicts += 1
                    return
                except errors.OutcomeUnknown:
                    # The create may have applied before a leader change: ours if the
                    # stored value is ours (a conflict otherwise).
                    stored = await client.get(key, partition_key=partition_key)
                    if stored.value != value:
                        counts.conflicts += 1
                        return
                counts.rows += 1
                counts.bytes += len(key.encode()) + len(value)

            for batch in iterator:
                columns = batch.schema.names
                missing = [name for name in REQUIRED_COLUMNS if name not in columns]
                if missing:
                    raise OptionError(f"writing to Cairn needs the columns {missing}")
                keys = batch.column("key").to_pylist()
                values = batch.column("value").to_pylist()
                partition_keys = (
                    batch.column("partition_key").to_pylist()
                    if "partition_key" in columns
                    else [None] * len(keys)
                )
                for start in range(0, len(keys), window):
                    chunk = range(start, min(start + window, len(keys)))
                    await asyncio.gather(
                        *(put(keys[i], _bytes(values[i]), partition_keys[i]) for i in chunk)
                    )
        return report

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        result = summary(messages)
        text = json.dumps(result, sort_keys=True)
        # The driver's Python worker: its stderr reaches Spark's driver log.
        print(f"cairn write committed: {text}", file=sys.stderr, flush=True)
        if self.settings.summary_path:
            with open(self.settings.summary_path, "w", encoding="utf-8") as out:
                out.write(text + "\n")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Nothing to undo (the puts that were made stay: at least once); say how far
        # the job came.
        text = json.dumps(summary(messages), sort_keys=True)
        print(f"cairn write aborted after: {text}", file=sys.stderr, flush=True)


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if value is None:
        return b""
    raise TypeError(f"a value must be binary or string, not {type(value).__name__}")
