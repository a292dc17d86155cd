"""The `cairn` and `cairn-changes` data sources against the replicated local
cluster (3 pods, 4 shards, each shard on all three pods, supervised as
`cairn-local` does: a killed pod is restarted), shared by the module's tests
under their own key prefixes. Spark is given every pod's address, as a job on a
real cluster would be, so that losing one pod does not lose the shard map."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds
import pytest

from cairn.bench.failover import FailoverBench, running_cluster
from cairn.client.sync import Client
from cairn.common.keyorder import KeyOrder
from cairn.spark.jobs import audit
from cairn.storage.kv import Column, RocksKv
from support.promtool import samples, scrape

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PODS = 3
SHARDS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverBench]:
    with running_cluster(tmp_path_factory.mktemp("spark-cluster"), PODS, SHARDS) as bench:
        yield bench


def addresses(bench: FailoverBench) -> str:
    return ",".join(bench.cluster.public_address(name) for name in sorted(bench.cluster.pods))


def records(spark: Any, bench: FailoverBench, **options: str) -> Any:
    return spark.read.format("cairn").option("address", addresses(bench)).options(**options).load()


def wait_replicating(bench: FailoverBench, timeout_s: float = 120.0) -> None:
    """Every shard steady with every follower streaming. (Not `wait_settled`, which
    also wants every node's heartbeats current: on a loaded machine they flap
    without the replicas being affected.)"""
    deadline = time.monotonic() + timeout_s

    def replicating() -> bool:
        try:
            shards = bench.shards()
        except httpx.HTTPError:
            return False  # the controller's answer is late: ask again
        return bool(shards) and all(
            s["state"] == "steady"
            and len(s["followers"]) == len(s["ensemble"]) - 1
            and all(f["state"] == "streaming" for f in s["followers"])
            for s in shards
        )

    while not replicating():
        assert time.monotonic() < deadline, bench.shards()
        time.sleep(0.2)


def pod_counter(bench: FailoverBench, name: str) -> float:
    """A counter summed over every pod's shards (leaders and followers)."""
    metrics = bench.cluster.metrics_addresses()
    return sum(
        sum(samples(scrape(metrics[pod]), name).values()) for pod in sorted(bench.cluster.pods)
    )


def test_4_shards_read_as_4_partitions_with_exactly_the_records_written(
    spark: Any, cluster: FailoverBench
) -> None:
    # Written with the client library: the `oxia` 0.2.1 client's close was seen to
    # hang joining its discovery thread against this cluster on a loaded machine
    # (the standalone module reads what the `oxia` client writes).
    written = {}
    with Client(addresses(cluster)) as client:
        for i in range(40):
            written[f"/rep/{i:02d}"] = client.put(f"/rep/{i:02d}", f"value {i}".encode()).version
        updated = client.put("/rep/00", b"again").version
        written["/rep/00"] = updated
        shard_of = {key: client.shard_for(key) for key in written}
    frame = records(spark, cluster).where("key like '/rep/%'")
    assert frame.rdd.getNumPartitions() == SHARDS
    rows = {row.key: row for row in frame.collect()}
    assert set(rows) == set(written)
    for key, version in written.items():
        row = rows[key]
        assert row.shard == shard_of[key], key
        assert row.version_id == version.version_id, key
        assert row.modifications_count == version.modifications_count, key
        assert row.session_id is None
    assert rows["/rep/00"].value == b"again" and rows["/rep/00"].modifications_count == 1
    assert len({row.shard for row in rows.values()}) > 1


def test_prefix_pushdown_reads_only_the_prefix_from_the_pods(
    spark: Any, cluster: FailoverBench
) -> None:
    """The pods' own counters of records sent by range scans: a prefix pushed down
    costs its records only, Spark's filtering costs every record, and both give the
    same rows."""
    with Client(addresses(cluster)) as client:
        for top in ("/pd/a", "/pd/ab", "/pd/b"):
            for i in range(30):
                client.put(f"{top}/{i:02d}", b"x")
        total = sum(1 for shard in client.shard_map.shard_ids() for _ in client.shard_scan(shard))

    def rows_and_records_sent(**options: str) -> tuple[list[tuple[Any, ...]], float]:
        before = pod_counter(cluster, "cairn_shard_scan_records_total")
        frame = records(spark, cluster, **options).where("key like '/pd/a%'")
        rows = sorted(tuple(row) for row in frame.collect())
        return rows, pod_counter(cluster, "cairn_shard_scan_records_total") - before

    pushed, pushed_sent = rows_and_records_sent()
    plain, plain_sent = rows_and_records_sent(pushdown="false")
    assert len(plain) == 60 and pushed == plain  # /pd/a/.. and /pd/ab/..
    assert pushed_sent == len(pushed)
    assert plain_sent == total


