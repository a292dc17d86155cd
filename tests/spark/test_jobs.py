"""The jobs on a real Spark (the run's one session, conftest.py) against real
standalone servers: cairn-export while writes run, cairn-restore into an empty
server, then the source's changes after the manifest's offsets; bulk loads from
CSV and JSON with the dry-run summary first."""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.records import NotificationType
from cairn.client.scans import KEYS_END
from cairn.client.sync import Client
from cairn.common.keyorder import KeyOrder
from cairn.spark.jobs import cdc, export, restore
from cairn.spark.jobs.follow import follow
from cairn.spark.jobs.snapshot import SnapshotSettings
from cairn.spark.options import ConnectionSettings
from support.processes import StandaloneProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PRELOADED = 10_000
# The writer's pace: its writes overlap the export whatever the machine's speed,
# and the changes to follow afterwards stay in the thousands.
WRITE_INTERVAL_S = 0.005
# Exports tried until one sees writes made while it ran.
EXPORT_ATTEMPTS = 5


@pytest.fixture
def source(tmp_path: Path) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path / "source", 4)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[StandaloneProcess]:
    # Another layout than the source's: a restore goes by keys, not by shards.
    process = StandaloneProcess(tmp_path / "target", 3)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def preloaded_value(key: str) -> bytes:
    return b"preloaded " + key.encode()


async def preload(address: str) -> None:
    async with await AsyncClient.connect(address) as client:
        keys = [f"/pitr/{i:05d}" for i in range(PRELOADED)]
        for first in range(0, PRELOADED, 1000):
            chunk = keys[first : first + 1000]
            await asyncio.gather(*(client.put(key, preloaded_value(key)) for key in chunk))


class Writer(threading.Thread):
    """Puts, deletes and range deletions under /pitr/ until stopped, recording
    the value of every acknowledged put by (key, version id)."""

    def __init__(self, address: str) -> None:
        super().__init__(name="pitr-writer", daemon=True)
        self.address = address
        self.values: dict[tuple[str, int], bytes] = {}
        self.operations = 0
        self.stop = threading.Event()
        self.writing = threading.Event()  # set once its first writes were answered
        self.error: BaseException | None = None

    def run(self) -> None:
        chooser = random.Random(42)
        try:
            with Client(self.address) as client:
                while not self.stop.wait(WRITE_INTERVAL_S):
                    self.operations += 1
                    if self.operations == 20:
                        self.writing.set()
                    n = chooser.randrange(PRELOADED)
                    key = f"/pitr/{n:05d}"
                    roll = chooser.random()
                    if roll < 0.6:
                        value = f"write {self.operations}".encode()
                        result = client.put(key, value)
                        self.values[(key, result.version.version_id)] = value
                    elif roll < 0.7:
                        fresh = f"/pitr/new/{self.operations}"
                        result = client.put(fresh, b"fresh")
                        self.values[(fresh, result.version.version_id)] = b"fresh"
                    elif roll < 0.995:
                        with contextlib.suppress(errors.KeyNotFound):
                            client.delete(key)  # absent when deleted before: fine
                    else:
                        client.delete_range(f"/pitr/{n:05d}"[:-1], f"/pitr/{n // 10 + 1:04d}")
        except BaseException as error:  # reported by the test
            self.error = error

    def value(self, key: str, version_id: int) -> bytes:
        return self.values.get((key, version_id), preloaded_value(key))


def state_at(address: str, offsets: dict[int, int], writer: Writer) -> dict[str, bytes]:
    """The source's records at the offsets, from its notification feeds (every
    change since the server started) and the writer's acknowledged values."""
    encode = KeyOrder.HIERARCHICAL.encode
    state: dict[str, bytes] = {}
    with Client(address) as client:
        for shard, end in offsets.items():
            after = -1
            while after < end:
                page = client.read_notifications(shard, after, end, idle_timeout_s=2.0)
                if not page:
                    break
                for batch in page:
                    for change in batch.notifications:
                        if change.type is NotificationType.DELETED:
                            state.pop(change.key, None)
                        elif change.type is NotificationType.RANGE_DELETED:
                            first, last = encode(change.key), encode(change.key_range_last or "")
                            for key in [k for k in state if first <= encode(k) < last]:
                                if client.shard_for(key) == shard:
                                    del state[key]
                        else:
                            assert change.version_id is not None
                            state[change.key] = writer.value(change.key, change.version_id)
                after = page[-1].offset
    return state


def contents(address: str) -> dict[str, bytes]:
    with Client(address) as client:
        return {r.key: r.value or b"" for r in client.range_scan("", KEYS_END)}


