"""The shipped controller and the shipped storage pods on one simulated network.

The controller is cairn.controller.runtime.Controller as it ships: its
observer (health watches and status polls over gRPC, heartbeats), planner,
executor and keeper, over the in-memory cluster-state store, calling the pods
through the real PodClient. The pods serve the real coordination, replication
and health services (rpc/coordination.py, rpc/replication.py, rpc/health.py)
through their real handler tables; a replica is made by the controller's first
NewTerm and removed by its DeleteShard, as node.py does. Everything runs on
VirtualLoops over simulated disks (disk.py) and the simulated network
(grpc_net.py); only the sidecars are simulated: a pod's heartbeat reaches the
controller while the pod runs and the two can reach each other.

Faults: power losses (several pods at once too), network cuts (the controller
is a node of the network), pods isolated from everyone, controller crashes.
With five pods and a replication factor of three, the controller replaces
members it takes for dead, so ensembles change under the faults too.

Checked: (b) a write acknowledged to a client is in the state of every later
leader once it serves; (f) a read, served as the client API serves it, finds
every write acknowledged before it began; liveness: once healed, the
controller elects a leader and writes go through.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc

from cairn.common.heartbeat import Heartbeat
from cairn.common.keyorder import KeyOrder
from cairn.controller.model import ClusterSpec, NamespaceSpec, ShardRecord, ShardState
from cairn.controller.observer import DetectionSettings
from cairn.controller.planner import PlannerSettings
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.memory_store import MemoryCluster, MemoryStateStore
from cairn.storage.config import ShardSpec
from cairn.storage.core.controller_epoch import NO_EPOCH, admit
from cairn.storage.core.replication.replica import Member
from cairn.storage.directory import ShardDirectory
from cairn.storage.kv.store import Column
from cairn.storage.rpc.coordination import CoordinationService, coordination_handlers
from cairn.storage.rpc.health import HealthService, add_health_service
from cairn.storage.rpc.replication import ReplicationService, replication_handlers
from cairn.storage.shard import ShardReplica
from simulation.disk import DiskGone, SimKv, SimWal, VirtualDiskWork, ignore_lost_power
from simulation.grpc_net import SimNet, SimPeers
from simulation.pod_checks import PodChecks
from simulation.pod_clients import Clients
from simulation.real_cluster import LIMITS, SETTINGS, STEP_MS, Violation, sync_latency_ms
from simulation.virtual_loop import VirtualLoop

CONTROLLER = "controller"
SHARD = 0
NAMESPACE = NamespaceSpec("default", shards=1, replication_factor=3)
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


class _Handlers(grpc.GenericRpcHandler):
    """A pod's handler tables, as one server holds them."""

    def __init__(self) -> None:
        self.tables: list[grpc.GenericRpcHandler] = []

    # What grpc's generated add_*_to_server functions call on a server.
    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.tables.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.tables.append(grpc.method_handlers_generic_handler(service, handlers))

    def service(self, details: Any) -> grpc.RpcMethodHandler | None:
        for table in self.tables:
            handler = table.service(details)
            if handler is not None:
                return handler
        return None


@dataclass(eq=False)
class ShardDisk:
    """One replica's files on a pod (what survives a power loss of them)."""

    spec: ShardSpec
    wal: SimWal = field(default_factory=SimWal)
    kv: SimKv = field(default_factory=SimKv)


