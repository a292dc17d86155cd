"""Progress lines of a job, printed by the driver while Spark works: tasks done
(shards, for an export), rows so far, and the rate.

Spark's own console progress bar is turned off by the jobs (it redraws one line
with carriage returns, which makes a mess of captured output); these lines take
its place. Task counts come from Spark's status tracker for the job group;
rows from a counter the caller updates (e.g. from an accumulator)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO


def say(line: str, out: TextIO | None = None) -> None:
    print(line, file=out or sys.stdout, flush=True)


def rate(count: float, elapsed_s: float) -> float:
    return count / elapsed_s if elapsed_s > 0 else 0.0


class Progress:
    """A thread printing `<job>: <done>/<total> <unit> done, <rows> rows, <rate>
    rows/s` every `interval_s` while the job group runs."""

    def __init__(
        self,
        spark: Any,
        job: str,
        unit: str,
        total: int | None,
        rows: Callable[[], int] | None = None,
        interval_s: float = 2.0,
    ) -> None:
        self.spark = spark
        self.job = job
        self.unit = unit
        self.total = total
        self.rows = rows
        self.interval_s = interval_s
        self.group = f"{job}-{time.monotonic_ns()}"
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{job}-progress", daemon=True)

    def __enter__(self) -> Progress:
        self.spark.sparkContext.setJobGroup(self.group, self.job)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def tasks(self) -> tuple[int, int]:
        """(tasks done, tasks known) of the group's jobs so far."""
        tracker = self.spark.sparkContext.statusTracker()
        done = known = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    known += stage.numTasks
        return done, known

    def line(self) -> str:
        done, known = self.tasks()
        total = self.total if self.total is not None else known
        elapsed = self.elapsed_s()
        text = f"{self.job}: {done}/{total} {self.unit} done, {elapsed:.0f} s"
        if self.rows is not None:
            rows = self.rows()
            text += f", {rows:,} rows, {rate(rows, elapsed):,.0f} rows/s"
        return text

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            say(self.line())
