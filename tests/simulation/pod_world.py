"""What a simulation of the shipped pods keeps, whoever plays the controller
(managed_cluster.Cluster: the shipped one; script.Script: a script): simulated
time over its processes' loops, what its pods need of it (managed_pod.PodWorld),
their clients, and the checks after every step."""

from __future__ import annotations

import abc
import random
from collections.abc import Callable

from cairn.storage.config import Limits, ReplicationSettings
from cairn.storage.core.retention import WalRetention
from simulation.disk import DiskGone
from simulation.grpc_net import SimNet
from simulation.managed_pod import Pod
from simulation.pod_checks import PodChecks
from simulation.pod_clients import Clients
from simulation.real_cluster import STEP_MS, Violation
from simulation.virtual_loop import VirtualLoop


class SimulatedPods(abc.ABC):
    def __init__(
        self,
        rng: random.Random,
        net: SimNet,
        replication: ReplicationSettings,
        limits: Limits,
        wal_retention: WalRetention | None = None,
    ) -> None:
        self.rng = rng
        self.net = net
        self.now_ms = 0.0
        self.replication = replication
        self.limits = limits
        self.wal_retention = wal_retention
        self.counters: dict[str, int] = {}
        self.incarnations = 0
        self.checks = PodChecks()
        self.violations = self.checks.violations
        self.clients = Clients(self.count, self.violations)
        self.pods: dict[str, Pod] = {}

    # -- what pods need (managed_pod.PodWorld) ---------------------------------------------

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def next_incarnation(self) -> int:
        self.incarnations += 1
        return self.incarnations

    @abc.abstractmethod
    def sync_latency_ms(self) -> float:
        """How long the next WAL sync of a pod takes."""

    # -- time ------------------------------------------------------------------------------

    @abc.abstractmethod
    def loops(self) -> list[VirtualLoop]:
        """The running processes' loops, in the order they run each step."""

    def after_processes_ran(self) -> None:  # noqa: B027 (a hook: nothing by default)
        """What the simulation does each step once its processes ran, before the checks."""

    def step(self) -> None:
        self.now_ms += STEP_MS
        self.net.now_ms = self.now_ms
        self.net.deliver_due()
        for loop in self.loops():
            loop.advance_to(self.now_ms)
        self.after_processes_ran()
        self.checks.check(list(self.pods.values()), self.clients.acknowledged, self.now_ms)
        self.violations += self.net.take_servicer_errors(expected=(DiskGone,))
        if self.violations:
            raise Violation(self.violations[0])

    def steps_until(self, done: Callable[[], bool], limit_ms: float) -> bool:
        """Step until `done()`; False if it is not within `limit_ms`."""
        deadline = self.now_ms + limit_ms
        while not done():
            if self.now_ms >= deadline:
                return False
            self.step()
        return True
