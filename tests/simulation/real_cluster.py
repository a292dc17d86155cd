"""Storage pods (three or five) running the shipped code of a shard (shard.py, the
replication sender and servicer, the lease) on simulated disks, a simulated
network and virtual clocks, with power losses (of two or three pods at once
too), network cuts, pods isolated from everyone, and elections. Checked:

- (b) a write acknowledged to a client is in the state of every later leader
  once it serves;
- (f) a read (served as the client API serves one) finds every write
  acknowledged before it began, whichever pod answers it;
- liveness: once healed, the cluster elects and takes writes again.

The controller here is a script of the election rule (fence every pod it
reaches, elect the highest head of a majority, the rest follow), and a node of
the network: a pod cut off from it is taken for dead, though it may lead on.
The shipped controller drives the shipped pods in managed_cluster.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from cairn.common.keyorder import KeyOrder
from cairn.storage.config import Limits, ReplicationSettings, ShardSpec
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member, Role
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.directory import ShardDirectory
from cairn.storage.kv.store import Column
from cairn.storage.replication.leader import ReplicatingLeader
from cairn.storage.rpc.replication import ReplicationService, replication_handlers
from cairn.storage.shard import ShardReplica
from simulation.disk import DiskGone, SimKv, SimWal, VirtualDiskWork, ignore_lost_power
from simulation.grpc_net import SimNet, SimPeers
from simulation.pod_clients import Clients
from simulation.virtual_loop import VirtualLoop

STEP_MS = 1.0
# The controller is a node of the network too: cut off from a pod, it cannot
# fence it (the pod goes on as it was) and takes it for dead.
CONTROLLER = "controller"
SETTINGS = ReplicationSettings(
    max_in_flight_entries=8,
    reconnect_initial_delay_s=0.01,
    reconnect_max_delay_s=0.1,
    truncate_timeout_s=0.2,
    removal_wait_s=0.5,
    leader_ready_timeout_s=2.0,
    leader_lease_ms=200,
    lease_heartbeat_ms=40,
)
LIMITS = Limits(max_pending_entries_per_shard=64)


class Violation(AssertionError):
    pass


def sync_latency_ms(rng: random.Random, slow_share: float = 0.1) -> float:
    """Mostly quick, with a slow tail (a busy disk): long windows in which
    entries are written and not yet durable."""
    return rng.uniform(0.2, 2.0) if rng.random() < 1 - slow_share else rng.uniform(5.0, 40.0)


@dataclass(eq=False)
class Pod:
    name: str
    cluster: Cluster
    wal: SimWal = field(default_factory=SimWal)
    kv: SimKv = field(default_factory=SimKv)
    replica: ShardReplica | None = None
    loop: VirtualLoop | None = None
    down_until_ms: float = 0.0
    directory: ShardDirectory = field(default_factory=ShardDirectory)
    incarnation: int = 0

    @property
    def member(self) -> Member:
        return Member(f"{self.name}:public", self.name)

    @property
    def up(self) -> bool:
        return self.replica is not None

    def start(self) -> None:
        cluster = self.cluster
        loop = VirtualLoop(cluster.now_ms)
        loop.set_exception_handler(ignore_lost_power)
        self.loop = loop
        rng = cluster.rng
        clock = loop.clock

        async def open_replica() -> ShardReplica:
            return ShardReplica(
                0,
                ShardSpec(),
                self.kv.reopen(),
                self.wal.reopen(),
                LIMITS,
                replication=SETTINGS,
                disk=VirtualDiskWork(self.wal, lambda: sync_latency_ms(rng)),
                clock_ms=lambda: clock.now_ms,
                session_clock_ms=lambda: clock.now_ms,
                incarnation_source=lambda: 1,
            )

        try:
            self.replica = loop.run_until_complete(open_replica())
        except BaseException:
            loop.close()
            raise
        self.directory = ShardDirectory()
        self.directory.add_replica(self.replica)
        net_pod = cluster.net.pod(self.name)
        net_pod.loop = loop
        net_pod.handlers = replication_handlers(ReplicationService(self.directory))

    def lose_power(self) -> None:
        """The disk keeps what its contract keeps; the process stops where it
        stood (its tasks are cancelled on a disk that refuses every write, and
        nothing it sends leaves)."""
        loop = self.loop
        assert loop is not None
        net = self.cluster.net
        net.pod(self.name).loop = None
        net.down(self.name)
        self.wal.lose_power()
        self.kv.lose_power()
        loop.end_process()
        self.replica = self.loop = None
        self.cluster.count("power losses")

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        assert self.loop is not None
        return self.loop.create_task(coroutine)

    def stored_keys(self) -> set[str]:
        order = KeyOrder.HIERARCHICAL
        return {order.decode(key) for key, _ in self.kv.scan(Column.RECORDS, b"", None)}


@dataclass(eq=False)
class Election:
    term: int
    fences: dict[str, asyncio.Task[Any]]
    started_ms: float
    leader: str | None = None
    leading: asyncio.Task[Any] | None = None


class Cluster:
    def __init__(self, seed: int, pods: int = 3) -> None:
        self.rng = random.Random(seed)
        self.now_ms = 0.0
        self.net = SimNet(self.rng)
        self.pods = {f"pod-{i}": Pod(f"pod-{i}", self) for i in range(pods)}
        self.term = 0
        self.election: Election | None = None
        self.leader: str | None = None
        self.counters: dict[str, int] = {}
        self.violations: list[str] = []
        self.clients = Clients(self.count, self.violations)
        for pod in self.pods.values():
            pod.start()

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    # -- time ------------------------------------------------------------------------------

    def step(self) -> None:
        self.now_ms += STEP_MS
        self.net.now_ms = self.now_ms
        self.net.deliver_due()
        for pod in self.pods.values():
            if pod.loop is not None:
                pod.loop.advance_to(self.now_ms)

    def run_until(self, done: Callable[[], bool], limit_ms: float = 5_000) -> None:
        deadline = self.now_ms + limit_ms
        while not done():
            if self.now_ms >= deadline:
                raise AssertionError(f"not done within {limit_ms} ms")
            self.step()

    # -- the controller's script -----------------------------------------------------------

    def start_election(self) -> None:
        self.term += 1
        self.leader = None
        fences = {
            name: pod.spawn(pod.replica.new_term(self.term))
            for name, pod in self.pods.items()
            if pod.replica is not None and self.net.reachable(CONTROLLER, name)
        }
        self.election = Election(self.term, fences, self.now_ms)
        self.count("elections started")

    def _answers(self, election: Election) -> dict[str, EntryId]:
        answers = {}
        for name, task in election.fences.items():
            answered = task.done() and not task.cancelled() and task.exception() is None
            if self.pods[name].up and answered:
                head, _ = task.result()
                answers[name] = head
        return answers

    def _drive_election(self) -> None:
        election = self.election
        assert election is not None
        if election.leader is None:
            answers = self._answers(election)
            waiting = any(
                self.pods[name].up and not task.done() for name, task in election.fences.items()
            )
            if len(answers) * 2 <= len(self.pods) or (
                waiting and self.now_ms - election.started_ms < 100
            ):
                if self.now_ms - election.started_ms > 300:
                    self.election = None  # try again with a new term
                return
            answers = {
                name: head for name, head in answers.items() if self.net.reachable(CONTROLLER, name)
            }
            if len(answers) * 2 <= len(self.pods):
                return
            best = max(answers.values())
            leader = sorted(name for name, head in answers.items() if head == best)[0]
            pod = self.pods[leader]
            assert pod.replica is not None
            followers = [p.member for name, p in self.pods.items() if name != leader]
            peers = SimPeers(self.net, leader)
            assert pod.loop is not None
            clock = pod.loop.clock

            def replicating(replica: ShardReplica, core: LeaderCore) -> ReplicatingLeader:
                return ReplicatingLeader(
                    replica, core, peers, SETTINGS, clock_ms=lambda: clock.now_ms
                )

            replica = pod.replica

            async def lead() -> None:
                await replica.become_leader(election.term, pod.member, replicating, followers)
                await replica.wait_serving()

            election.leader = leader
            election.leading = pod.spawn(lead())
            return
        task = election.leading
        assert task is not None
        if not self.pods[election.leader].up or (task.done() and task.exception() is not None):
            self.election = None
            return
        if task.done():
            self.leader = election.leader
            self.election = None
            self.count("leaders serving")
            self._check_leader_holds_every_acknowledged_write()

    def _check_leader_holds_every_acknowledged_write(self) -> None:
        assert self.leader is not None
        missing = self.clients.acknowledged - self.pods[self.leader].stored_keys()
        if missing:
            raise Violation(
                f"{self.leader} leads term {self.term} without {len(missing)} acknowledged "
                f"writes, e.g. {sorted(missing)[:3]}"
            )

    # -- clients and faults ----------------------------------------------------------------

    def _client_writes(self) -> None:
        if self.leader is None or self.rng.random() > 0.3:
            return
        self.leader_write()

    def leader_write(self) -> None:
        assert self.leader is not None
        pod = self.pods[self.leader]
        replica = pod.replica
        if replica is None or replica.role is not Role.LEADER:
            self.leader = None
            return
        self.clients.write(pod)

    def _client_reads(self) -> None:
        """A reader gets an acknowledged key from the pod it takes for the
        leader (a stale shard map sends it anywhere now and then)."""
        rng = self.rng
        if not self.clients.acknowledged or rng.random() > 0.2:
            return
        target = self.leader if self.leader is not None and rng.random() < 0.9 else None
        pod = self.pods[target or rng.choice(sorted(self.pods))]
        if pod.replica is None:
            return
        # Mostly one of the last acknowledged: what a stale state lacks.
        key = rng.choice(self.clients.acknowledged_in_order[-8:])
        self.clients.read(pod, key, self.now_ms)

    def _faults(self) -> None:
        rng = self.rng
        for pod in self.pods.values():
            if not pod.up and self.now_ms >= pod.down_until_ms:
                pod.start()
                self.count("restarts")
        if rng.random() < 0.001:
            up = [pod for pod in self.pods.values() if pod.up]
            if len(up) > 1:
                victim = rng.choice(up)
                victim.lose_power()
                victim.down_until_ms = self.now_ms + rng.uniform(5, 200)
        if rng.random() < 0.0007:
            # Several at once (pods sharing a rack's power): only what each
            # synced is left, and the rest may not have it yet.
            up = [pod for pod in self.pods.values() if pod.up]
            for pod in rng.sample(up, min(len(up), rng.choice((2, len(self.pods))))):
                pod.lose_power()
                pod.down_until_ms = self.now_ms + rng.uniform(5, 50)
            self.count("correlated power losses")
        if rng.random() < 0.0015:
            a, b = rng.sample([*sorted(self.pods), CONTROLLER], 2)
            self.net.cut_apart(a, b, self.now_ms + rng.uniform(10, 400))
            self.count("network cuts")
        if rng.random() < 0.001:
            # One pod cut off from everyone, the controller too: if it led, it
            # may lead on, alone, while the others elect.
            isolated = rng.choice(sorted(self.pods))
            heal_ms = self.now_ms + rng.uniform(50, 600)
            self.net.isolate(isolated, [*self.pods, CONTROLLER], heal_ms)
            self.count("pods isolated")

    def _needs_election(self) -> bool:
        if self.election is not None:
            return False
        if self.leader is None:
            return True
        replica = self.pods[self.leader].replica
        if replica is None or replica.role is not Role.LEADER:
            return True
        if not self.net.reachable(CONTROLLER, self.leader):
            return True  # taken for dead: it may well lead on, cut off
        return self.rng.random() < 0.001  # a leader move, now and then

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self._faults()
            if self._needs_election():
                self.start_election()
            if self.election is not None:
                self._drive_election()
            self._client_writes()
            self._client_reads()
            self.step()
            self.violations += self.net.take_servicer_errors(expected=(DiskGone,))
            if self.violations:
                raise Violation(self.violations[0])

    def heal_and_settle(self) -> None:
        """Every pod up and connected; one more election; the check once more."""
        self.net.heal()
        for pod in self.pods.values():
            if not pod.up:
                pod.start()
        self.election = None
        self.start_election()
        self.run_until(lambda: self._settled())

    def check_writes_go_through(self, count: int = 20, within_ms: float = 2_000) -> None:
        """Liveness, once healed: a leader serving acknowledges new writes."""
        acknowledged = self.clients.acknowledged
        before = len(acknowledged)
        deadline = self.now_ms + within_ms
        for _ in range(count):
            self.rng.random()  # (keeps the draws of _client_writes' gate aligned)
            self.leader_write()
        while len(acknowledged) < before + count:
            if self.now_ms >= deadline:
                raise Violation(
                    f"only {len(acknowledged) - before} of {count} writes acknowledged "
                    f"within {within_ms:g} ms of a healed cluster (leader {self.leader})"
                )
            self.step()

    def _settled(self) -> bool:
        if self.election is not None:
            self._drive_election()
        elif self.leader is None:
            self.start_election()
        return self.leader is not None and self.election is None

    def close(self) -> None:
        for pod in self.pods.values():
            if pod.loop is not None:
                pod.lose_power()
