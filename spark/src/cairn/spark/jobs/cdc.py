"""cairn-cdc: the change stream of a namespace into Parquet, with a checkpoint.

    cairn-cdc --address pod:6648 --output /data/changes --checkpoint /data/changes-cp
    cairn-cdc ... --once          # what is there now, then stop (a batch job, cron)

One row per change (the `cairn-changes` source's columns). The checkpoint holds
the per-shard notification offsets of every micro-batch, and Spark's file sink
commits by batch id: stopped and started again with the same --checkpoint, the
job goes on where it stopped and writes every change exactly once. The first run
starts at --starting-offsets (earliest, latest, or an export's offsets as JSON,
to continue from a backup)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from cairn.common.version import add_version_option
from cairn.spark import DISTRIBUTION
from cairn.spark.jobs.common import (
    add_connection_arguments,
    add_spark_arguments,
    connection_options,
    job_session,
)
from cairn.spark.jobs.export import destination_uri
from cairn.spark.jobs.progress import rate, say


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cairn-cdc", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    add_connection_arguments(parser)
    add_spark_arguments(parser)
    parser.add_argument("--output", required=True, help="the Parquet directory (path or URI)")
    parser.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-changes-per-trigger", type=int, default=100_000)
    parser.add_argument("--trigger-interval-s", type=float, default=10.0)
    parser.add_argument(
        "--once", action="store_true", help="write what is available now, then stop"
    )
    return parser.parse_args(argv)


def start(
    spark: Any,
    options: dict[str, str],
    output: str,
    checkpoint: str,
    starting_offsets: str = "earliest",
    max_changes_per_trigger: int = 100_000,
    trigger_interval_s: float = 10.0,
    once: bool = False,
) -> Any:
    """The running query (StreamingQuery)."""
    changes = (
        spark.readStream.format("cairn-changes")
        .options(**options)
        .option("startingOffsets", starting_offsets)
        .option("maxChangesPerTrigger", str(max_changes_per_trigger))
        .load()
    )
    writer = (
        changes.writeStream.format("parquet")
        .option("path", destination_uri(output))
        .option("checkpointLocation", destination_uri(checkpoint))
        .queryName("cairn-cdc")
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(trigger_interval_s * 1000)} milliseconds")
    return writer.start()


class BatchReport:
    """Prints each finished micro-batch once: changes in it, in all, and the rate."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last_batch = -1
        self.rows = 0

    def update(self, query: Any) -> None:
        for progress in query.recentProgress:
            if progress.batchId <= self.last_batch:
                continue
            self.last_batch = progress.batchId
            self.rows += progress.numInputRows
            elapsed = time.monotonic() - self.started
            say(
                f"cairn-cdc: batch {progress.batchId}: {progress.numInputRows:,} changes, "
                f"{self.rows:,} in all, {rate(self.rows, elapsed):,.0f} changes/s"
            )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    options = connection_options(args)
    spark = job_session("cairn-cdc", args.master)
    try:
        query = start(
            spark,
            options,
            args.output,
            args.checkpoint,
            args.starting_offsets,
            args.max_changes_per_trigger,
            args.trigger_interval_s,
            args.once,
        )
        batches = BatchReport()
        while not query.awaitTermination(5):
            batches.update(query)
        batches.update(query)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
