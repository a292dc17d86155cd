"""cairn-export: a consistent backup of a namespace, as Parquet plus a manifest.

    cairn-export --address pod:6648 --output /backups/2026-11-28
    spark-submit --master spark://host:7077 .../cairn/spark/jobs/export.py \\
        --address pod:6648 --output s3://bucket/backups/2026-11-28

One Spark task per shard (see snapshot.py): each notes the shard's notification
head, scans the shard, replays the changes made meanwhile up to an end offset,
and writes `data/shard-NNNNN.parquet` (the record columns of the `cairn` source,
in the shard's key order). The driver then writes `manifest.json`: per shard the
offset the file is the state at, the hash range, the row count and checksum.
Restoring the export and then applying the shards' changes after those offsets
(cairn-restore --follow-source) gives point-in-time recovery."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from cairn.client.sync import Client
from cairn.common.version import add_version_option
from cairn.spark import DISTRIBUTION
from cairn.spark.jobs.common import (
    add_connection_arguments,
    add_spark_arguments,
    connection_options,
    job_session,
)
from cairn.spark.jobs.manifest import MANIFEST_FILE, Manifest, ShardExport
from cairn.spark.jobs.progress import Progress, rate, say
from cairn.spark.jobs.snapshot import SnapshotSettings, export_shard
from cairn.spark.options import ConnectionSettings


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cairn-export", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    add_connection_arguments(parser)
    add_spark_arguments(parser)
    parser.add_argument(
        "--output",
        required=True,
        help="the export's directory: a path (on a cluster, one every executor can "
        "write, e.g. a shared mount) or a URI (s3://, hdfs://, gs://)",
    )
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per Arrow batch")
    parser.add_argument(
        "--caught-up-after-ms",
        type=int,
        default=500,
        help="a shard's feed counts as caught up after this long without a change",
    )
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=10,
        help="times a shard's end offset may move on when keys change again while "
        "their values are fetched",
    )
    return parser.parse_args(argv)


def destination_uri(output: str) -> str:
    """A URI as given; a local path made absolute (executors run elsewhere)."""
    return output if "://" in output else str(Path(output).resolve())


def run(spark: Any, options: dict[str, str], output: str, settings: SnapshotSettings) -> Manifest:
    connection = ConnectionSettings.of(options)
    with Client(
        connection.address, namespace=connection.namespace, options=connection.client_options()
    ) as client:
        shard_map = client.shard_map
    shards = [
        (info.shard, (info.hash_range.min_inclusive, info.hash_range.max_inclusive))
        for info in shard_map.shards
    ]
    key_order = shard_map.key_order
    destination = destination_uri(output)
    say(f"cairn-export: {len(shards)} shards of {connection.namespace!r} to {destination}")
    rows = spark.sparkContext.accumulator(0)

    def task(item: tuple[int, tuple[int, int]]) -> ShardExport:
        shard, hash_range = item
        result = export_shard(connection, shard, hash_range, key_order, destination, settings)
        rows.add(result.rows)
        return result

    with Progress(spark, "cairn-export", "shards", len(shards), lambda: int(rows.value)) as p:
        results = spark.sparkContext.parallelize(shards, len(shards)).map(task).collect()
        elapsed_s = p.elapsed_s()
    manifest = Manifest(
        namespace=connection.namespace,
        source=connection.address,
        key_order=key_order.value,
        key_hash=shard_map.key_hash.value,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        shards=tuple(sorted(results, key=lambda s: s.shard)),
    )
    fs, root = pafs.FileSystem.from_uri(destination)
    with fs.open_output_stream(f"{root}/{MANIFEST_FILE}") as out:
        out.write(manifest.to_json().encode())
    for shard in manifest.shards:
        say(
            f"cairn-export: shard {shard.shard}: {shard.rows:,} rows at offset {shard.offset} "
            f"(scan from {shard.start_offset}, {shard.changes_replayed} changes replayed, "
            f"{shard.values_fetched} values fetched, {shard.rounds} rounds)"
        )
    say(
        f"cairn-export: done: {manifest.rows:,} rows, {manifest.bytes / 1e6:.1f} MB in "
        f"{elapsed_s:.1f} s ({rate(manifest.rows, elapsed_s):,.0f} rows/s, "
        f"{rate(manifest.bytes / 1e6, elapsed_s):.1f} MB/s); manifest {root}/{MANIFEST_FILE}"
    )
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    options = connection_options(args)
    settings = SnapshotSettings(args.batch_rows, args.caught_up_after_ms / 1000, args.max_rounds)
    spark = job_session("cairn-export", args.master)
    try:
        run(spark, options, args.output, settings)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