class Pod:
    """A storage pod: node.py's ReplicaHost over simulated disks."""

    def __init__(self, name: str, cluster: Cluster) -> None:
        self.name = name
        self.cluster = cluster
        self.me = Member(f"{name}:public", name)
        # What is on its disk: replicas' files, and the controller epoch seen.
        self.disks: dict[int, ShardDisk] = {}
        self.epoch = NO_EPOCH
        self.loop: VirtualLoop | None = None
        self.directory = ShardDirectory(pushed_map=True)
        self.peers = SimPeers(cluster.net, name)
        self.health = HealthService()
        self.down_until_ms = 0.0
        # Counts the pod's processes (each start is a new one).
        self.process = 0

    @property
    def up(self) -> bool:
        return self.loop is not None

    @property
    def clock_ms(self) -> Callable[[], int]:
        loop = self.loop
        assert loop is not None
        clock = loop.clock
        return lambda: clock.now_ms

    def start(self) -> None:
        """A process starts on what the disk holds: every stored replica reopens
        (fenced, as after any restart), then the ports open."""
        loop = VirtualLoop(self.cluster.now_ms)
        loop.set_exception_handler(ignore_lost_power)
        self.loop = loop
        self.process += 1
        self.directory = ShardDirectory(pushed_map=True)
        self.health = HealthService()

        async def reopen() -> None:
            for shard_id in sorted(self.disks):
                self.directory.add_replica(self._open(shard_id))

        try:
            loop.run_until_complete(reopen())
        except BaseException:
            self.loop = None
            loop.close()
            raise
        handlers = _Handlers()
        handlers.add_generic_rpc_handlers(
            [
                coordination_handlers(CoordinationService(self)),
                replication_handlers(ReplicationService(self.directory)),
            ]
        )
        add_health_service(self.health, handlers)  # type: ignore[arg-type]
        self.health.set_serving()
        net_pod = self.cluster.net.pod(self.name)
        net_pod.loop = loop
        net_pod.handlers = handlers

    def _open(self, shard_id: int) -> ShardReplica:
        disk = self.disks[shard_id]
        clock = self.clock_ms
        rng = self.cluster.rng
        return ShardReplica(
            shard_id,
            disk.spec,
            disk.kv.reopen(),
            disk.wal.reopen(),
            LIMITS,
            replication=SETTINGS,
            disk=VirtualDiskWork(disk.wal, lambda: sync_latency_ms(rng)),
            clock_ms=clock,
            session_clock_ms=clock,
            incarnation_source=self.cluster.next_incarnation,
        )

    def lose_power(self) -> None:
        """The disks keep what their contract keeps; the process stops where it
        stood."""
        loop = self.loop
        assert loop is not None
        for replica in self.directory.replicas():
            self._tally(replica)
        net = self.cluster.net
        net.pod(self.name).loop = None
        net.down(self.name)
        for disk in self.disks.values():
            disk.wal.lose_power()
            disk.kv.lose_power()
        loop.end_process()
        self.loop = None
        self.cluster.count("power losses")

    def _tally(self, replica: ShardReplica) -> None:
        """What paths a replica's process took (its counters end with it)."""
        count = self.cluster.count
        count("client writes folded into one entry", replica.folded_requests)
        count("folded entries", replica.folds)
        cache = replica.read_cache
        count("reads answered from the read cache", cache.lookups - cache.misses)
        count(
            "entries applied from the leader's changes", replica.entries_applied_from_leader_changes
        )

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        assert self.loop is not None
        return self.loop.create_task(coroutine)

    def replica(self) -> ShardReplica | None:
        return self.directory._replicas.get(SHARD) if self.up else None

    def disk(self) -> ShardDisk | None:
        return self.disks.get(SHARD)

    def stored_keys(self) -> set[str]:
        disk = self.disks.get(SHARD)
        if disk is None:
            return set()
        order = KeyOrder.HIERARCHICAL
        return {order.decode(key) for key, _ in disk.kv.scan(Column.RECORDS, b"", None)}

    # -- coordination.ReplicaHost --------------------------------------------------------

    def admit_controller(self, epoch: int) -> None:
        # Durable at once: the simulated disk keeps what a file written atomically keeps.
        self.epoch = admit(self.epoch, epoch)

    def replica_for(self, shard_id: int, spec: ShardSpec | None) -> ShardReplica:
        replica = self.directory._replicas.get(shard_id)
        if replica is not None:
            return replica
        if spec is None:
            return self.directory.replica(shard_id)  # ShardNotFound
        self.disks[shard_id] = ShardDisk(spec)
        replica = self._open(shard_id)
        self.directory.add_replica(replica)
        self.cluster.count("replicas created")
        return replica

    async def delete_replica(self, shard_id: int) -> None:
        replica = self.directory.replica(shard_id)
        self.directory.remove_replica(shard_id)
        self._tally(replica)
        await replica.close()
        del self.disks[shard_id]
        self.cluster.count("replicas deleted")


