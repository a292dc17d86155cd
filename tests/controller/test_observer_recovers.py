"""The observer's per-node tasks (the health watch, the status poll) go on
after a failure they did not foresee. Either ending silently would freeze what
the controller knows of that node: a watch stuck at "not serving" keeps a live
node dead for good, a poll stopped keeps its replicas as they were, and the
planner waits on them forever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

from cairn.common.heartbeat import Heartbeat, ReplicaReport
from cairn.controller.observed import NodeView
from cairn.controller.observer import DetectionSettings, Observer
from cairn.controller.pods import PodClient
from support.polling import eventually

REPORT = ReplicaReport(
    shard=0,
    namespace="default",
    role="leader",
    term=1,
    head_term=1,
    head_offset=5,
    commit_offset=5,
    durable_offset=5,
    applied_offset=5,
)


class PodsFailingOnce:
    """A pod whose first health watch and first status poll fail unexpectedly."""

    def __init__(self) -> None:
        self.watches = 0
        self.polls = 0

    async def watch_health(self, address: str) -> AsyncIterator[bool]:
        self.watches += 1
        if self.watches == 1:
            raise RuntimeError("the watch broke in a way nobody planned for")
        yield True
        await asyncio.Event().wait()

    async def status(self, address: str, timeout_s: float | None = None) -> list[ReplicaReport]:
        self.polls += 1
        if self.polls == 1:
            raise ValueError("a status the controller could not read")
        return [REPORT]


async def _recovers() -> None:
    pods = PodsFailingOnce()
    observer = Observer(
        cast(PodClient, pods),
        DetectionSettings(heartbeat_timeout_ms=60_000, status_interval_ms=50),
    )
    try:
        observer.on_heartbeat(
            Heartbeat(
                node="storage-0",
                public_address="127.0.0.1:1",
                internal_address="127.0.0.1:2",
                storage_reachable=True,
                sent_at_ms=0,
            )
        )

        def seen() -> NodeView:
            return observer.view().nodes["storage-0"]

        await eventually(lambda: seen().alive and seen().replicas == {0: REPORT})
        view = seen()
        assert view.alive, view
        assert view.replicas == {0: REPORT}, view
        assert pods.watches >= 2 and pods.polls >= 2
    finally:
        await observer.close()


def test_the_health_watch_and_status_poll_go_on_after_an_unforeseen_failure() -> None:
    asyncio.run(_recovers())
