"""An export's manifest (manifest.json next to the Parquet files) and the
checksum of a shard's rows.

The checksum is SHA-256 over the shard's rows in the file's order (the shard's
key order), each row as the 8-byte big-endian length of the UTF-8 key, the key,
the 8-byte length of the value, the value. It covers what a restore writes (keys
and values), so a restore can check a file before writing it."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

FORMAT = "cairn-export/1"
MANIFEST_FILE = "manifest.json"
DATA_DIR = "data"
CHECKSUM_OF = (
    "sha256 over the rows in key order, each row as u64be(len(key)) key u64be(len(value)) value"
)

_LENGTH = struct.Struct(">Q")


class RowChecksum:
    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.rows = 0
        self.bytes = 0

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        self.add(zip(keys, values, strict=True))

    def add(self, rows: Iterable[tuple[str, bytes]]) -> None:
        update = self._hash.update
        for key, value in rows:
            raw = key.encode()
            update(_LENGTH.pack(len(raw)))
            update(raw)
            update(_LENGTH.pack(len(value)))
            update(value)
            self.rows += 1
            self.bytes += len(raw) + len(value)

    def hexdigest(self) -> str:
        return "sha256:" + self._hash.hexdigest()


@dataclass(frozen=True, slots=True)
class ShardExport:
    shard: int
    # The snapshot is the shard's state at `offset` (a notification offset): the
    # head noted before the scan (`start_offset`) plus the changes replayed up to it.
    start_offset: int
    offset: int
    hash_range: tuple[int, int]
    rows: int
    bytes: int
    checksum: str
    file: str  # relative to the export's directory
    changes_replayed: int
    values_fetched: int
    rounds: int


@dataclass(frozen=True, slots=True)
class Manifest:
    namespace: str
    source: str
    key_order: str
    key_hash: str
    created: str  # ISO 8601, UTC
    shards: tuple[ShardExport, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def offsets(self) -> dict[int, int]:
        return {s.shard: s.offset for s in self.shards}

    def to_json(self) -> str:
        data: dict[str, Any] = {"format": FORMAT, "checksum_of": CHECKSUM_OF}
        data.update(asdict(self))
        data["rows"] = self.rows
        data["bytes"] = self.bytes
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} manifest (format {data.get('format')!r})")
        shards = tuple(
            ShardExport(**{**s, "hash_range": tuple(s["hash_range"])}) for s in data["shards"]
        )
        return cls(
            data["namespace"],
            data["source"],
            data["key_order"],
            data["key_hash"],
            data["created"],
            shards,
        )
