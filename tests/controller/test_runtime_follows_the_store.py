"""The controller keeps following spec changes made by others after its feed of
changes fails (a watch that broke, a state file caught half edited): it starts
following again rather than end that task silently, which would leave it acting
on an old spec for good while its reconcile loop looks healthy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from cairn.controller.model import ClusterSpec, ClusterState, ClusterStatus, default_spec
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.file_store import FileLeaderLock, FileStateStore
from support.polling import eventually


class FeedFailingOnce:
    """A file store whose first `changes()` feed fails after its first state."""

    def __init__(self, inner: FileStateStore) -> None:
        self.inner = inner
        self.feeds = 0

    async def create(self, spec: ClusterSpec) -> ClusterState:
        return await self.inner.create(spec)

    async def read(self) -> ClusterState:
        return await self.inner.read()

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        return await self.inner.write_status(status, version)

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        return await self.inner.write_spec(spec, version)

    async def changes(self) -> AsyncIterator[ClusterState]:
        self.feeds += 1
        failing = self.feeds == 1
        async for state in self.inner.changes():
            yield state
            if failing:
                raise OSError("the feed broke")

    async def close(self) -> None:
        await self.inner.close()


async def _follows_after_a_failed_feed(directory: Path) -> None:
    store = FeedFailingOnce(FileStateStore(directory, poll_interval_s=0.05))
    controller = Controller(
        store, FileLeaderLock(directory), default_spec(), RuntimeSettings(tick_ms=50)
    )
    running = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.leading.wait(), 10)
        # Someone else (an admin API, kubectl) changes the spec, after the feed failed.
        await eventually(lambda: store.feeds >= 1)
        await asyncio.sleep(0.2)
        other = FileStateStore(directory)
        current = await other.read()
        (namespace,) = current.spec.namespaces
        changed = replace(current.spec, namespaces=(replace(namespace, replication_factor=1),))
        await other.write_spec(changed, current.version)
        keeper = controller.keeper
        assert keeper is not None
        await eventually(lambda: keeper.state.spec == changed)
        assert keeper.state.spec == changed, keeper.state.spec
        assert store.feeds >= 2
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await controller.close()


def test_spec_changes_are_followed_after_the_feed_of_changes_fails(tmp_path: Path) -> None:
    asyncio.run(_follows_after_a_failed_feed(tmp_path))
