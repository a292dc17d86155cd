"""The `cairn` and `cairn-changes` data sources on a real Spark (local[2], the
run's one session: see conftest.py) against a real standalone server with 4
shards, shared by the module's tests (each under its own key prefix)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oxia
import pyarrow.dataset as ds
import pytest

from cairn.client.sync import Client
from cairn.common.identity import Role
from cairn.spark.options import ConnectionSettings, ReadSettings
from cairn.spark.read import CairnPushdownReader
from support.processes import StandaloneProcess
from support.promtool import samples, scrape
from support.tls import TestCertificates

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHARDS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path_factory.mktemp("spark-server"), SHARDS)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def records(spark: Any, address: str, **options: str) -> Any:
    return spark.read.format("cairn").option("address", address).options(**options).load()


def test_a_4_shard_namespace_reads_as_4_partitions_with_exactly_the_records_written(
    spark: Any, server: StandaloneProcess
) -> None:
    written: dict[str, Any] = {}
    # The oxia client routes by its own hash (xxh64): its records land on the shards
    # it chose, and the source reads every shard, so all of them show up.
    with oxia.Client(server.address) as oxia_client:
        for i in range(40):
            key, version = oxia_client.put(f"/oxia/{i:02d}", f"value {i}".encode())
            written[key] = version
        _, updated = oxia_client.put("/oxia/00", b"again")
        written["/oxia/00"] = updated
        key, version = oxia_client.put("/oxia/ephemeral", b"e", ephemeral=True)
        written[key] = version
        indexed_key, indexed = oxia_client.put(
            "/oxia/indexed", b"i", secondary_indexes={"by-name": "alice"}
        )
        written[indexed_key] = indexed

        frame = records(spark, server.address).where("key like '/oxia/%'")
        assert frame.rdd.getNumPartitions() == SHARDS
        rows = {row.key: row for row in frame.collect()}
    assert set(rows) == set(written)
    for key, version in written.items():
        row = rows[key]
        assert row.namespace == "default" and 0 <= row.shard < SHARDS
        assert row.version_id == version.version_id()
        assert row.modifications_count == version.modifications_count()
        assert row.created_timestamp == round(version.created_timestamp().timestamp() * 1000)
        assert row.modified_timestamp == round(version.modified_timestamp().timestamp() * 1000)
        assert row.session_id == version.session_id()
        assert row.client_identity == version.client_identity()
        assert row.partition_key is None
    assert rows["/oxia/00"].value == b"again" and rows["/oxia/00"].modifications_count == 1
    assert rows["/oxia/ephemeral"].session_id is not None
    assert rows["/oxia/ephemeral"].client_identity
    assert rows["/oxia/05"].session_id is None and rows["/oxia/05"].client_identity is None


def test_prefix_pushdown_reads_only_the_prefix_and_returns_the_same_rows(
    spark: Any, server: StandaloneProcess
) -> None:
    with Client(server.address) as client:
        for top in ("/p/a", "/p/ab", "/p/b", "/q"):
            for i in range(25):
                client.put(f"{top}/{i:02d}", b"x")
                client.put(f"{top}/{i:02d}/deeper/{i}", b"y")
        client.put("/p/a", b"leaf")
        shard_of = {key: client.shard_for(key) for key in ("/p/a/03", "/p/b/07")}

    def rows(frame: Any) -> list[tuple[Any, ...]]:
        return sorted(tuple(row) for row in frame.collect())

    pushed = records(spark, server.address).where("key like '/p/a%'")
    plain = records(spark, server.address, pushdown="false").where("key like '/p/a%'")
    expected = rows(plain)
    assert len(expected) == 101  # /p/a, then 50 under /p/a/ and 50 under /p/ab/
    assert rows(pushed) == expected
    assert all(row[2].startswith("/p/a") for row in expected)
    plan = pushed._jdf.queryExecution().optimizedPlan().toString()
    assert "StartsWith" not in plan or "PythonDataSource" in plan

    # What the reader receives from the pods: only the prefix's records.
    reader = CairnPushdownReader(
        ConnectionSettings.of({"address": server.address}), ReadSettings.of({})
    )
    from pyspark.sql.datasource import StringStartsWith

    assert reader.pushFilters([StringStartsWith(("key",), "/p/a")]) == []
    received = []
    original = Client.shard_scan

    def counting(self: Client, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for record in original(self, *args, **kwargs):
            received.append(record.key)
            yield record

    Client.shard_scan = counting  # type: ignore[method-assign]
    try:
        partitions = reader.partitions()
        read_rows = sum(batch.num_rows for p in partitions for batch in reader.read(p))
    finally:
        Client.shard_scan = original  # type: ignore[method-assign]
    assert len(partitions) == SHARDS
    assert read_rows == len(expected) == len(received)
    assert all(key.startswith("/p/a") for key in received)

    # Other pushed filters: ranges, keys, shards; the same rows as Spark's own filtering.
    for condition in (
        "key >= '/p/a/' and key < '/p/a/10'",
        "key in ('/p/a/03', '/p/b/07', '/nope')",
        f"shard = {shard_of['/p/a/03']} and key like '/p/%'",
    ):
        assert rows(records(spark, server.address).where(condition)) == rows(
            records(spark, server.address, pushdown="false").where(condition)
        ), condition


def test_bulk_write_reads_back_equal_and_create_only_changes_nothing(
    spark: Any, server: StandaloneProcess, tmp_path: Path
) -> None:
    count = 100_000
    source = spark.range(count).selectExpr(
        "concat('/bulk/', lpad(cast(id as string), 6, '0')) as key",
        "cast(concat('value-', cast(id as string)) as binary) as value",
    )
    started = time.monotonic()
    summary_path = tmp_path / "upsert.json"
    (
        source.write.format("cairn")
        .option("address", server.address)
        .option("summaryPath", str(summary_path))
        .mode("append")
        .save()
    )
    elapsed_s = time.monotonic() - started
    summary = json.loads(summary_path.read_text())
    assert summary["rows"] == count and summary["conflicts"] == 0
    assert sum(s["rows"] for s in summary["shards"].values()) == count
    assert len(summary["shards"]) == SHARDS
    print(f"bulk write: {count} rows in {elapsed_s:.1f} s ({count / elapsed_s:.0f} rows/s)")

    # Read back through the `oxia` client (its range scan asks every shard): a
    # reader independent of the data source's own client library.
    with oxia.Client(server.address) as oxia_client:
        before = {
            key: (value, version.version_id())
            for key, value, version in oxia_client.range_scan("/bulk/", "/bulk//")
        }
    assert len(before) == count
    assert {key: value for key, (value, _) in before.items()} == {
        f"/bulk/{i:06d}": f"value-{i}".encode() for i in range(count)
    }

    again_path = tmp_path / "create-only.json"
    (
        source.write.format("cairn")
        .option("address", server.address)
        .option("writeMode", "create-only")
        .option("summaryPath", str(again_path))
        .mode("append")
        .save()
    )
    again = json.loads(again_path.read_text())
    assert again["rows"] == 0 and again["conflicts"] == count
    # Every record as it was, value and version, read with Cairn's client this time:
    # the oxia client's pure-Python scan of 100,000 records costs several times more.
    with Client(server.address) as client:
        after = {
            record.key: (record.value, record.version.version_id)
            for record in client.range_scan("/bulk/", "/bulk//")
        }
    assert after == before


def test_reads_and_writes_over_tls(spark: Any, tmp_path: Path) -> None:
    certs = TestCertificates(tmp_path / "certs")
    pod_dir = certs.component(Role.STORAGE, "storage-0")
    secure = StandaloneProcess(tmp_path / "tls-server", 2, ("--tls-dir", str(pod_dir)))
    secure.start()
    try:
        frame = spark.createDataFrame(
            [(f"/tls/{i}", b"secret") for i in range(10)], "key string, value binary"
        )
        tls = {"address": secure.address, "tlsCaFile": str(certs.ca_file)}
        frame.write.format("cairn").options(**tls).mode("append").save()
        # With the pod's own directory (cert-manager's layout): mutual TLS.
        back = records(spark, secure.address, tlsDir=str(pod_dir)).collect()
        assert sorted((row.key, row.value) for row in back) == sorted(
            (f"/tls/{i}", b"secret") for i in range(10)
        )
        assert {row.shard for row in back} == {0, 1}
    finally:
        secure.stop()


def test_overwrite_needs_a_prefix_and_replaces_only_it(
    spark: Any, server: StandaloneProcess
) -> None:
    with Client(server.address) as client:
        for key in ("/ow/old/1", "/ow/old/2/deep", "/ow/keep"):
            client.put(key, b"old")
        frame = spark.createDataFrame([("/ow/old/3", b"new")], "key string, value binary")
        with pytest.raises(Exception, match="prefix"):
            frame.write.format("cairn").option("address", server.address).mode("overwrite").save()
        (
            frame.write.format("cairn")
            .option("address", server.address)
            .option("prefix", "/ow/old/")
            .mode("overwrite")
            .save()
        )
        assert client.list("/ow/", "/ow//") == ["/ow/keep"]
        assert client.list("/ow/old/", "/ow/old//") == ["/ow/old/3"]
        assert client.get("/ow/old/3").value == b"new"
        assert client.list("/ow/old//", "/ow/old0/") == []


def change_log(
    address: str, prefix: str, starts: dict[str, int]
) -> list[tuple[int, int, str, str]]:
    """Every change of the keys under `prefix` after the start offsets, read straight
    from the feeds: (shard, offset, key, type)."""
    found = []
    with Client(address) as client:
        for shard in client.shard_map.shard_ids():
            head = client.notification_head(shard)
            position = starts[str(shard)]
            while position < head:
                page = client.read_notifications(shard, position, head, idle_timeout_s=2.0)
                if not page:
                    break  # caught up: the entries up to the head changed nothing
                found += [
                    (batch.shard, batch.offset, n.key, n.type.name)
                    for batch in page
                    for n in batch.notifications
                    if n.key.startswith(prefix)
                ]
                position = page[-1].offset
    return sorted(found)


def test_the_change_stream_delivers_every_change_once_across_restarts(
    spark: Any, server: StandaloneProcess, tmp_path: Path
) -> None:
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def changes(round_: int) -> None:
        with Client(server.address) as client:
            for i in range(30):
                client.put(f"/cdc/{round_}/{i:02d}", b"v")
            for i in range(0, 30, 3):
                client.put(f"/cdc/{round_}/{i:02d}", b"w")
            for i in range(0, 30, 5):
                client.delete(f"/cdc/{round_}/{i:02d}")
            client.delete_range(f"/cdc/{round_}/2", f"/cdc/{round_}/3")

    # From the feeds' heads now: the module's other tests wrote 100,000 changes
    # before, which "earliest" would stream too.
    with Client(server.address) as client:
        heads = {str(s): client.notification_head(s) for s in client.shard_map.shard_ids()}

    def run_query() -> None:
        query = (
            spark.readStream.format("cairn-changes")
            .option("address", server.address)
            .option("startingOffsets", json.dumps(heads))
            .option("maxChangesPerTrigger", "40")
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    changes(1)
    run_query()
    changes(2)
    server.stop()
    server.start()  # a new port: the query's next run is given the new address
    changes(3)
    run_query()

    table = ds.dataset(str(sink), format="parquet").to_table()
    delivered = sorted(
        (row["shard"], row["offset"], row["key"], row["type"])
        for row in table.to_pylist()
        if row["key"].startswith("/cdc/")
    )
    expected = change_log(server.address, "/cdc/", heads)
    assert len(delivered) == len(set(delivered)), "a change was delivered twice"
    assert delivered == expected
    # The read limit: at most 40 changes a micro-batch (every entry here changed one
    # key, or a range), so at least this many batches were planned.
    micro_batches = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    assert len(micro_batches) >= -(-len(delivered) // 40)
    kinds = {change[3] for change in delivered}
    assert kinds == {"CREATED", "MODIFIED", "DELETED", "RANGE_DELETED"}
    ranges = [row for row in table.to_pylist() if row["type"] == "RANGE_DELETED"]
    assert ranges and all(row["key_range_end"] for row in ranges)


METRICS_PREFIX = "cairn-storage metrics on http://"


def notification_batches_sent(server: StandaloneProcess) -> float:
    """Notification batches the server has sent since it started, over its shards."""

    # Printed right after the client address, which start() waited for.
    deadline = time.monotonic() + 30.0
    while not (found := [line for line in server.output if line.startswith(METRICS_PREFIX)]):
        assert time.monotonic() < deadline, server.log_text()
        time.sleep(0.05)
    page = scrape(found[-1][len(METRICS_PREFIX) :].strip().removesuffix("/metrics"))
    return sum(samples(page, "cairn_notification_batches_sent_total").values())


def test_the_change_stream_passes_key_prefixes_to_the_pods(
    spark: Any, server: StandaloneProcess, tmp_path: Path
) -> None:
    """`keyPrefix` reaches the pods as the subscription's key prefixes: only the
    matching changes arrive, exactly once across a restart of the query, and the
    server sends fewer batches than to an unfiltered stream of the same changes."""
    with Client(server.address) as client:
        heads = {str(s): client.notification_head(s) for s in client.shard_map.shard_ids()}

    def changes(round_: int) -> None:
        with Client(server.address) as client:
            for i in range(10):
                client.put(f"/nf/in/{round_}/{i}", b"v")
                for j in range(4):
                    client.put(f"/nf/out/{round_}/{i}/{j}", b"v")
            client.delete(f"/nf/in/{round_}/3")
            # A range deletion that can cover watched keys, and one that cannot.
            client.delete_range(f"/nf/in/{round_}/5", f"/nf/in/{round_}/7")
            client.delete_range(f"/nf/out/{round_}/5", f"/nf/out/{round_}/7")

    def run_query(sink: Path, checkpoint: Path, **options: str) -> float:
        """Batches the server sent while the query ran."""
        before = notification_batches_sent(server)
        query = (
            spark.readStream.format("cairn-changes")
            .option("address", server.address)
            .option("startingOffsets", json.dumps(heads))
            .options(**options)
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        finally:
            query.stop()
        return notification_batches_sent(server) - before

    def delivered(sink: Path) -> list[tuple[int, int, str, str]]:
        table = ds.dataset(str(sink), format="parquet").to_table()
        return sorted(
            (row["shard"], row["offset"], row["key"], row["type"]) for row in table.to_pylist()
        )

    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    changes(1)
    filtered_sent = run_query(sink, checkpoint, keyPrefix="/nf/in/")
    changes(2)
    filtered_sent += run_query(sink, checkpoint, keyPrefix="/nf/in/")
    got = delivered(sink)
    assert len(got) == len(set(got)), "a change was delivered twice"
    assert got == change_log(server.address, "/nf/in/", heads)
    assert {change[3] for change in got} == {"CREATED", "DELETED", "RANGE_DELETED"}

    everything = tmp_path / "everything"
    unfiltered_sent = run_query(everything, tmp_path / "everything-checkpoint")
    assert [c for c in delivered(everything) if c[2].startswith("/nf/in/")] == got
    # 22 of the 102 entries of the two rounds match; the stream reads each batch
    # twice (to plan, then in the task), plus empty batches telling the offset.
    assert filtered_sent * 2 < unfiltered_sent, (filtered_sent, unfiltered_sent)
