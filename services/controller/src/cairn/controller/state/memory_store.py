"""An in-memory cluster-state store and leader lock, for tests and the
deterministic simulation. Same contract as the file and Kubernetes stores
(cairn.controller.state.store; tests/controller/test_state_contract.py runs it):
versioned compare-and-set, a generation bumped by spec changes only, a feed of
changes, and one exclusive lock.

Several `MemoryStateStore`s (one per controller) share one `MemoryCluster`, as
several processes share one file or one API server. The state is kept in its
document form (the custom resource's JSON, as both real stores keep it), so a
value that would not survive the real stores does not survive here either.

Each call yields to the event loop once before it acts, as a real store's I/O
does: a write and another controller's write can interleave, and the version
check decides between them. `interfere`, when set, is asked before every write:
True makes another writer (an operator's no-op spec write, say) move the version
first, so the write fails with StateConflict as it would against a busy store.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    parse_spec,
    parse_status,
    spec_document,
    status_document,
)
from cairn.controller.state.store import StateConflict, StateNotFound

# Subscribers of one cluster's changes at most (one per controller or test).
MAX_WATCHERS = 64


class MemoryCluster:
    """The stored document, its version and generation, shared by stores."""

    def __init__(self, interfere: Callable[[], bool] | None = None) -> None:
        self.document: dict[str, Any] | None = None
        self._state: ClusterState | None = None
        self.version = 0
        self.generation = 0
        self.interfere = interfere
        # Writes refused because `interfere` moved the version first.
        self.conflicts_injected = 0
        self._watchers: list[asyncio.Event] = []
        self._lock_holder: object | None = None
        self._lock_released = asyncio.Event()

    def state(self) -> ClusterState:
        if self._state is None:
            raise StateNotFound("no cluster state has been created")
        return self._state

    def store(self, spec: ClusterSpec, status: ClusterStatus, generation: int) -> ClusterState:
        """Keep the state as its document, and the state parsed back from it (the
        values are immutable: every read may share it)."""
        document = {"spec": spec_document(spec), "status": status_document(status)}
        self.document = copy.deepcopy(document)
        self.version += 1
        self.generation = generation
        self._state = ClusterState(
            parse_spec(document["spec"]),
            parse_status(document["status"]),
            str(self.version),
            self.generation,
        )
        for watcher in self._watchers:
            watcher.set()
        return self._state

    def check(self, version: str) -> ClusterState:
        current = self.state()
        if self.interfere is not None and self.interfere():
            self.conflicts_injected += 1
            current = self.store(current.spec, current.status, current.generation)
        if current.version != version:
            raise StateConflict(f"the cluster state is at version {current.version}, not {version}")
        return current

    def watch(self) -> asyncio.Event:
        if len(self._watchers) >= MAX_WATCHERS:
            raise RuntimeError(f"more than {MAX_WATCHERS} watchers of one memory cluster")
        event = asyncio.Event()
        event.set()
        self._watchers.append(event)
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        self._watchers.remove(event)


class MemoryStateStore:
    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self._closed = asyncio.Event()

    async def create(self, spec: ClusterSpec) -> ClusterState:
        await asyncio.sleep(0)
        try:
            return self.cluster.state()
        except StateNotFound:
            return self.cluster.store(spec, ClusterStatus(), 1)

    async def read(self) -> ClusterState:
        await asyncio.sleep(0)
        return self.cluster.state()

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        await asyncio.sleep(0)
        current = self.cluster.check(version)
        return self.cluster.store(current.spec, status, current.generation)

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        await asyncio.sleep(0)
        current = self.cluster.check(version)
        generation = current.generation + (spec != current.spec)
        return self.cluster.store(spec, current.status, generation)

    async def changes(self) -> AsyncIterator[ClusterState]:
        changed = self.cluster.watch()
        last_version: str | None = None
        try:
            while not self._closed.is_set():
                changed.clear()
                try:
                    state: ClusterState | None = self.cluster.state()
                except StateNotFound:
                    state = None
                if state is not None and state.version != last_version:
                    last_version = state.version
                    yield state
                    continue
                closed = asyncio.ensure_future(self._closed.wait())
                waiting = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait({closed, waiting}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    closed.cancel()
                    waiting.cancel()
        finally:
            self.cluster.unwatch(changed)

    async def close(self) -> None:
        self._closed.set()


class MemoryLeaderLock:
    """One holder at a time among the locks of one MemoryCluster. It is never
    lost on its own (no lease runs out in memory); `lose()` takes it away, as an
    expired lease would, for tests of what follows."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self._lost = asyncio.Event()

    @property
    def lost(self) -> asyncio.Event:
        return self._lost

    async def acquire(self) -> None:
        cluster = self.cluster
        while cluster._lock_holder not in (None, self):
            cluster._lock_released.clear()
            await cluster._lock_released.wait()
        cluster._lock_holder = self
        self._lost.clear()

    def lose(self) -> None:
        if self.cluster._lock_holder is self:
            self._release()
            self._lost.set()

    async def release(self) -> None:
        if self.cluster._lock_holder is self:
            self._release()

    def _release(self) -> None:
        self.cluster._lock_holder = None
        self.cluster._lock_released.set()
