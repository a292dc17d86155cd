"""The controller processes of the managed cluster (managed_cluster.py): each
runs cairn.controller.runtime.Controller as it ships, on a VirtualLoop of its
own, over the in-memory state store they share, calling the pods through the
real PodClient on the simulated network.

Only the lease is simulated (`Lease`): one process holds it and acts; a
process that stops running (crashed) or is paused past the lease's length
loses it, and a standby process takes it, and with it the next controller
epoch. A paused process that resumes acts on what it believed until it learns
(`lost_after_ms` later, at its next renewal) that its lock is gone; its calls
in between must be fenced by the epoch. So are the sidecars: a pod's
heartbeat reaches each running controller while the two can reach each
other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cairn.common.heartbeat import Heartbeat
from cairn.controller.model import ClusterSpec
from cairn.controller.observer import DetectionSettings
from cairn.controller.planner import PlannerSettings
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.memory_store import MemoryCluster, MemoryStateStore
from simulation.grpc_net import SimPeers
from simulation.virtual_loop import VirtualLoop

if TYPE_CHECKING:
    from simulation.managed_cluster import Cluster

# The controller's timings on the simulation's scale (a pod's lease is 200 ms).
RUNTIME = RuntimeSettings(
    detection=DetectionSettings(
        heartbeat_timeout_ms=120, status_interval_ms=40, status_timeout_ms=60
    ),
    planner=PlannerSettings(replace_after_ms=400, rebalance_after_ms=300),
    startup_grace_ms=150,
    push_interval_ms=300,
    tick_ms=20,
    rpc_timeout_s=0.3,
)
# How often a pod's sidecar sends its heartbeat.
HEARTBEAT_MS = 30
# The controllers' lease: a holder paused this long loses it.
LEASE_MS = 100


class SimLock:
    """A process's LeaderLock: held from its start (the cluster starts a
    process only once the lease is its), lost when the cluster says so."""

    def __init__(self) -> None:
        self.lost = asyncio.Event()

    async def acquire(self) -> None:
        pass

    async def release(self) -> None:
        pass


class ControllerProcess:
    def __init__(
        self, name: str, cluster: Cluster, state: MemoryCluster, spec: ClusterSpec
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.state = state
        self.spec = spec
        self.loop: VirtualLoop | None = None
        self.controller: Controller | None = None
        self.lock: SimLock | None = None
        self.run_task: asyncio.Task[None] | None = None
        self.paused = False
        self.down_until_ms = 0.0

    @property
    def up(self) -> bool:
        return self.loop is not None

    @property
    def running(self) -> bool:
        """Up and not paused: its loop runs."""
        return self.loop is not None and not self.paused

    @property
    def exited(self) -> bool:
        """Its reconcile loop ended (fenced, or its lock lost): the process exits."""
        return self.run_task is not None and self.run_task.done()

    def start(self) -> None:
        """A new process that holds the lease."""
        cluster = self.cluster
        loop = VirtualLoop(cluster.now_ms)
        self.loop = loop
        self.paused = False
        clock = loop.clock
        self.lock = SimLock()
        controller = Controller(
            MemoryStateStore(self.state),
            self.lock,
            self.spec,
            RUNTIME,
            clock_ms=lambda: clock.now_ms,
            channels=SimPeers(cluster.net, self.name),
        )
        self.controller = controller
        cluster.net.pod(self.name).loop = loop
        self.run_task = loop.create_task(controller.run())
        loop.create_task(self._sidecars(controller))
        loop.run_until_idle()
        cluster.count("controller processes started")

    async def _sidecars(self, controller: Controller) -> None:
        cluster = self.cluster
        while True:
            for pod in cluster.pods.values():
                if pod.up and cluster.net.reachable(pod.name, self.name):
                    controller.observer.on_heartbeat(
                        Heartbeat(
                            node=pod.name,
                            public_address=pod.me.public_address,
                            internal_address=pod.me.internal_address,
                            storage_reachable=True,
                            sent_at_ms=int(cluster.now_ms),
                        )
                    )
            await asyncio.sleep(HEARTBEAT_MS / 1000)

    def stop(self) -> None:
        """The process ends (crashed, or exited): what it had in memory is gone."""
        loop = self.loop
        assert loop is not None
        net = self.cluster.net
        net.pod(self.name).loop = None
        net.down(self.name)
        loop.end_process()
        self.loop = self.controller = self.lock = self.run_task = None
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP, a long GC: its loop stops where it is (a message that
        arrives waits in its socket)."""
        assert self.loop is not None
        self.paused = True
        self.loop.frozen = True

    def resume(self, lost_after_ms: float | None) -> None:
        """It runs again, catching up on its timers; `lost_after_ms`: its lock
        was taken meanwhile, which it learns that much later."""
        loop, lock = self.loop, self.lock
        assert loop is not None and lock is not None
        self.paused = False
        loop.frozen = False
        if lost_after_ms is not None:
            loop.call_at((self.cluster.now_ms + lost_after_ms) / 1000, lock.lost.set)

    def act(self, what: Callable[[Controller], Awaitable[object]]) -> None:
        """An operator's request to the controller's API, handled on its loop."""
        controller, loop = self.controller, self.loop
        assert controller is not None and loop is not None

        async def request() -> None:
            try:
                await what(controller)
            except Exception:  # refused, fenced or lost a race: the operator's problem
                self.cluster.count("operator requests failed")
            else:
                controller.wake.set()

        loop.create_task(request())


@dataclass
class Lease:
    """Who holds the controllers' lease, and until when."""

    holder: ControllerProcess | None = None
    expires_ms: float = 0.0

    def renew(self, now_ms: float) -> None:
        holder = self.holder
        if holder is not None and holder.running:
            self.expires_ms = now_ms + LEASE_MS

    def free(self, now_ms: float) -> bool:
        holder = self.holder
        return holder is None or not holder.up or now_ms >= self.expires_ms

    def take(self, process: ControllerProcess, now_ms: float) -> None:
        self.holder = process
        self.expires_ms = now_ms + LEASE_MS
        process.start()
