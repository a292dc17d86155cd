"""Scripted runs of the shipped storage pods (managed_pod.py): no random
faults, every message taking the same time, and a controller that does only
what the script says, through the real PodClient: fence every pod it reaches
(NewTerm), make the member with the highest head leader (the preferred one
among equals), the other pods its followers (BecomeLeader). For histories too
particular for random search to find in a reasonable number of seeds;
pod_checks.py's invariants run after each step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from cairn.controller.model import NamespaceSpec
from cairn.controller.pods import Fenced, PodClient
from cairn.storage.config import Limits, ReplicationSettings
from cairn.storage.shard import ShardReplica
from simulation.grpc_net import SimNet, SimPeers
from simulation.managed_pod import SHARD, Pod
from simulation.pod_world import SimulatedPods
from simulation.real_cluster import LIMITS, SETTINGS
from simulation.virtual_loop import VirtualLoop

CONTROLLER = "controller"
NAMESPACE = NamespaceSpec("default", shards=1, replication_factor=3)
# Every message takes this long; syncs take SYNC_MS.
LATENCY_MS = 0.5
SYNC_MS = 0.5
EPOCH = 1


class Script(SimulatedPods):
    def __init__(
        self, pods: int, replication: ReplicationSettings = SETTINGS, limits: Limits = LIMITS
    ) -> None:
        rng = random.Random(0)
        super().__init__(rng, SimNet(rng, latency_ms=(LATENCY_MS, LATENCY_MS)), replication, limits)
        self.pods = {f"pod-{i}": Pod(f"pod-{i}", self) for i in range(pods)}
        for pod in self.pods.values():
            pod.start()
        self.loop = VirtualLoop(self.now_ms)
        self.net.pod(CONTROLLER).loop = self.loop
        self.controller = PodClient(rpc_timeout_s=0.2, channels=SimPeers(self.net, CONTROLLER))
        self.term = 0
        # Fenced pods of the election under way, and their heads.
        self.fenced: dict[str, Fenced] = {}

    # -- what pods need (managed_pod.PodWorld) ---------------------------------------------

    def sync_latency_ms(self) -> float:
        return SYNC_MS

    # -- time ------------------------------------------------------------------------------

    def loops(self) -> list[VirtualLoop]:
        return [self.loop, *(pod.loop for pod in self.pods.values() if pod.loop)]

    def steps(self, count: int) -> None:
        for _ in range(count):
            self.step()

    def run_until(self, condition: Callable[[], bool], max_ms: float = 200) -> None:
        if not self.steps_until(condition, max_ms):
            raise AssertionError(f"not reached in {max_ms:g} ms:\n{self.describe()}")

    def describe(self) -> str:
        lines = []
        for name, pod in self.pods.items():
            replica = pod.replica()
            if replica is None:
                lines.append(f"  {name}: {'up, no replica' if pod.up else 'down'}")
                continue
            core = replica.core
            lines.append(
                f"  {name}: {core.role.name} term {core.term}, log to {core.log.last_offset} "
                f"durable {replica.durable_offset}, commit {core.commit_offset}, "
                f"applied {core.applied_offset}"
            )
        return "\n".join(lines)

    # -- the scripted controller ------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self.loop.create_task(coroutine)

    def fence(self) -> int:
        """A new term: NewTerm to every pod; returns the term once a majority
        answered (their heads in `fenced`)."""
        self.term += 1
        term, self.fenced = self.term, {}

        async def fence(name: str) -> None:
            try:
                self.fenced[name] = await self.controller.new_term(
                    name, SHARD, term, NAMESPACE, EPOCH
                )
            except grpc.aio.AioRpcError:
                self.count("pods not fenced")  # down, cut off or refusing: no answer

        for name in self.pods:
            self._call(fence(name))
        self.run_until(lambda: len(self.fenced) * 2 > len(self.pods))
        self.steps(2)  # stragglers that can answer do
        return term

    def lead(self, preferred: str | None = None) -> str:
        """BecomeLeader to the fenced pod with the highest head (`preferred`
        among equals); the other pods follow. Returns the leader once it
        answered."""
        best = max(fenced.head for fenced in self.fenced.values())
        tied = sorted(name for name, fenced in self.fenced.items() if fenced.head == best)
        leader = preferred if preferred in tied else tied[0]
        followers = [self.pods[name].address for name in self.pods if name != leader]
        done: list[bool] = []

        async def become() -> None:
            await self.controller.become_leader(
                self.pods[leader].address, SHARD, self.term, followers, EPOCH
            )
            done.append(True)

        self._call(become())
        self.run_until(lambda: bool(done))
        return leader

    def elect(self, preferred: str | None = None, taken_over: bool = True) -> str:
        """An election; the new leader, once it has taken over (it takes writes
        then) unless told not to wait for that."""
        self.fence()
        leader = self.lead(preferred)
        if taken_over:
            # Past any older leader's lease: a few hundred ms.
            self.run_until(lambda: self.replica(leader).core.taken_over, max_ms=1_000)
        return leader

    # -- clients ---------------------------------------------------------------------------

    def replica(self, name: str) -> ShardReplica:
        replica = self.pods[name].replica()
        assert replica is not None, f"{name} has no replica running"
        return replica

    def write(self, leader: str) -> int:
        """A client write sent to `leader`; the offset it will take (one entry
        a write, while nothing waits to be folded with it)."""
        offset = self.replica(leader).core.log.last_offset + 1
        self.clients.write(self.pods[leader])
        return offset

    def write_until_acknowledged(self, leader: str, max_ms: float = 1_000) -> None:
        """Writes to `leader`, sent again every few steps (a leader taking over
        refuses them), until one is acknowledged."""
        acknowledged = self.clients.acknowledged
        before = len(acknowledged)
        deadline = self.now_ms + max_ms
        while len(acknowledged) == before:
            if self.now_ms >= deadline:
                raise AssertionError(f"no write acknowledged in {max_ms:g} ms")
            self.clients.write(self.pods[leader])
            self.steps(3)

    def read_last_write(self, name: str) -> None:
        """A read of the last acknowledged write, sent to `name` now; returns
        once it is answered or refused."""
        key = self.clients.acknowledged_in_order[-1]
        done = self._reads_done()
        self.clients.read(self.pods[name], key, self.now_ms)
        self.run_until(lambda: self._reads_done() > done)

    def _reads_done(self) -> int:
        return self.counters.get("reads answered", 0) + self.counters.get("reads refused", 0)

    # -- faults ----------------------------------------------------------------------------

    def cut_off(self, *names: str) -> None:
        """Cut `names` off from everyone else (the controller stays with the
        rest) until `heal`."""
        group = set(names)
        for name in names:
            others = [other for other in [*self.pods, CONTROLLER] if other not in group]
            self.net.isolate(name, others, float("inf"))

    def cut_apart(self, a: str, b: str) -> None:
        """`a` and `b` cannot reach each other until `heal`."""
        self.net.cut_apart(a, b, float("inf"))

    def heal(self) -> None:
        self.net.heal()

    def crash(self, name: str) -> None:
        self.pods[name].lose_power()

    def restart(self, name: str) -> None:
        self.pods[name].start()

    def hold_syncs(self, name: str, held: bool = True) -> None:
        """`name`'s WAL holds its syncs back (or lets them go)."""
        disk = self.pods[name].disk()
        assert disk is not None
        disk.wal.syncs_held = held

    def close(self) -> None:
        for pod in self.pods.values():
            if pod.up:
                pod.lose_power()
        self.loop.end_process()


def with_window(entries: int) -> ReplicationSettings:
    return dataclasses.replace(SETTINGS, max_in_flight_entries=entries)
