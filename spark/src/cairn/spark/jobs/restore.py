"""cairn-restore: write an export back (or bulk-load Parquet, CSV or JSON) into a
namespace, with a summary first.

    cairn-restore --address pod:6648 --input /backups/2026-11-28 --dry-run
    cairn-restore --address pod:6648 --input /backups/2026-11-28 --mode create-only
    cairn-restore --address pod:6648 --input keys.csv --format csv

The summary (rows, bytes, distinct keys, what is left out, the target's shards,
for an export its manifest's offsets and whether the files match it) is printed
before anything is written; `--dry-run` stops there. The rows are written through
the `cairn` data source, one task per input split: `upsert` puts every row (run
again, it leaves the same keys and values), `create-only` writes only keys that do
not exist and counts the others as conflicts (run again, it writes nothing).
Writes are at least once (a retried task puts its rows again), which both modes
make harmless.

Input columns: `key` (string) and `value` (binary, or a string written as its
UTF-8 bytes); `partition_key` is used when present. Ephemeral records of an
export (`session_id` set) are left out unless --include-ephemeral, which writes
them as persistent records (their sessions do not exist in the target).

--follow-source ADDRESS then applies the source's changes after the manifest's
offsets (follow.py): point-in-time recovery up to the source's state now."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cairn.client.scans import KEYS_END
from cairn.client.sync import Client
from cairn.common.version import add_version_option
from cairn.spark import DISTRIBUTION
from cairn.spark.jobs.common import (
    add_connection_arguments,
    add_spark_arguments,
    connection_options,
    job_session,
)
from cairn.spark.jobs.export import destination_uri
from cairn.spark.jobs.follow import follow
from cairn.spark.jobs.manifest import MANIFEST_FILE, Manifest, RowChecksum
from cairn.spark.jobs.progress import Progress, rate, say
from cairn.spark.options import WRITE_MODES, ConnectionSettings

FORMATS = ("export", "parquet", "csv", "json")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cairn-restore", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    add_connection_arguments(parser)
    add_spark_arguments(parser)
    parser.add_argument("--input", required=True, help="an export's directory, or data files")
    parser.add_argument(
        "--format", choices=FORMATS, help="default: export if a manifest is there, else parquet"
    )
    parser.add_argument("--mode", choices=WRITE_MODES, default="upsert")
    parser.add_argument("--dry-run", action="store_true", help="print the summary, write nothing")
    parser.add_argument(
        "--verify", action="store_true", help="check an export's files against its checksums"
    )
    parser.add_argument("--include-ephemeral", action="store_true")
    parser.add_argument("--max-inflight-puts", type=int, default=1000)
    add_connection_arguments(parser, "follow-source-", required=False)
    return parser.parse_args(argv)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    rows: int
    bytes: int
    conflicts: int
    elapsed_s: float
    summary: dict[str, Any]


def load_manifest(uri: str) -> Manifest | None:
    fs, root = pafs.FileSystem.from_uri(uri)
    path = f"{root}/{MANIFEST_FILE}"
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return Manifest.from_json(stream.read().decode())


@dataclass(frozen=True, slots=True)
class ExportCheck:
    problems: list[str]
    # Records of ephemeral sessions in the files (from the footers' null counts).
    ephemeral: int


def verify_export(uri: str, manifest: Manifest, checksums: bool) -> ExportCheck:
    """What does not match the manifest: row counts (from the files' footers) and,
    with `checksums`, the rows' checksums (reads every file on the driver)."""
    fs, root = pafs.FileSystem.from_uri(uri)
    problems = []
    ephemeral = 0
    for shard in manifest.shards:
        path = f"{root}/{shard.file}"
        try:
            with fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                metadata = parquet.metadata
                if metadata.num_rows != shard.rows:
                    problems.append(
                        f"{shard.file}: {metadata.num_rows} rows, the manifest says {shard.rows}"
                    )
                    continue
                ephemeral += _non_null(metadata, "session_id")
                if checksums:
                    checksum = RowChecksum()
                    for batch in parquet.iter_batches(columns=["key", "value"]):
                        checksum.add_batch(batch)
                    if checksum.hexdigest() != shard.checksum:
                        problems.append(f"{shard.file}: checksum differs from the manifest")
        except FileNotFoundError:
            problems.append(f"{shard.file}: missing")
    return ExportCheck(problems, ephemeral)


def _non_null(metadata: pq.FileMetaData, column: str) -> int:
    index = metadata.schema.names.index(column)
    count = 0
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        nulls = chunk.statistics.null_count if chunk.statistics is not None else None
        if nulls is None:
            raise ValueError(f"the files have no null counts of {column}")
        count += chunk.num_values - nulls
    return count


def read_input(spark: Any, uri: str, kind: str) -> Any:
    if kind == "export":
        return spark.read.parquet(f"{uri}/data")
    if kind == "csv":
        return spark.read.option("header", "true").csv(uri)
    if kind == "json":
        return spark.read.json(uri)
    return spark.read.parquet(uri)


def prepare(frame: Any, include_ephemeral: bool) -> Any:
    """The rows to write, with the columns the writer takes."""
    from pyspark.sql import functions as F

    columns = frame.columns
    if "session_id" in columns and not include_ephemeral:
        frame = frame.where(F.col("session_id").isNull())
    selected = [F.col("key").cast("string"), F.col("value").cast("binary")]
    if "partition_key" in columns:
        selected.append(F.col("partition_key").cast("string"))
    return frame.select(*selected)


def summarize(frame: Any, include_ephemeral: bool) -> dict[str, int]:
    """One pass over the input (it has a shuffle, for the distinct keys)."""
    from pyspark.sql import functions as F

    ephemeral = F.col("session_id").isNotNull() if "session_id" in frame.columns else F.lit(False)
    written = F.lit(True) if include_ephemeral else ~ephemeral
    totals = frame.agg(
        F.count(F.when(written, 1)).alias("rows"),
        F.coalesce(
            F.sum(F.when(written, F.octet_length("key") + F.octet_length("value"))), F.lit(0)
        ).alias("bytes"),
        F.countDistinct(F.when(written, F.col("key"))).alias("keys"),
        F.count(F.when(written & F.col("key").isNull(), 1)).alias("null_keys"),
        F.count(F.when(~written, 1)).alias("left_out"),
    ).first()
    return {
        "rows": int(totals["rows"]),
        "bytes": int(totals["bytes"]),
        "distinct_keys": int(totals["keys"]),
        "null_keys": int(totals["null_keys"]),
        "left_out_ephemeral": int(totals["left_out"]),
    }


def summarize_export(
    manifest: Manifest, check: ExportCheck, include_ephemeral: bool
) -> dict[str, int]:
    """An export's summary without reading its rows: the manifest's counts (the
    files' footers were checked against them), keys unique by construction."""
    left_out = 0 if include_ephemeral else check.ephemeral
    rows = manifest.rows - left_out
    return {
        "rows": rows,
        # The manifest's bytes include the left-out records'; an estimate then.
        "bytes": manifest.bytes,
        "distinct_keys": rows,
        "null_keys": 0,
        "left_out_ephemeral": left_out,
    }


def run(
    spark: Any,
    options: dict[str, str],
    source: str,
    kind: str | None = None,
    mode: str = "upsert",
    dry_run: bool = False,
    verify: bool = False,
    include_ephemeral: bool = False,
    max_inflight_puts: int = 1000,
) -> RestoreResult | None:
    """None for a dry run (or an input that fails its checks)."""
    uri = destination_uri(source)
    manifest = load_manifest(uri) if kind in (None, "export") else None
    kind = kind or ("export" if manifest is not None else "parquet")
    if kind == "export" and manifest is None:
        raise ValueError(f"{uri} has no {MANIFEST_FILE}")
    target = ConnectionSettings.of(options)
    say(f"cairn-restore: summary of {uri} ({kind}), mode {mode}")
    if manifest is not None:
        say(
            f"  export of {manifest.namespace!r} from {manifest.source}, {manifest.created}: "
            f"{manifest.rows:,} rows in {len(manifest.shards)} shards, offsets "
            + json.dumps({str(k): v for k, v in manifest.offsets().items()})
        )
        check = verify_export(uri, manifest, verify)
        checked = "row counts and checksums" if verify else "row counts"
        say(f"  files against the manifest ({checked}): " + ("; ".join(check.problems) or "match"))
        if check.problems:
            return None
        counts = summarize_export(manifest, check, include_ephemeral)
    source_frame = read_input(spark, uri, kind)
    if "key" not in source_frame.columns or "value" not in source_frame.columns:
        raise ValueError(f"the input needs columns key and value, it has {source_frame.columns}")
    if manifest is None:
        counts = summarize(source_frame, include_ephemeral)
    frame = prepare(source_frame, include_ephemeral)
    with Client(
        target.address, namespace=target.namespace, options=target.client_options()
    ) as client:
        shards = len(client.shard_map.shard_ids())
        empty = not client.list("", KEYS_END, limit=1)
    say(
        f"  rows {counts['rows']:,}, {counts['bytes'] / 1e6:.1f} MB, distinct keys "
        f"{counts['distinct_keys']:,} (a key given twice is written twice, in no set "
        f"order), rows without a key {counts['null_keys']}, ephemeral left out "
        f"{counts['left_out_ephemeral']}"
    )
    say(
        f"  target {target.address} namespace {target.namespace!r}: {shards} shards, "
        + ("empty" if empty else "holds records (create-only leaves them as they are)")
    )
    if counts["null_keys"]:
        say("cairn-restore: rows without a key; nothing written")
        return None
    if dry_run:
        say("cairn-restore: dry run, nothing written")
        return None
    with tempfile.TemporaryDirectory(prefix="cairn-restore-") as scratch:
        summary_path = os.path.join(scratch, "summary.json")
        with Progress(spark, "cairn-restore", "tasks", None) as progress:
            (
                frame.write.format("cairn")
                .options(**options)
                .option("writeMode", mode)
                .option("maxInflightPuts", str(max_inflight_puts))
                .option("summaryPath", summary_path)
                .mode("append")
                .save()
            )
            elapsed_s = progress.elapsed_s()
        with open(summary_path, encoding="utf-8") as handle:
            summary = json.load(handle)
    result = RestoreResult(
        summary["rows"], summary["bytes"], summary["conflicts"], elapsed_s, summary
    )
    say(
        f"cairn-restore: done: {result.rows:,} rows written, {result.conflicts:,} conflicts, "
        f"{result.bytes / 1e6:.1f} MB in {elapsed_s:.1f} s "
        f"({rate(result.rows, elapsed_s):,.0f} rows/s, "
        f"{rate(result.bytes / 1e6, elapsed_s):.1f} MB/s)"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    options = connection_options(args)
    follow_options = (
        connection_options(args, "follow-source-") if args.follow_source_address else None
    )
    spark = job_session("cairn-restore", args.master)
    try:
        result = run(
            spark,
            options,
            args.input,
            args.format,
            args.mode,
            args.dry_run,
            args.verify,
            args.include_ephemeral,
            args.max_inflight_puts,
        )
    finally:
        spark.stop()
    if result is None:
        return 0 if args.dry_run else 1
    if follow_options is not None:
        manifest = load_manifest(destination_uri(args.input))
        if manifest is None:
            say("cairn-restore: --follow-source needs an export (its manifest's offsets)")
            return 1
        reached, counts = follow(
            ConnectionSettings.of(follow_options),
            ConnectionSettings.of(options),
            manifest.offsets(),
        )
        say(
            f"cairn-restore: followed the source to offsets {json.dumps(reached)}: "
            f"{counts.puts} puts, {counts.deletes} deletes, {counts.range_deletes} range "
            f"deletions, {counts.skipped} keys deleted since"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