class HeldLock:
    """The controller lock of the one controller process: held while it runs."""

    def __init__(self) -> None:
        self.lost = asyncio.Event()

    async def acquire(self) -> None:
        pass

    async def release(self) -> None:
        pass


class ControllerProcess:
    """The controller's process: a crash loses what it had in memory (its
    observations, its actions under way); the cluster state is kept (the
    store), and the next process takes a new controller epoch."""

    def __init__(self, cluster: Cluster, spec: ClusterSpec) -> None:
        self.cluster = cluster
        self.spec = spec
        self.state = MemoryCluster()
        self.loop: VirtualLoop | None = None
        self.controller: Controller | None = None
        self.down_until_ms = 0.0

    @property
    def up(self) -> bool:
        return self.loop is not None

    def start(self) -> None:
        cluster = self.cluster
        loop = VirtualLoop(cluster.now_ms)
        self.loop = loop
        clock = loop.clock
        controller = Controller(
            MemoryStateStore(self.state),
            HeldLock(),
            self.spec,
            RUNTIME,
            clock_ms=lambda: clock.now_ms,
            channels=SimPeers(cluster.net, CONTROLLER),
        )
        self.controller = controller
        cluster.net.pod(CONTROLLER).loop = loop
        loop.create_task(controller.run())
        loop.create_task(self._sidecars(controller))
        loop.run_until_idle()

    async def _sidecars(self, controller: Controller) -> None:
        """Each pod's sidecar: a heartbeat while the pod runs and reaches the
        controller (its probe of the pod succeeds while the pod runs)."""
        cluster = self.cluster
        while True:
            for pod in cluster.pods.values():
                if pod.up and cluster.net.reachable(pod.name, CONTROLLER):
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

    def crash(self) -> None:
        loop = self.loop
        assert loop is not None
        net = self.cluster.net
        net.pod(CONTROLLER).loop = None
        net.down(CONTROLLER)
        loop.end_process()
        self.loop = None
        self.controller = None
        self.cluster.count("controller crashes")

    def record(self) -> ShardRecord | None:
        try:
            return self.state.state().status.shard(SHARD)
        except Exception:
            return None


