"""Where a shard replica's KV and WAL live on disk, and how they are opened.

A snapshot install replaces both on disk (snapshot.py) and the replica opens them
again through the same `ShardFiles` it was opened with, so the options a pod chose
(WAL segment size, zero-fill, spare segments) hold after the install too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.storage.kv import KvStore, RocksKv
from cairn.storage.snapshot import SnapshotInstaller, finish_pending_install
from cairn.storage.wal import Wal, WalOptions


@dataclass(frozen=True)
class ShardFiles:
    directory: Path
    wal_options: WalOptions

    def open(self) -> tuple[KvStore, Wal]:
        """The KV and WAL, after finishing a snapshot install that a crash interrupted."""
        self.directory.mkdir(parents=True, exist_ok=True)
        finish_pending_install(self.directory)
        kv = RocksKv(self.directory / "kv")
        try:
            return kv, Wal.open(self.directory / "wal", self.wal_options)
        except BaseException:
            kv.close()
            raise

    def installer(self, local_meta: Sequence[tuple[bytes, bytes]]) -> SnapshotInstaller:
        return SnapshotInstaller(self.directory, local_meta)
