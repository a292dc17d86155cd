"""A shard's WAL stays within its retention, and trimming loses nothing."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from support.processes import StandaloneProcess
from support.wal_files import check_spare, segment_records_end

pytestmark = pytest.mark.e2e
SEGMENT_BYTES = 64 * 1024
RETENTION_BYTES = 256 * 1024


def wal_bytes(data_dir: Path) -> tuple[int, int]:
    """Bytes and count of the WAL's segments (the server may trim one as we look). The
    bytes are the segments' records, which retention bounds: a segment file is longer
    than its records by its zero-filled room (the active one by up to a segment), or
    by a reused spare's older bytes."""
    sizes = []
    for segment in (data_dir / "shards" / "0" / "wal").glob("*.wal"):
        with contextlib.suppress(FileNotFoundError):
            sizes.append(segment_records_end(segment.read_bytes(), int(segment.stem)))
    return sum(sizes), len(sizes)


def spare_files(data_dir: Path) -> list[Path]:
    return list((data_dir / "shards" / "0" / "wal").glob("*.spare"))


@pytest.mark.parametrize("spare_segments", [0, 2])
def test_wal_is_trimmed_to_its_retention_without_losing_writes(
    tmp_path: Path, spare_segments: int
) -> None:
    data_dir = tmp_path / "data"
    server = StandaloneProcess(
        data_dir,
        shards=1,
        extra_args=(
            "--wal-segment-bytes", str(SEGMENT_BYTES),
            "--wal-retention-bytes", str(RETENTION_BYTES),
            "--wal-spare-segments", str(spare_segments),
        ),
    )  # fmt: skip
    try:
        server.start()
        written: dict[str, bytes] = {}
        most_spares = 0
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            for round_number in range(300):  # ~3 MB of WAL, 12x the retention
                puts = []
                for i in range(10):
                    key = f"/r/{(round_number * 10 + i) % 1000:04d}"
                    value = f"{round_number}:{i}".encode() * 100
                    written[key] = value
                    puts.append(pb.PutRequest(key=key, value=value))
                stub.Write(pb.WriteRequest(shard=0, puts=puts))
                most_spares = max(most_spares, len(spare_files(data_dir)))
            deadline = time.monotonic() + 10
            while wal_bytes(data_dir)[0] > RETENTION_BYTES and time.monotonic() < deadline:
                time.sleep(0.2)
                most_spares = max(most_spares, len(spare_files(data_dir)))
        size, segments = wal_bytes(data_dir)
        # Trimmed to within the retention: three sealed segments and the active one's
        # records may be under it, and stay (the trim goes by size, not by segments).
        assert size <= RETENTION_BYTES, (size, segments)
        # Trimmed segments beyond the bound are deleted; up to it, kept as they were
        # until a rollover reuses them (a trim a second, a rollover every few rounds:
        # the rounds see spares between the two whenever there may be any).
        assert most_spares == spare_segments
        spares = spare_files(data_dir)
        assert len(spares) <= spare_segments
        for spare in spares:
            check_spare(spare)
        server.kill()
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            keys = sorted(written)
            gets = [pb.GetRequest(key=k, include_value=True) for k in keys]
            results = [
                g for chunk in stub.Read(pb.ReadRequest(shard=0, gets=gets)) for g in chunk.gets
            ]
            assert [r.value for r in results] == [written[k] for k in keys]
            after = stub.Write(
                pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="/after", value=b"x")])
            )
            assert after.puts[0].status == pb.OK
    finally:
        server.kill()
