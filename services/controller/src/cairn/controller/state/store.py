"""The cluster-state store's contract, shared by every implementation.

    StateStoreError
    ├── StateConflict       the version named by a write is no longer current
    ├── StateNotFound       no cluster state exists yet (nothing to read)
    ├── StateUnavailable    the store cannot be reached now; retry later
    ├── StateRejected       the store refused the request itself; retrying cannot help
    └── CorruptState        the stored state cannot be parsed (never overwritten silently)

Versioned compare-and-set: every read returns the state with an opaque
`version`; a write names the version it was based on and fails with
`StateConflict` if anyone wrote since. A successful write is durable before it
returns (the file store syncs; the Kubernetes API server has committed it to
etcd) and returns the new state with its new version.

`generation` counts changes of the spec (like Kubernetes' metadata.generation):
status writes leave it alone, so `status.observed_generation == generation`
says the controller has seen the latest spec.

Only one controller may act at a time: `LeaderLock` is held for as long as it
acts (an exclusive file lock locally, a coordination.k8s.io Lease on
Kubernetes). A lost lock stops the controller before its next write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from cairn.controller.model import ClusterSpec, ClusterState, ClusterStatus


class StateStoreError(Exception):
    pass


class StateConflict(StateStoreError):
    pass


class StateNotFound(StateStoreError):
    pass


class StateUnavailable(StateStoreError):
    pass


class StateRejected(StateStoreError):
    """The store refused the request itself (an API server's 400, 401, 403,
    422...): retrying it unchanged cannot succeed."""


class CorruptState(StateStoreError):
    """The stored state exists but cannot be parsed."""


class StateStore(Protocol):
    async def create(self, spec: ClusterSpec) -> ClusterState:
        """Create the cluster with this spec and an empty status; if it exists
        already, return it unchanged (the stored spec wins)."""
        ...

    async def read(self) -> ClusterState:
        """The current state; StateNotFound before `create`."""
        ...

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState: ...

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState: ...

    def changes(self) -> AsyncIterator[ClusterState]:
        """Every new state, whoever wrote it, starting with the current one. States
        may be skipped (only the newest matters) but never reordered. Ends when
        the store is closed."""
        ...

    async def close(self) -> None: ...


class LeaderLock(Protocol):
    async def acquire(self) -> None:
        """Wait until this process holds the lock."""
        ...

    @property
    def lost(self) -> asyncio.Event:
        """Set if the lock was lost after being acquired (the holder must stop)."""
        ...

    async def release(self) -> None: ...
