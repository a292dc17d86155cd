"""RocksDB's background threads (flushes, compactions) run at a lower CPU priority.

They work in bursts: a flushed memtable, a compaction of a few tables. Where the
pods of a cluster share cores (with each other, with clients, with anything), a
burst takes a core from an event loop that is answering clients, and every request
in flight waits for it. At a higher nice value the scheduler runs them in the time
the loops leave; where cores are spare, as on a pod with its own, it changes
nothing. On shared cores it cut rf=3 write p99 at half peak and did not move the
peaks (measurements: docs/performance.md, "RocksDB background thread priority").
Flushes still get a share of the CPU, and if they fall behind RocksDB
slows writes down itself (its write stall), so nothing waits on them forever.

Linux names the threads (`rocksdb:low`, `rocksdb:high`, ...); elsewhere, or
without /proc, this does nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

BACKGROUND_NICE = 10  # above the process's own
THREAD_NAME_PREFIX = "rocksdb:"
MAX_NICE = 19
_TASKS = Path("/proc/self/task")


def lower_background_priority() -> None:
    """Raise the nice value of this process's RocksDB threads to BACKGROUND_NICE
    above the process's own (never lowering one already higher). Idempotent: call
    it after each database opens (RocksDB starts its shared pool with the first)."""
    try:
        tids = [int(name) for name in os.listdir(_TASKS)]
    except OSError:
        return
    target = min(os.getpriority(os.PRIO_PROCESS, os.getpid()) + BACKGROUND_NICE, MAX_NICE)
    for tid in tids:
        try:
            if not (_TASKS / str(tid) / "comm").read_text().startswith(THREAD_NAME_PREFIX):
                continue
            if os.getpriority(os.PRIO_PROCESS, tid) < target:
                os.setpriority(os.PRIO_PROCESS, tid, target)
        except OSError as error:  # the thread ended, or we may not: run as is
            log.debug("could not lower the priority of thread %d: %s", tid, error)
