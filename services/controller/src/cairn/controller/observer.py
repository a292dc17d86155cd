"""Failure detection: turns heartbeats, health watches and status polls into
the `Observed` value the planner reads.

A node is alive when all three hold:
- its sidecar's last heartbeat is younger than `heartbeat_timeout_ms`
  (a pod whose sidecar is gone, or a whole pod stopped, goes quiet);
- that heartbeat says the sidecar's probe of the pod succeeded (a hung pod,
  SIGSTOPped or deadlocked, is reported by its still-running sidecar);
- the controller's own gRPC health watch on the pod's internal port says
  SERVING (a crash breaks the stream at once, without waiting for heartbeats);
- on Kubernetes, the pod is not deleted, terminating, failed or with its
  storage container stopped (see kube_pods.py).

Replica reports come from the controller's own GetStatus polls (every
`status_interval_ms`, and on demand right after the executor acted), so that
the planner never decides on a report older than its own last action.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import grpc

from cairn.common.heartbeat import Heartbeat, ReplicaReport
from cairn.controller.model import node_ordinal
from cairn.controller.observed import LeaderReports, NodeView, Observed
from cairn.controller.pods import PodClient

log = logging.getLogger(__name__)
WATCH_RETRY_MIN_S = 0.05
WATCH_RETRY_MAX_S = 1.0
# Nodes the observer tracks at most (each has two tasks).
MAX_NODES = 1000


@dataclass(frozen=True)
class DetectionSettings:
    heartbeat_timeout_ms: int = 2_000
    status_interval_ms: int = 1_000
    status_timeout_ms: int = 1_000


@dataclass
class _Node:
    view: NodeView
    last_heartbeat_ms: int = -(10**12)
    storage_reachable: bool = False
    serving: bool = False
    # Kubernetes says the pod is down (deleted, terminating, container not running).
    pod_down: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    poll_now: asyncio.Event = field(default_factory=asyncio.Event)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Observer:
    def __init__(
        self,
        pods: PodClient,
        settings: DetectionSettings | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.pods = pods
        self.settings = settings or DetectionSettings()
        self.clock_ms = clock_ms
        self.started_ms = clock_ms()
        # Set whenever something the planner cares about changed.
        self.changed = asyncio.Event()
        # Set when a node turned alive: it needs the shard map pushed.
        self.joined: asyncio.Queue[str] = asyncio.Queue(maxsize=MAX_NODES)
        self._nodes: dict[str, _Node] = {}
        self.leader_reports = LeaderReports()
        self._closed = False
        self._expiry_task: asyncio.Task[None] | None = None

    # -- inputs ----------------------------------------------------------------------

    def on_heartbeat(self, heartbeat: Heartbeat) -> None:
        node_ordinal(heartbeat.node)  # rejects malformed names (ValueError)
        now = self.clock_ms()
        node = self._nodes.get(heartbeat.node)
        if not heartbeat.internal_address:
            # The sidecar has not reached its pod yet, so it does not know the
            # pod's addresses: nothing to watch; it counts as a missed probe.
            if node is not None:
                node.last_heartbeat_ms = now
                node.storage_reachable = False
                self._update(heartbeat.node)
            return
        if node is not None and node.view.internal_address != heartbeat.internal_address:
            self._forget(heartbeat.node)  # the pod moved: watch the new address
            node = None
        if node is None:
            if len(self._nodes) >= MAX_NODES:
                raise ValueError(f"more than {MAX_NODES} storage nodes")
            node = _Node(
                NodeView(
                    heartbeat.node,
                    heartbeat.public_address,
                    heartbeat.internal_address,
                    dict(heartbeat.labels),
                    dead_since_ms=now,
                )
            )
            self._nodes[heartbeat.node] = node
            node.tasks = [
                asyncio.create_task(self._watch(heartbeat.node)),
                asyncio.create_task(self._poll(heartbeat.node)),
            ]
            self.changed.set()
        node.last_heartbeat_ms = now
        node.storage_reachable = heartbeat.storage_reachable
        if dict(node.view.labels) != dict(heartbeat.labels):
            node.view = replace(node.view, labels=dict(heartbeat.labels))
            self.changed.set()
        self._update(heartbeat.node)
        if self._expiry_task is None:
            self._expiry_task = asyncio.create_task(self._expire())

    def on_pod(self, name: str, down: bool) -> None:
        """A pod event (Kubernetes only): down-ness as the API server sees it."""
        node = self._nodes.get(name)
        if node is None or node.pod_down == down:
            return
        node.pod_down = down
        log.info("pod %s is %s according to Kubernetes", name, "down" if down else "up")
        self._update(name)

    def known(self, names: Iterable[str]) -> bool:
        """Whether every one of these nodes has reported at least once."""
        return all(name in self._nodes for name in names)

    def node(self, name: str) -> NodeView | None:
        """One node's view as of now (what `view()` would say of it)."""
        if name not in self._nodes:
            return None
        self._update(name)
        return self._nodes[name].view

    # -- the planner's input -----------------------------------------------------------

    def view(self) -> Observed:
        for name in self._nodes:
            self._update(name)
        return Observed(
            now_ms=self.clock_ms() - self.started_ms,
            nodes={name: node.view for name, node in self._nodes.items()},
            leader_reports=self.leader_reports.snapshot(),
        )

    async def refresh(self, names: Iterable[str]) -> None:
        """Poll these nodes' status now (after acting on them)."""
        await asyncio.gather(*(self._poll_once(name) for name in names if name in self._nodes))

    # -- liveness ----------------------------------------------------------------------

    def _update(self, name: str) -> None:
        node = self._nodes[name]
        now = self.clock_ms()
        fresh = now - node.last_heartbeat_ms <= self.settings.heartbeat_timeout_ms
        alive = fresh and node.storage_reachable and node.serving and not node.pod_down
        if alive == node.view.alive:
            return
        elapsed = now - self.started_ms
        if alive:
            node.view = replace(node.view, alive=True, alive_since_ms=elapsed, replicas=None)
            node.poll_now.set()
            with contextlib.suppress(asyncio.QueueFull):
                self.joined.put_nowait(name)
        else:
            node.view = replace(node.view, alive=False, dead_since_ms=elapsed)
        log.info(
            "node %s is %s (heartbeat %s, probe %s, health watch %s)",
            name,
            "alive" if alive else "unreachable",
            "fresh" if fresh else "missed",
            "ok" if node.storage_reachable else "failing",
            "serving" if node.serving else "down",
        )
        if node.pod_down:
            log.info("node %s: its pod is down according to Kubernetes", name)
        self.changed.set()

    async def _expire(self) -> None:
        """Missed heartbeats are noticed by time passing, not by an event."""
        interval_s = self.settings.heartbeat_timeout_ms / 4000
        while not self._closed:
            await asyncio.sleep(interval_s)
            for name in list(self._nodes):
                self._update(name)

    async def _watch(self, name: str) -> None:
        delay_s = WATCH_RETRY_MIN_S
        while not self._closed and name in self._nodes:
            address = self._nodes[name].view.internal_address
            try:
                async for serving in self.pods.watch_health(address):
                    self._set_serving(name, serving)
                    delay_s = WATCH_RETRY_MIN_S
            except grpc.aio.AioRpcError as error:
                log.debug("health watch of %s ended: %s", name, error.code())
            except Exception:
                # Watched again all the same: a watch that ended here would hold the
                # node at its last state for good.
                log.exception("health watch of %s failed", name)
            self._set_serving(name, False)
            await asyncio.sleep(delay_s)
            delay_s = min(WATCH_RETRY_MAX_S, delay_s * 2)

    def _set_serving(self, name: str, serving: bool) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        node.serving = serving
        self._update(name)

    async def _poll(self, name: str) -> None:
        interval_s = self.settings.status_interval_ms / 1000
        while not self._closed and name in self._nodes:
            node = self._nodes[name]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await node.poll_now.wait()
            node.poll_now.clear()
            if node.view.alive:
                try:
                    await self._poll_once(name)
                except Exception:
                    # Polled again at the next interval: a poll loop that ended here
                    # would keep the node's replicas as they were for good.
                    log.exception("status poll of %s failed", name)

    async def _poll_once(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        try:
            reports = await self.pods.status(
                node.view.internal_address, self.settings.status_timeout_ms / 1000
            )
        except grpc.aio.AioRpcError as error:
            log.debug("status poll of %s failed: %s", name, error.code())
            return
        replicas: dict[int, ReplicaReport] = {report.shard: report for report in reports}
        self.leader_reports.note(reports)
        if node.view.replicas != replicas:
            node.view = replace(node.view, replicas=replicas)
            self.changed.set()

    # -- lifecycle -----------------------------------------------------------------------

    def _forget(self, name: str) -> None:
        node = self._nodes.pop(name, None)
        if node is not None:
            for task in node.tasks:
                task.cancel()

    async def close(self) -> None:
        self._closed = True
        tasks = [task for node in self._nodes.values() for task in node.tasks]
        if self._expiry_task is not None:
            tasks.append(self._expiry_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._nodes.clear()
