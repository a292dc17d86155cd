"""One shard's consistent snapshot, written as one Parquet file (runs in a Spark
task, one per shard).

1. Note the shard's notification head (`start`), then scan the shard in key
   order into a local spill file (Arrow IPC: memory stays bounded whatever the
   shard's size).
2. Note the head again (`end`) and fold the notifications (start, end] into a
   ShardReplay: what each key changed during the scan is at `end`.
3. Fetch the values at `end` the scan did not see. A key changed again since
   cannot be fetched at `end`: then `end` moves to the current head, the new
   changes are folded in too, and the fetch is repeated (at most `max_rounds`).
4. Merge the spill with the fetched records in key order, dropping deleted keys,
   into the Parquet file, and checksum the rows on the way.

The file is written under a hidden name and renamed when complete, so a task
that Spark runs again replaces it whole."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.records import Record, Version
from cairn.common.keyorder import KeyOrder
from cairn.spark.jobs.manifest import DATA_DIR, RowChecksum, ShardExport
from cairn.spark.jobs.replay import ShardReplay
from cairn.spark.options import ConnectionSettings
from cairn.spark.read import RecordBatches
from cairn.spark.schema import record_arrow

# Notification batches asked for per read of the feed.
_PAGE_BATCHES = 1000
# Values fetched at once (each a one-key scan of the shard).
_FETCH_CONCURRENCY = 64


class SnapshotError(RuntimeError):
    """The shard's snapshot could not be made consistent."""


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    batch_rows: int
    # How long without a notification batch means the feed has caught up (entries
    # that changed nothing have no batch to wait for).
    caught_up_after_s: float
    max_rounds: int


def export_shard(
    connection: ConnectionSettings,
    shard: int,
    hash_range: tuple[int, int],
    key_order: KeyOrder,
    destination: str,
    settings: SnapshotSettings,
) -> ShardExport:
    """`destination`: the export's directory as a URI or absolute path (pyarrow's
    file systems: local, s3://, hdfs://, gs://)."""
    return asyncio.run(_export(connection, shard, hash_range, key_order, destination, settings))


async def _export(
    connection: ConnectionSettings,
    shard: int,
    hash_range: tuple[int, int],
    key_order: KeyOrder,
    destination: str,
    settings: SnapshotSettings,
) -> ShardExport:
    fs, root = pafs.FileSystem.from_uri(destination)
    relative = f"{DATA_DIR}/shard-{shard:05d}.parquet"
    async with await AsyncClient.connect(
        connection.address, namespace=connection.namespace, options=connection.client_options()
    ) as client:
        start = await client.notification_head(shard)
        with tempfile.TemporaryDirectory(prefix=f"cairn-export-{shard}-") as spill_dir:
            spill = os.path.join(spill_dir, "scan.arrow")
            scanned_recent = await _scan(
                client, connection.namespace, shard, start, spill, settings
            )
            replay = ShardReplay(key_order, start, start)
            await _follow(client, shard, replay, await client.notification_head(shard), settings)
            fetched: dict[str, Record] = {}
            rounds = 1
            while True:
                wanted = {
                    key: version
                    for key, version in replay.wanted(scanned_recent).items()
                    if key not in fetched or fetched[key].version.version_id != version
                }
                for key in set(fetched) - set(replay.wanted(scanned_recent)):
                    del fetched[key]  # deleted since, or the scan has it after all
                missing = await _fetch(client, shard, wanted, fetched)
                if not missing:
                    break
                if rounds >= settings.max_rounds:
                    raise SnapshotError(
                        f"shard {shard}: {missing} keys kept changing while their values "
                        f"were fetched ({rounds} rounds); export again when writes are fewer "
                        "or allow more rounds"
                    )
                rounds += 1
                await _follow(
                    client, shard, replay, await client.notification_head(shard), settings
                )
            fs.create_dir(f"{root}/{DATA_DIR}", recursive=True)
            hidden = f"{root}/{DATA_DIR}/.shard-{shard:05d}.partial"
            checksum = RowChecksum()
            with pq.ParquetWriter(hidden, record_arrow(), filesystem=fs) as out:
                for batch in _merged(spill, replay, fetched, connection.namespace, shard, settings):
                    checksum.add_batch(batch)
                    out.write_batch(batch)
    fs.move(hidden, f"{root}/{relative}")
    return ShardExport(
        shard=shard,
        start_offset=start,
        offset=replay.end,
        hash_range=hash_range,
        rows=checksum.rows,
        bytes=checksum.bytes,
        checksum=checksum.hexdigest(),
        file=relative,
        changes_replayed=replay.changes,
        values_fetched=len(fetched),
        rounds=rounds,
    )


