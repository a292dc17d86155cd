"""The embedded default: the cluster state in one JSON file.

`cluster.json` holds the same document as the `CairnCluster` custom resource
(`metadata.resourceVersion`, `metadata.generation`, `spec`, `status`). Every
write replaces it atomically (temp file, fsync, rename, directory fsync), so a
crash leaves the old state or the new one. The version is a counter kept in
the file; a write naming an older one is refused.

`controller.lock` is held with an exclusive `flock` by the controller that acts:
a second controller on the same directory waits. The kernel drops the lock when
its holder dies, however it dies.

Other processes (an operator's CLI through the admin API, a second reader) see
changes by polling the file's version: `changes()` checks every
`poll_interval_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from cairn.common.files import write_atomically
from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    SpecError,
    parse_spec,
    parse_status,
    spec_document,
    status_document,
)
from cairn.controller.state.store import CorruptState, StateConflict, StateNotFound

STATE_FILE = "cluster.json"
LOCK_FILE = "controller.lock"
# Held (flock) around each read-check-write, so that writers in other processes
# (a second controller waiting for its turn, an operator's tool) cannot both pass
# the version check; separate from the controller lock, held for a lifetime.
WRITE_LOCK_FILE = "cluster.json.lock"
API_VERSION = "cairn.dev/v1"
KIND = "CairnCluster"


class FileStateStore:
    def __init__(self, directory: Path, name: str = "cairn", poll_interval_s: float = 0.2) -> None:
        self.directory = directory
        self.name = name
        self.poll_interval_s = poll_interval_s
        self._lock = asyncio.Lock()
        self._closed = asyncio.Event()

    @property
    def path(self) -> Path:
        return self.directory / STATE_FILE

    # -- reading -----------------------------------------------------------------------

    def read_now(self) -> ClusterState:
        """`read()` without an event loop (for synchronous tools: the launcher)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise StateNotFound(f"no cluster state at {self.path}") from None
        try:
            document = json.loads(text)
            metadata = document["metadata"]
            return ClusterState(
                spec=parse_spec(document["spec"]),
                status=parse_status(document.get("status") or {}),
                version=str(int(metadata["resourceVersion"])),
                generation=int(metadata["generation"]),
            )
        except (ValueError, KeyError, TypeError, SpecError) as error:
            raise CorruptState(f"{self.path}: {error}") from None

    async def read(self) -> ClusterState:
        return await asyncio.to_thread(self.read_now)

    # -- writing -----------------------------------------------------------------------

    def _store(
        self, spec: ClusterSpec, status: ClusterStatus, version: int, generation: int
    ) -> ClusterState:
        document: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "resourceVersion": str(version),
                "generation": generation,
            },
            "spec": spec_document(spec),
            "status": status_document(status),
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(document, indent=1, sort_keys=True) + "\n")
        return ClusterState(spec, status, str(version), generation)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / WRITE_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _check(self, current: ClusterState, version: str) -> None:
        if current.version != version:
            raise StateConflict(f"the cluster state is at version {current.version}, not {version}")

    async def create(self, spec: ClusterSpec) -> ClusterState:
        def create() -> ClusterState:
            with self._exclusive():
                try:
                    return self.read_now()
                except StateNotFound:
                    return self._store(spec, ClusterStatus(), 1, 1)

        async with self._lock:
            return await asyncio.to_thread(create)

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        async with self._lock:

            def write() -> ClusterState:
                with self._exclusive():
                    current = self.read_now()
                    self._check(current, version)
                    return self._store(
                        current.spec, status, int(current.version) + 1, current.generation
                    )

            return await asyncio.to_thread(write)

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        async with self._lock:

            def write() -> ClusterState:
                with self._exclusive():
                    current = self.read_now()
                    self._check(current, version)
                    generation = current.generation + (spec != current.spec)
                    return self._store(spec, current.status, int(current.version) + 1, generation)

            return await asyncio.to_thread(write)

    # -- watching ----------------------------------------------------------------------

    async def changes(self) -> AsyncIterator[ClusterState]:
        last_version: str | None = None
        while not self._closed.is_set():
            try:
                state = await self.read()
            except StateNotFound:
                state = None
            if state is not None and state.version != last_version:
                last_version = state.version
                yield state
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval_s):
                    await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()


class FileLeaderLock:
    """An exclusive `flock` on `controller.lock`: held until released or until
    the process dies. It cannot be lost while held, so `lost` never fires."""

    def __init__(self, directory: Path, poll_interval_s: float = 0.2) -> None:
        self.path = directory / LOCK_FILE
        self.poll_interval_s = poll_interval_s
        self._fd: int | None = None
        self._lost = asyncio.Event()

    @property
    def lost(self) -> asyncio.Event:
        return self._lost

    def _try_lock(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    async def acquire(self) -> None:
        # flock has no async wait; polling a local lock file is cheap.
        while not self._try_lock():  # noqa: ASYNC110
            await asyncio.sleep(self.poll_interval_s)

    async def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
