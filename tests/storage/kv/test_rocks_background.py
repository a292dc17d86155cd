"""RocksDB's background threads run at a lower priority than the process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Run in a new process: RocksDB's thread pool is shared by every database of a
# process, so in this one earlier tests may already have lowered it.
PROBE = """
import json, os, sys
from pathlib import Path
os.nice(int(sys.argv[2]))
from cairn.storage.kv.rocks import RocksKv
kv = RocksKv(Path(sys.argv[1]))
kv.write([])
tasks = Path("/proc/self/task")
print(json.dumps({
    "process": os.getpriority(os.PRIO_PROCESS, os.getpid()),
    "threads": {
        tid: [(tasks / tid / "comm").read_text().strip(), os.getpriority(os.PRIO_PROCESS, int(tid))]
        for tid in os.listdir(tasks)
    },
}))
kv.close()
"""


def threads_after_open(tmp_path: Path, process_nice: int) -> tuple[int, list[tuple[str, int]]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "kv"), str(process_nice)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    return seen["process"], [tuple(thread) for thread in seen["threads"].values()]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize(("process_nice", "expected"), [(0, 10), (5, 15), (15, 19)])
def test_rocksdb_threads_run_below_the_process(
    tmp_path: Path, process_nice: int, expected: int
) -> None:
    process, threads = threads_after_open(tmp_path, process_nice)
    assert process == process_nice
    background = [nice for name, nice in threads if name.startswith("rocksdb:")]
    assert len(background) >= 2  # at least one flush and one compaction thread
    assert background == [expected] * len(background)
    # Everything else (the event loop, the WAL's sync thread) keeps the process's.
    others = [nice for name, nice in threads if not name.startswith("rocksdb:")]
    assert others and set(others) == {process_nice}
