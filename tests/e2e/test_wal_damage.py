"""A storage server whose WAL tail was torn or corrupted restarts to the last good
record: a torn append after it loses nothing; damage to the last record itself (the
disk corrupting a synced record, which no crash does) loses that record alone,
whole, since the KV's unflushed writes went with the process."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.storage.wal.record import BadRecordError, TornRecordError, decode
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e


def write_all(address: str, keys: list[str]) -> dict[str, int]:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        versions = {}
        for key in keys:
            request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=key.encode())])
            versions[key] = stub.Write(request).puts[0].version.version_id
        return versions


def read_all(address: str, keys: list[str]) -> dict[str, int]:
    """The versions of the keys found (each holding its own name as value)."""
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        gets = [pb.GetRequest(key=key, include_value=True) for key in keys]
        results = [
            get for chunk in stub.Read(pb.ReadRequest(shard=0, gets=gets)) for get in chunk.gets
        ]
        assert len(results) == len(keys)
        found = {}
        for key, result in zip(keys, results, strict=True):
            if result.status == pb.KEY_NOT_FOUND:
                continue
            assert result.status == pb.OK, key
            assert result.value == key.encode()
            found[key] = result.version.version_id
        return found


def last_segment(data_dir: Path) -> Path:
    return sorted((data_dir / "shards" / "0" / "wal").glob("*.wal"))[-1]


def records_end(segment: Path) -> int:
    """Where the segment's last record ends: the file goes on with zero-filled room."""
    data = segment.read_bytes()
    cursor = 0
    while True:
        try:
            _, cursor = decode(data, cursor, len(data))
        except (TornRecordError, BadRecordError):
            return cursor


@pytest.mark.parametrize("damage", ["cut-mid-record", "flip-last-record", "append-garbage"])
def test_restart_after_wal_tail_damage(tmp_path: Path, damage: str) -> None:
    data_dir = tmp_path / "data"
    server = StandaloneProcess(data_dir, shards=1)
    try:
        server.start()
        first = write_all(server.address, [f"/w/{i}" for i in range(50)])
        server.kill()
        segment = last_segment(data_dir)
        end = records_end(segment)
        assert end > 0
        if damage == "cut-mid-record":
            os.truncate(segment, end - 7)
        elif damage == "flip-last-record":
            with open(segment, "r+b") as handle:
                handle.seek(end - 3)
                byte = handle.read(1)
                handle.seek(end - 3)
                handle.write(bytes((byte[0] ^ 0xFF,)))
        else:
            # Into the zero-filled room after the last record, as a torn append leaves it.
            with open(segment, "r+b") as handle:
                handle.seek(end)
                handle.write(b"\x00\x13garbage-after-the-last-record")
        server.start()
        kept = read_all(server.address, list(first))
        if damage == "append-garbage":
            # Every acknowledged write is there with its version.
            assert kept == first
        else:
            # Everything before the damaged record is there with its version; the
            # damaged record's one write is gone.
            assert kept == {key: first[key] for key in list(first)[:-1]}
        # The server takes new writes after what it kept.
        second = write_all(server.address, [f"/x/{i}" for i in range(20)])
        assert min(second.values()) > max(kept.values())
        server.kill()
        server.start()
        assert read_all(server.address, [*first, *second]) == {**kept, **second}
        assert server.stop() == 0
    finally:
        server.kill()