def test_export_while_writing_restores_the_state_at_the_manifest_offsets_then_follows(
    spark: Any,
    source: StandaloneProcess,
    target: StandaloneProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(preload(source.address))
    writer = Writer(source.address)
    writer.start()
    assert writer.writing.wait(60), writer.error
    try:
        # What this test is about needs writes during the export: on a busy machine
        # the writer can be held up for all of a short one, so export again until one
        # replayed changes (each export is complete and checked the same way).
        for attempt in range(EXPORT_ATTEMPTS):
            output = tmp_path / f"export-{attempt}"
            manifest = export.run(
                spark, {"address": source.address}, str(output), SnapshotSettings(1000, 0.5, 10)
            )
            printed = capsys.readouterr().out
            assert "cairn-export: done:" in printed and f"{manifest.rows:,} rows" in printed
            if sum(s.changes_replayed for s in manifest.shards) > 0:
                break
    finally:
        writer.stop.set()
        writer.join()
    assert writer.error is None, writer.error
    assert len(manifest.shards) == 4
    assert sum(s.changes_replayed for s in manifest.shards) > 0, "no write during any export"
    assert all(s.offset >= s.start_offset for s in manifest.shards)
    expected = state_at(source.address, manifest.offsets(), writer)
    assert manifest.rows == len(expected)

    # The dry run writes nothing; the restore writes the state at the offsets.
    assert restore.run(spark, {"address": target.address}, str(output), dry_run=True) is None
    printed = capsys.readouterr().out
    assert "files against the manifest (row counts): match" in printed
    assert f"rows {manifest.rows:,}" in printed and "dry run, nothing written" in printed
    assert contents(target.address) == {}
    result = restore.run(spark, {"address": target.address}, str(output), verify=True)
    assert result is not None and result.rows == manifest.rows and result.conflicts == 0
    assert "cairn-restore: done:" in capsys.readouterr().out
    assert contents(target.address) == expected

    # Again, create-only: every row conflicts, nothing changes (idempotent).
    again = restore.run(spark, {"address": target.address}, str(output), mode="create-only")
    assert again is not None and again.rows == 0 and again.conflicts == manifest.rows
    assert contents(target.address) == expected

    # The source's changes after the offsets bring the target to its state now.
    reached, counts = follow(
        ConnectionSettings.of({"address": source.address}),
        ConnectionSettings.of({"address": target.address}),
        manifest.offsets(),
    )
    assert counts.puts + counts.deletes > 0
    assert all(reached[shard] >= offset for shard, offset in manifest.offsets().items())
    assert contents(target.address) == contents(source.address)


def test_bulk_load_from_csv_and_json_with_a_dry_run_first(
    spark: Any, target: StandaloneProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "keys.csv"
    csv.write_text("key,value\n" + "".join(f"/csv/{i},v{i}\n" for i in range(50)))
    jsonl = tmp_path / "keys.json"
    jsonl.write_text("".join(f'{{"key": "/json/{i}", "value": "j{i}"}}\n' for i in range(30)))
    options = {"address": target.address}
    assert restore.run(spark, options, str(csv), kind="csv", dry_run=True) is None
    assert "rows 50," in capsys.readouterr().out and contents(target.address) == {}
    loaded = restore.run(spark, options, str(csv), kind="csv")
    assert loaded is not None and loaded.rows == 50
    loaded = restore.run(spark, options, str(jsonl), kind="json", mode="create-only")
    assert loaded is not None and loaded.rows == 30
    expected = {f"/csv/{i}": f"v{i}".encode() for i in range(50)}
    expected.update({f"/json/{i}": f"j{i}".encode() for i in range(30)})
    assert contents(target.address) == expected


def test_the_jobs_are_console_scripts_and_module_files() -> None:
    # A console script (cairn-export), and a module file as spark-submit runs it.
    commands = {
        "export": [str(Path(sys.executable).parent / "cairn-export"), "--help"],
        "restore": [sys.executable, str(restore.__file__), "--help"],
    }
    for job, command in commands.items():
        shown = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        assert f"usage: cairn-{job}" in shown.stdout and "--address" in shown.stdout


def test_cdc_stopped_and_started_again_writes_every_change_once(
    spark: Any, target: StandaloneProcess, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "changes", tmp_path / "checkpoint"

    def changes(round_: int) -> None:
        with Client(target.address) as client:
            for i in range(20):
                client.put(f"/cdc/{round_}/{i:02d}", b"v")
            for i in range(0, 20, 4):
                client.delete(f"/cdc/{round_}/{i:02d}")

    def run_once() -> None:
        options = {"address": target.address}
        cdc.start(spark, options, str(output), str(checkpoint), once=True).awaitTermination()

    changes(1)
    run_once()
    changes(2)
    run_once()
    rows = ds.dataset(str(output), format="parquet").to_table().to_pylist()
    delivered = [(r["shard"], r["offset"], r["key"], r["type"]) for r in rows]
    assert len(delivered) == len(set(delivered)), "a change was written twice"
    expected = {(f"/cdc/{n}/{i:02d}", "CREATED") for n in (1, 2) for i in range(20)}
    expected |= {(f"/cdc/{n}/{i:02d}", "DELETED") for n in (1, 2) for i in range(0, 20, 4)}
    assert sorted((key, kind) for _, _, key, kind in delivered) == sorted(expected)