async def _scan(
    client: AsyncClient,
    namespace: str,
    shard: int,
    start: int,
    spill: str,
    settings: SnapshotSettings,
) -> dict[str, int]:
    """Scan into the spill file; the versions of the records written after `start`."""
    recent: dict[str, int] = {}
    builder = RecordBatches(namespace, shard, settings.batch_rows)
    with ipc.new_file(spill, record_arrow()) as out:
        async for record in client.shard_scan(shard):
            if record.version.version_id > start:
                recent[record.key] = record.version.version_id
            if builder.add(record):
                out.write_batch(builder.take())
        if builder.rows:
            out.write_batch(builder.take())
    return recent


async def _follow(
    client: AsyncClient, shard: int, replay: ShardReplay, head: int, settings: SnapshotSettings
) -> None:
    """Fold the notifications (replay.end, head] in; replay.end becomes `head`."""
    after = replay.end
    while after < head:
        try:
            page = await client.read_notifications(
                shard,
                after,
                head,
                max_batches=_PAGE_BATCHES,
                idle_timeout_s=settings.caught_up_after_s,
            )
        except errors.NotificationsTrimmed:
            raise SnapshotError(
                f"shard {shard}: the changes after offset {after} were trimmed (the "
                "server's notification retention is shorter than the scan took)"
            ) from None
        replay.apply(page)
        if len(page) < _PAGE_BATCHES:
            break  # caught up: the entries after the last batch changed nothing
        after = page[-1].offset
    replay.end = max(replay.end, head)


async def _fetch(
    client: AsyncClient, shard: int, wanted: dict[str, int], fetched: dict[str, Record]
) -> int:
    """Fetch the wanted versions (from this shard: a key may live on a shard its
    hash does not name, when an older client routed it); how many had changed."""
    missing = 0
    semaphore = asyncio.Semaphore(_FETCH_CONCURRENCY)

    async def one(key: str, version: int) -> None:
        nonlocal missing
        async with semaphore:
            found = [r async for r in client.shard_scan(shard, key, key + "\x00", limit=1)]
        if found and found[0].key == key and found[0].version.version_id == version:
            fetched[key] = found[0]
        else:
            missing += 1

    await asyncio.gather(*(one(key, version) for key, version in wanted.items()))
    return missing


def _merged(
    spill: str,
    replay: ShardReplay,
    fetched: dict[str, Record],
    namespace: str,
    shard: int,
    settings: SnapshotSettings,
) -> Iterator[pa.RecordBatch]:
    """The spill's records as of `replay.end`, merged in key order with the fetched
    records (the versions the scan did not see)."""
    encode = replay.order.encoder
    extra = sorted(fetched.values(), key=lambda r: encode(r.key))
    builder = RecordBatches(namespace, shard, settings.batch_rows)
    taken = 0
    with ipc.open_file(spill) as source:
        for index in range(source.num_record_batches):
            for row in source.get_batch(index).to_pylist():
                key = row["key"]
                encoded = encode(key)
                while taken < len(extra) and encode(extra[taken].key) <= encoded:
                    # Fetched keys before this one, and this one's newer version.
                    if builder.add(extra[taken]):
                        yield builder.take()
                    taken += 1
                if key in fetched:
                    continue  # replaced by the fetched version
                change = replay.latest.get(key)
                if change is not None:
                    if change[1] != row["version_id"]:
                        continue  # deleted by the end offset
                elif replay.removed_by_range(encoded, row["version_id"]):
                    continue
                if builder.add(_record(row)):
                    yield builder.take()
    for record in extra[taken:]:
        if builder.add(record):
            yield builder.take()
    if builder.rows:
        yield builder.take()


def _record(row: dict[str, Any]) -> Record:
    version = Version(
        version_id=row["version_id"],
        modifications_count=row["modifications_count"],
        created_timestamp_ms=row["created_timestamp"],
        modified_timestamp_ms=row["modified_timestamp"],
        session_id=row["session_id"],
        client_identity=row["client_identity"],
    )
    return Record(row["key"], row["value"], version)
