"""A storage pod of the managed cluster (managed_cluster.py): node.py's
ReplicaHost over simulated disks. It serves the real coordination, replication
and health services through their handler tables; a replica is made by the
controller's first NewTerm and removed by its DeleteShard, as node.py does, and
every stored replica reopens fenced when the pod restarts.

What its disk holds (the replicas' files, the highest controller epoch seen)
outlives its processes; a power loss keeps what the disks' contracts keep
(disk.py), a lost disk nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from cairn.common.errors import ShardNotFound
from cairn.common.keyorder import KeyOrder
from cairn.controller.pods import PodAddress
from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import Limits, ReplicationSettings, ShardSpec
from cairn.storage.core.controller_epoch import NO_EPOCH, admit
from cairn.storage.core.meta import INCARNATION_KEY, decode_u64
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.core.retention import WalRetention
from cairn.storage.directory import ShardDirectory
from cairn.storage.kv.store import Column
from cairn.storage.replicas import Replicas
from cairn.storage.rpc.coordination import CoordinationService, coordination_handlers
from cairn.storage.rpc.health import HealthService, add_health_service
from cairn.storage.rpc.replication import ReplicationService, replication_handlers
from cairn.storage.shard import ShardReplica
from cairn.storage.snapshot import SnapshotStream, log_base_change
from simulation.disk import SimKv, SimWal, VirtualDiskWork, ignore_lost_power
from simulation.grpc_net import SimNet, SimPeers
from simulation.virtual_loop import VirtualLoop

SHARD = 0


class PodWorld(Protocol):
    """What a pod needs of the simulation around it."""

    net: SimNet
    now_ms: float
    replication: ReplicationSettings
    limits: Limits
    # None keeps every replica's whole log.
    wal_retention: WalRetention | None

    def count(self, what: str, n: int = 1) -> None: ...

    def next_incarnation(self) -> int: ...

    def sync_latency_ms(self) -> float: ...


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

    def __init__(self, name: str, cluster: PodWorld) -> None:
        self.name = name
        self.cluster = cluster
        self.me = Member(f"{name}:public", name)
        # What is on its disk: replicas' files, and the controller epoch seen.
        self.disks: dict[int, ShardDisk] = {}
        self.epoch = NO_EPOCH
        self.loop: VirtualLoop | None = None
        self.directory = ShardDirectory(pushed_map=True)
        self.replicas = Replicas(self.directory, SimShardStorage(self))
        self.peers = SimPeers(cluster.net, name)
        self.health = HealthService()
        self.down_until_ms = 0.0
        # Counts the pod's processes (each start is a new one).
        self.process = 0

    @property
    def up(self) -> bool:
        return self.loop is not None

    @property
    def address(self) -> PodAddress:
        return PodAddress(self.me.public_address, self.me.internal_address)

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

        self.replicas = Replicas(self.directory, SimShardStorage(self))

        async def reopen() -> None:
            self.replicas.reopen()

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

    def open_replica(self, shard_id: int) -> ShardReplica:
        disk = self.disks[shard_id]
        clock = self.clock_ms
        return ShardReplica(
            shard_id,
            disk.spec,
            disk.kv.reopen(),
            disk.wal.reopen(),
            self.cluster.limits,
            replication=self.cluster.replication,
            disk=VirtualDiskWork(disk.wal, self.cluster.sync_latency_ms),
            maintenance=VirtualDiskWork(disk.wal, self.cluster.sync_latency_ms),
            files=SimReplicaFiles(disk),
            wal_retention=self.cluster.wal_retention,
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
        count("client writes folded into one entry", replica.counters.folded_requests)
        count("folded entries", replica.counters.folds)
        cache = replica.read_cache
        count("reads answered from the read cache", cache.lookups - cache.misses)
        count(
            "entries applied from the leader's changes", replica.entries_applied_from_leader_changes
        )
        count("log trims", replica.counters.wal_trims)
        count("snapshots installed", replica.counters.snapshots_completed)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        assert self.loop is not None
        return self.loop.create_task(coroutine)

    def replica(self) -> ShardReplica | None:
        """The shard's replica in the running process (None: down, or none here)."""
        if not self.up:
            return None
        try:
            return self.directory.replica(SHARD)
        except ShardNotFound:
            return None

    def disk(self) -> ShardDisk | None:
        return self.disks.get(SHARD)

    def incarnation(self) -> int | None:
        """The incarnation of the shard's data on the disk (None: no replica)."""
        disk = self.disks.get(SHARD)
        if disk is None:
            return None
        return decode_u64(disk.kv.get(Column.META, INCARNATION_KEY))

    def lose_disk(self) -> None:
        """The disk is gone (the process with it): the pod comes back empty."""
        if self.up:
            self.lose_power()
        self.disks.clear()
        self.epoch = NO_EPOCH
        self.cluster.count("disks lost")

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
        return self.replicas.replica_for(shard_id, spec)

    async def delete_replica(self, shard_id: int) -> None:
        self._tally(self.directory.replica(shard_id))
        await self.replicas.delete(shard_id)


class SimShardStorage:
    """A pod's replicas on its simulated disks (replicas.ShardStorage)."""

    def __init__(self, pod: Pod) -> None:
        self.pod = pod

    def stored(self) -> list[tuple[int, ShardSpec]]:
        return [(shard_id, disk.spec) for shard_id, disk in self.pod.disks.items()]

    def create(self, shard_id: int, spec: ShardSpec) -> None:
        self.pod.disks[shard_id] = ShardDisk(spec)
        self.pod.cluster.count("replicas created")

    def open(self, shard_id: int, spec: ShardSpec) -> ShardReplica:
        return self.pod.open_replica(shard_id)

    def delete(self, shard_id: int) -> None:
        del self.pod.disks[shard_id]
        self.pod.cluster.count("replicas deleted")


class SimReplicaFiles:
    """A replica's KV and log on its simulated disk, and snapshots installed
    there (ports.ReplicaFiles): the stream checked as a pod checks it
    (snapshot.SnapshotStream), staged in a fresh simulated KV, then swapped in
    with the log reset past the last included entry (at once: the install on
    a pod survives a crash part way through, which is its own tests' concern)."""

    def __init__(self, disk: ShardDisk) -> None:
        self.disk = disk

    def open(self) -> tuple[SimKv, SimWal]:
        return self.disk.kv.reopen(), self.disk.wal.reopen()

    def installer(self, local_meta: Sequence[tuple[bytes, bytes]]) -> SimSnapshotInstall:
        return SimSnapshotInstall(self.disk, local_meta)


class SimSnapshotInstall:
    def __init__(self, disk: ShardDisk, local_meta: Sequence[tuple[bytes, bytes]]) -> None:
        self.disk = disk
        self.stream = SnapshotStream(SimKv, local_meta)

    def add(self, chunk: rpb.SnapshotChunk) -> None:
        self.stream.add(chunk)

    def finish(self) -> EntryId:
        last_included = self.stream.seal()
        staged = self.stream.staged
        assert isinstance(staged, SimKv)
        staged.write([log_base_change(last_included)])
        staged.persist()
        self.disk.kv = staged
        wal = self.disk.wal.reopen()
        wal.reset(last_included.offset + 1)
        wal.close()
        return last_included

    def abort(self) -> None:
        self.stream.staged = None