def change_log(address: str, prefix: str, starts: dict[str, int]) -> list[tuple[str, str]]:
    """Every change of the keys under `prefix` after the start offsets, read from
    the feeds: (key, type), in offset order per shard."""
    found = []
    with Client(address) as client:
        for shard in client.shard_map.shard_ids():
            head = client.notification_head(shard)
            position = starts[str(shard)]
            while position < head:
                page = client.read_notifications(
                    shard, position, head, idle_timeout_s=2.0, key_prefixes=[prefix]
                )
                if not page:
                    break
                found += [(n.key, n.type.name) for batch in page for n in batch.notifications]
                position = page[-1].offset
    return sorted(found)


def test_the_change_stream_delivers_every_change_once_across_a_leader_failover(
    spark: Any, cluster: FailoverBench, tmp_path: Path
) -> None:
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    address = addresses(cluster)
    with Client(address) as client:
        heads = {str(s): client.notification_head(s) for s in client.shard_map.shard_ids()}

    acknowledged: list[str] = []

    def changes(round_: int, client: Client) -> None:
        for i in range(20):
            key = f"/fo/{round_}/{i:02d}"
            client.put(key, b"v")
            acknowledged.append(key)

    def start_query() -> Any:
        return (
            spark.readStream.format("cairn-changes")
            .option("address", address)
            .option("startingOffsets", json.dumps(heads))
            .option("maxChangesPerTrigger", "25")
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    with Client(address) as client:
        changes(1, client)
        query = start_query()
        try:
            query.processAllAvailable()
            # Kill the pod leading the most shards while the query runs and writes go
            # on: the new leaders serve the same feeds (every replica stores them).
            shards = cluster.shards()
            before = {s["id"]: s["leader"] for s in shards}
            terms = {s["id"]: s["term"] for s in shards}
            victim = max(set(before.values()), key=list(before.values()).count)
            os.kill(cluster.pids(victim)[0], signal.SIGKILL)
            changes(2, client)
            query.processAllAvailable()
        finally:
            query.stop()
        # Every shard the victim led was taken over in a new term (the restarted
        # pod may lead again later: the controller rebalances).
        led = [s for s, leader in before.items() if leader == victim]
        deadline = time.monotonic() + 60.0
        while any(s["term"] <= terms[s["id"]] for s in cluster.shards() if s["id"] in led):
            assert time.monotonic() < deadline, cluster.shards()
            time.sleep(0.2)
        changes(3, client)
    wait_replicating(cluster)
    query = start_query()  # from the checkpoint
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    table = ds.dataset(str(sink), format="parquet").to_table().to_pylist()
    delivered = sorted((row["key"], row["type"]) for row in table)
    assert len({(r["shard"], r["offset"], r["key"]) for r in table}) == len(table), "twice"
    assert delivered == change_log(address, "/fo/", heads)
    assert sorted(key for key, _ in delivered) == sorted(acknowledged)


def test_audit_is_silent_when_healthy_and_names_a_replica_altered_behind_cairns_back(
    cluster: FailoverBench, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in the module: it leaves one replica altered. One follower's RocksDB
    is edited directly, with its pod stopped, then the pod is started again."""
    bench = cluster.cluster
    key = "/audit/07"
    with Client(addresses(cluster)) as client:
        for i in range(20):
            client.put(f"/audit/{i:02d}", b"original")
        shard = client.shard_for(key)
    wait_replicating(cluster)
    command = ["--controller", bench.controller_url, "--insecure", "--timeout-s", "30"]

    assert audit.main([*command, "--report", str(tmp_path / "healthy.json")]) == 0
    out = capsys.readouterr().out
    assert "DIVERGENCE" not in out and "UNCHECKED" not in out, out
    assert f"{SHARDS}/{SHARDS} shards compared ({SHARDS * PODS} replicas)" in out, out

    info = next(s for s in cluster.shards() if s["id"] == shard)
    follower = next(name for name in info["ensemble"] if name != info["leader"])
    bench.restart = False  # the supervisor leaves it stopped while it is edited
    try:
        pod, _ = bench.pods[follower]
        pod.stop()  # SIGTERM: it closes its RocksDB
        (kv_dir,) = (bench.directory / "pods" / follower).glob(f"*/{shard}/kv")
        kv = RocksKv(kv_dir)
        try:
            stored_key = KeyOrder.HIERARCHICAL.encode(key)
            stored = kv.get(Column.RECORDS, stored_key)
            assert stored is not None and stored.count(b"original") == 1
            # Same length, so the record still decodes: only its value differs.
            kv.write([(Column.RECORDS, stored_key, stored.replace(b"original", b"tampered"))])
        finally:
            kv.close()
    finally:
        bench.restart = True
    wait_replicating(cluster)

    assert audit.main([*command, "--report", str(tmp_path / "altered.json")]) == 1
    out = capsys.readouterr().out
    findings = json.loads((tmp_path / "altered.json").read_text())["divergences"]
    assert [(d["shard"], d["replica"]) for d in findings] == [(shard, follower)], out
    (finding,) = findings
    assert f"shard {shard} at offset {finding['offset']}: replica {follower}" in out
    assert finding["offset"] >= info["commitOffset"]
