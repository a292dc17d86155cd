"""The disk's own ceiling: raw appends + fdatasync, measured without any server.

Two probes, each appending to a fresh file in the directory given (put it on the
same disk as the server's data directory):

- per record: `os.write` of one record, then `os.fdatasync`; every sync is one
  latency sample. This is what a WAL that syncs every entry can at best do.
- group commit: `records_per_sync` records joined into one `os.write`, then one
  `os.fdatasync`. This is the ceiling of a WAL that folds many entries per sync.

The file is truncated back to empty whenever it reaches `max_file_bytes`, so a
long probe on a fast disk stays bounded in space (a WAL rotates segments too).

With `zero_filled`, the file is first filled with `zero_filled_bytes` of zeros and
synced, and the records are written over them (from the start again when they
reach the end): what the WAL does with its zero-filled room, where an fdatasync
has no file growth to commit.
Blocking code: call it from a thread when inside an event loop.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from cairn.common.histogram import Histogram

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_ZERO_FILLED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FsyncSpec:
    directory: Path
    duration_s: float
    warmup_s: float
    record_size_bytes: int = 100
    records_per_sync: int = 1
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    zero_filled: bool = False
    zero_filled_bytes: int = DEFAULT_ZERO_FILLED_BYTES


@dataclass(slots=True)
class FsyncResult:
    spec: FsyncSpec
    syncs: int
    records: int
    elapsed_s: float
    latency: Histogram  # one sample per write + fdatasync
    cpu_s: float  # this process's CPU time in the measured window

    @property
    def syncs_per_s(self) -> float:
        return self.syncs / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run_fsync_probe(spec: FsyncSpec) -> FsyncResult:
    """Append and sync for warmup + duration; figures cover the duration only."""
    if spec.records_per_sync < 1 or spec.record_size_bytes < 1:
        raise ValueError("records_per_sync and record_size_bytes must be at least 1")
    record = os.urandom(spec.record_size_bytes)
    chunk = record * spec.records_per_sync
    path = spec.directory / f"cairn-bench-fsync-{os.getpid()}-{time.monotonic_ns()}.probe"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | (0 if spec.zero_filled else os.O_APPEND)
    fd = os.open(path, flags, 0o600)
    latency = Histogram()
    syncs = 0
    try:
        room_bytes = max(spec.zero_filled_bytes, len(chunk))
        if spec.zero_filled:
            _fill_with_zeros(fd, room_bytes)
        start_s = time.perf_counter()
        measure_start_s = start_s + spec.warmup_s
        end_s = measure_start_s + spec.duration_s
        cpu_start_s = time.process_time()
        measuring = spec.warmup_s <= 0
        file_bytes = 0
        now_s = start_s
        while now_s < end_s:
            if spec.zero_filled:
                if file_bytes + len(chunk) > room_bytes:
                    file_bytes = 0
            elif file_bytes + len(chunk) > spec.max_file_bytes:
                os.ftruncate(fd, 0)
                os.fsync(fd)
                file_bytes = 0
            before_s = time.perf_counter()
            written = os.pwrite(fd, chunk, file_bytes) if spec.zero_filled else os.write(fd, chunk)
            os.fdatasync(fd)
            now_s = time.perf_counter()
            if written != len(chunk):
                raise OSError(f"short write to {path}: {written} of {len(chunk)} bytes")
            file_bytes += written
            if not measuring and before_s >= measure_start_s:
                measuring = True
                cpu_start_s = time.process_time()
            if measuring:
                latency.record_s(now_s - before_s)
                syncs += 1
        cpu_s = time.process_time() - cpu_start_s
        elapsed_s = now_s - max(measure_start_s, start_s)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return FsyncResult(
        spec=spec,
        syncs=syncs,
        records=syncs * spec.records_per_sync,
        elapsed_s=elapsed_s,
        latency=latency,
        cpu_s=cpu_s,
    )


def _fill_with_zeros(fd: int, size_bytes: int) -> None:
    zeros = bytes(min(size_bytes, 1024 * 1024))
    written = 0
    while written < size_bytes:
        written += os.write(fd, zeros[: size_bytes - written])
    os.fsync(fd)
