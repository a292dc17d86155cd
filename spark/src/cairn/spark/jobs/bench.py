"""Export and restore against the client library's own bulk write, in one window.

    python -m cairn.spark.jobs.bench --address SRC:6648 --target-address DST:6648 \\
        --rows 100000 --value-bytes 100 --master 'local[2]'

1. The client library writes `--rows` records under /bench/ into the source
   (one process, `--inflight` puts at once, batched per shard by the client).
2. cairn-export exports the source's namespace to a scratch directory.
3. cairn-restore writes the export into the target (an empty namespace).
Each step prints rows/s and MB/s (key + value bytes). A program, not a test.

Spark's first write and first read through a Python data source in a session
take some 20 s more than the next ones here (classes loaded, Python workers
started): a warm-up writes one record (/bench-warmup/0, exported too) and reads
it back before anything is timed."""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Sequence

from cairn.client.client import AsyncClient
from cairn.common.version import add_version_option
from cairn.spark import DISTRIBUTION
from cairn.spark.jobs import export, restore
from cairn.spark.jobs.common import job_session
from cairn.spark.jobs.progress import rate, say
from cairn.spark.jobs.snapshot import SnapshotSettings


async def client_bulk_write(address: str, rows: int, value_bytes: int, inflight: int) -> float:
    """Seconds to put the rows through the client library."""
    value = os.urandom(value_bytes)
    async with await AsyncClient.connect(address) as client:
        started = time.monotonic()
        for first in range(0, rows, inflight):
            await asyncio.gather(
                *(
                    client.put(f"/bench/{i:08d}", value)
                    for i in range(first, min(first + inflight, rows))
                )
            )
        return time.monotonic() - started


def line(step: str, rows: int, size_bytes: int, elapsed_s: float) -> str:
    return (
        f"{step:<22} {rows:>9,} rows {size_bytes / 1e6:>8.1f} MB {elapsed_s:>7.1f} s "
        f"{rate(rows, elapsed_s):>9,.0f} rows/s {rate(size_bytes / 1e6, elapsed_s):>6.1f} MB/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cairn-spark-bench", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--address", required=True, help="the source (written, exported)")
    parser.add_argument("--target-address", required=True, help="the restore's target")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--inflight", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    key_bytes = len("/bench/00000000")
    size = args.rows * (key_bytes + args.value_bytes)
    write_s = asyncio.run(
        client_bulk_write(args.address, args.rows, args.value_bytes, args.inflight)
    )
    spark = job_session("cairn-spark-bench", args.master)
    try:
        warm_up = spark.createDataFrame([("/bench-warmup/0", b"w")], "key string, value binary")
        warm_up.write.format("cairn").option("address", args.address).mode("append").save()
        spark.read.format("cairn").option("address", args.address).load().limit(1).collect()
        with tempfile.TemporaryDirectory(prefix="cairn-bench-") as scratch:
            started = time.monotonic()
            manifest = export.run(
                spark,
                {"address": args.address},
                os.path.join(scratch, "export"),
                SnapshotSettings(10_000, 0.5, 10),
            )
            export_s = time.monotonic() - started
            result = restore.run(
                spark, {"address": args.target_address}, os.path.join(scratch, "export")
            )
    finally:
        spark.stop()
    assert result is not None
    say("")
    say(line("client bulk write", args.rows, size, write_s))
    say(line("cairn-export", manifest.rows, manifest.bytes, export_s))
    say(line("cairn-restore (write)", result.rows, result.bytes, result.elapsed_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
