"""The controller's handle on the cluster state: the latest state read, and
status updates written with compare-and-set, retried on conflicts.

Conflicts are expected: an operator changing the spec (kubectl, the admin API)
moves the resource's version under the controller's feet. An update is a
function of the status, so a retry applies it again to the newest status.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cairn.common.telemetry import LatencyCounter
from cairn.controller.model import ClusterSpec, ClusterState, ClusterStatus
from cairn.controller.state.store import StateConflict, StateStore, StateUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_CONFLICT_RETRIES = 20
UNAVAILABLE_RETRIES = 50
UNAVAILABLE_RETRY_S = 0.2


class StateKeeper:
    def __init__(self, store: StateStore, state: ClusterState) -> None:
        self.store = store
        self.state = state
        self._lock = asyncio.Lock()
        # Metrics (metrics.py): durations of successful writes, and conflicts lost.
        self.write_latency = LatencyCounter()
        self.conflicts = 0

    async def reload(self) -> ClusterState:
        self.state = await self._with_retries(self.store.read)
        return self.state

    async def update_status(self, change: Callable[[ClusterStatus], ClusterStatus]) -> ClusterState:
        async with self._lock:
            for _ in range(MAX_CONFLICT_RETRIES):
                status = change(self.state.status)
                if status == self.state.status:
                    return self.state
                started_ns = time.perf_counter_ns()
                try:
                    self.state = await self._with_retries(
                        functools.partial(self.store.write_status, status, self.state.version)
                    )
                    self.write_latency.record_since(started_ns)
                    return self.state
                except StateConflict:
                    self.conflicts += 1
                    await self.reload()
            raise StateConflict(f"status update lost {MAX_CONFLICT_RETRIES} races in a row")

    async def update_spec(self, change: Callable[[ClusterSpec], ClusterSpec]) -> ClusterState:
        async with self._lock:
            for _ in range(MAX_CONFLICT_RETRIES):
                spec = change(self.state.spec)
                if spec == self.state.spec:
                    return self.state
                started_ns = time.perf_counter_ns()
                try:
                    self.state = await self._with_retries(
                        functools.partial(self.store.write_spec, spec, self.state.version)
                    )
                    self.write_latency.record_since(started_ns)
                    return self.state
                except StateConflict:
                    self.conflicts += 1
                    await self.reload()
            raise StateConflict(f"spec update lost {MAX_CONFLICT_RETRIES} races in a row")

    async def _with_retries(self, call: Callable[[], Awaitable[T]]) -> T:
        """The store briefly unreachable (an API server restarting) is waited out,
        for a bounded time; conflicts go back to the caller."""
        for attempt in range(UNAVAILABLE_RETRIES):
            try:
                return await call()
            except StateUnavailable as error:
                if attempt == UNAVAILABLE_RETRIES - 1:
                    raise
                log.warning("cluster state unavailable (%s); retrying", error)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
        raise AssertionError("unreachable")