class Cluster:
    def __init__(self, seed: int, pods: int = 5) -> None:
        self.rng = random.Random(seed)
        self.now_ms = 0.0
        self.net = SimNet(self.rng)
        self.pods = {f"pod-{i}": Pod(f"pod-{i}", self) for i in range(pods)}
        self.controller = ControllerProcess(
            self, ClusterSpec(namespaces=(NAMESPACE,), storage_pods=pods)
        )
        self.incarnations = 0
        self.counters: dict[str, int] = {}
        self.checks = PodChecks()
        self.violations = self.checks.violations
        self.clients = Clients(self.count, self.violations)
        for pod in self.pods.values():
            pod.start()
        self.controller.start()

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def next_incarnation(self) -> int:
        self.incarnations += 1
        return self.incarnations

    def _loops(self) -> list[VirtualLoop]:
        processes: list[Pod | ControllerProcess] = [*self.pods.values(), self.controller]
        return [process.loop for process in processes if process.loop is not None]

    # -- time ------------------------------------------------------------------------------

    def step(self) -> None:
        self.now_ms += STEP_MS
        self.net.now_ms = self.now_ms
        self.net.deliver_due()
        for loop in self._loops():
            loop.advance_to(self.now_ms)
        self.checks.check(list(self.pods.values()), self.clients.acknowledged, self.now_ms)
        self.violations += self.net.take_servicer_errors(expected=(DiskGone,))
        if self.violations:
            raise Violation(self.violations[0])

    def run_until(self, done: Callable[[], bool], limit_ms: float) -> bool:
        deadline = self.now_ms + limit_ms
        while not done():
            if self.now_ms >= deadline:
                return False
            self.step()
        return True

    # -- clients ---------------------------------------------------------------------------

    def leader_pod(self) -> Pod | None:
        """The pod a client with the controller's shard map sends to."""
        record = self.controller.record()
        if record is None or record.leader is None:
            return None
        return self.pods.get(record.leader)

    def _client_target(self) -> Pod:
        leader = self.leader_pod()
        if leader is not None and self.rng.random() < 0.9:
            return leader
        return self.pods[self.rng.choice(sorted(self.pods))]

    def client_write(self, pod: Pod | None = None) -> None:
        pod = pod or self._client_target()
        if pod.up:
            self.clients.write(pod)

    def client_read(self) -> None:
        """Mostly one of the last writes acknowledged: what a stale state lacks."""
        if not self.clients.acknowledged:
            return
        pod = self._client_target()
        key = self.rng.choice(self.clients.acknowledged_in_order[-8:])
        if pod.up:
            self.clients.read(pod, key, self.now_ms)

    # -- faults ----------------------------------------------------------------------------

    def _faults(self) -> None:
        rng = self.rng
        for pod in self.pods.values():
            if not pod.up and self.now_ms >= pod.down_until_ms:
                pod.start()
                self.count("restarts")
        controller = self.controller
        if not controller.up and self.now_ms >= controller.down_until_ms:
            controller.start()
        if rng.random() < 0.001:
            up = [pod for pod in self.pods.values() if pod.up]
            if len(up) > 1:
                victim = rng.choice(up)
                victim.lose_power()
                # Now and then long enough for the controller to replace it.
                long = rng.random() < 0.3
                victim.down_until_ms = self.now_ms + rng.uniform(5, 1_500 if long else 200)
        if rng.random() < 0.0005:
            up = [pod for pod in self.pods.values() if pod.up]
            for pod in rng.sample(up, min(len(up), rng.choice((2, 3)))):
                pod.lose_power()
                pod.down_until_ms = self.now_ms + rng.uniform(5, 50)
            self.count("correlated power losses")
        if rng.random() < 0.0015:
            a, b = rng.sample([*sorted(self.pods), CONTROLLER], 2)
            self.net.cut_apart(a, b, self.now_ms + rng.uniform(10, 400))
            self.count("network cuts")
        if rng.random() < 0.0007:
            isolated = rng.choice(sorted(self.pods))
            heal_ms = self.now_ms + rng.uniform(50, 600)
            self.net.isolate(isolated, [*self.pods, CONTROLLER], heal_ms)
            self.count("pods isolated")
        if controller.up and rng.random() < 0.0005:
            controller.crash()
            controller.down_until_ms = self.now_ms + rng.uniform(5, 300)

    # -- a history -------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self._faults()
            if self.rng.random() < 0.3:
                self.client_write()
            if self.rng.random() < 0.005:
                # A burst: entries wait for their commit, and the leader folds.
                pod = self._client_target()
                for _ in range(self.rng.randint(5, 40)):
                    self.client_write(pod)
            if self.rng.random() < 0.2:
                self.client_read()
            self.step()

    def heal_and_settle(self, within_ms: float = 10_000) -> None:
        """Every pod and the controller up and connected: the controller must
        bring the shard to a serving leader."""
        self.net.heal()
        for pod in self.pods.values():
            if not pod.up:
                pod.start()
        if not self.controller.up:
            self.controller.start()
        if not self.run_until(self._steady, within_ms):
            raise Violation(
                f"no serving leader within {within_ms:g} ms of a healed cluster "
                f"(record: {self.controller.record()})"
            )

    def _steady(self) -> bool:
        record = self.controller.record()
        if record is None or record.state is not ShardState.STEADY or record.leader is None:
            return False
        replica = self.pods[record.leader].replica()
        return replica is not None and replica.serving and replica.term == record.term

    def check_writes_go_through(self, count: int = 20, within_ms: float = 2_000) -> None:
        acknowledged = self.clients.acknowledged
        before = len(acknowledged)
        leader = self.leader_pod()
        assert leader is not None
        for _ in range(count):
            self.client_write(leader)
        if not self.run_until(lambda: len(acknowledged) >= before + count, within_ms):
            raise Violation(
                f"only {len(acknowledged) - before} of {count} writes acknowledged "
                f"within {within_ms:g} ms of a healed cluster (leader {leader.name})"
            )

    def close(self) -> None:
        self.count("leaders serving", self.checks.leaders_serving)
        if self.controller.up:
            self.controller.crash()
        for pod in self.pods.values():
            if pod.up:
                pod.lose_power()
