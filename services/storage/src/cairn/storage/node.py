"""A storage pod in a cluster: hosts the shard replicas the controller assigns it.

Two gRPC servers: the client API (Oxia-compatible) on the public port, the
coordination and replication APIs on the internal port; both serve the standard
gRPC health service (the controller watches it on the internal port). The
replicas it hosts (replicas.py) are kept in `shards/<id>/`, each with its spec
in `shard.json`.
The highest controller epoch seen is kept in `controller-epoch` (calls of older
controllers are refused, see cairn.storage.controller_epoch).

With a certificate directory (`NodeConfig.tls_dir`) the internal port is mutual
TLS and every call on it is checked against cairn.common.access's table (only
the controller coordinates, only pods replicate); the public port serves TLS
with the same certificate, or plaintext when the operator chose
`public_plaintext` (released Oxia clients speak nothing else).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import grpc

from cairn.common.files import write_atomically
from cairn.common.grpc_access import InternalAccessInterceptor
from cairn.common.keyorder import KeyOrder
from cairn.common.tls import TlsSource, grpc_server_credentials
from cairn.storage.clock import monotonic_ms
from cairn.storage.config import NodeConfig, ShardSpec
from cairn.storage.controller_epoch import EPOCH_FILE, ControllerEpochFence
from cairn.storage.core.replication.replica import Member
from cairn.storage.directory import ShardDirectory
from cairn.storage.replicas import Replicas
from cairn.storage.replication.peers import PeerChannels
from cairn.storage.rpc import new_server
from cairn.storage.rpc.access import AccessControl
from cairn.storage.rpc.client_api import ClientService, generic_handlers
from cairn.storage.rpc.coordination import CoordinationService, coordination_handlers
from cairn.storage.rpc.health import HealthService, add_health_service
from cairn.storage.rpc.replication import ReplicationService, replication_handlers
from cairn.storage.shard import ShardReplica
from cairn.storage.standalone import advertised_address

log = logging.getLogger(__name__)
SPEC_FILE = "shard.json"
SHARDS_DIR = "shards"


def _spec_document(spec: ShardSpec) -> str:
    return (
        json.dumps(
            {
                "namespace": spec.namespace,
                "key_order": spec.key_order.value,
                "notifications_enabled": spec.notifications_enabled,
            },
            indent=2,
        )
        + "\n"
    )


def _read_spec(path: Path) -> ShardSpec:
    document = json.loads(path.read_text(encoding="utf-8"))
    return ShardSpec(
        str(document["namespace"]),
        KeyOrder(document["key_order"]),
        bool(document["notifications_enabled"]),
    )


class FileShardStorage:
    """Replicas in `shards/<id>/` under the data directory, each with its spec in
    `shard.json` (replicas.ShardStorage)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.shards_dir = config.data_dir / SHARDS_DIR

    def stored(self) -> list[tuple[int, ShardSpec]]:
        self.shards_dir.mkdir(parents=True, exist_ok=True)
        return [
            (int(spec_path.parent.name), _read_spec(spec_path))
            for spec_path in sorted(self.shards_dir.glob(f"*/{SPEC_FILE}"))
        ]

    def create(self, shard_id: int, spec: ShardSpec) -> None:
        directory = self.shards_dir / str(shard_id)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / SPEC_FILE, _spec_document(spec))

    def open(self, shard_id: int, spec: ShardSpec) -> ShardReplica:
        config = self.config
        return ShardReplica.open(
            shard_id,
            spec,
            self.shards_dir / str(shard_id),
            config.limits,
            config.wal_segment_size_bytes,
            config.wal_retention,
            config.replication,
            wal_zero_fill_bytes=config.wal_zero_fill_bytes,
            wal_spare_segments=config.wal_spare_segments,
        )

    def delete(self, shard_id: int) -> None:
        directory = self.shards_dir / str(shard_id)
        (directory / SPEC_FILE).unlink(missing_ok=True)
        shutil.rmtree(directory, ignore_errors=True)


class NodeServer:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.directory = ShardDirectory(pushed_map=True)
        # Read now: a pod without a usable certificate must not start.
        self.tls = TlsSource.from_directory(config.tls_dir) if config.tls_dir else None
        self.client_service = ClientService(
            self.directory, config.limits, AccessControl(config.auth, config.trust_domain)
        )
        self.peers = PeerChannels(self.tls)
        self.clock_ms = monotonic_ms
        self.access = InternalAccessInterceptor(trust_domain=config.trust_domain)
        self.me = Member("", "")
        self.health = HealthService()
        self.epochs = ControllerEpochFence(config.data_dir / EPOCH_FILE)
        self.replicas = Replicas(self.directory, FileShardStorage(config))
        self._servers: list[grpc.aio.Server] = []

    async def start(self) -> Member:
        config = self.config
        public_address = f"{config.bind_host}:{config.port}"
        internal_address = f"{config.bind_host}:{config.internal_port}"
        public = new_server(config.limits)
        if self.tls is None:
            internal = new_server(config.limits)
            internal_port = internal.add_insecure_port(internal_address)
            port = public.add_insecure_port(public_address)
        else:
            # Without TLS there is no identity to check: the table applies only here.
            internal = new_server(config.limits, [self.access])
            internal_port = internal.add_secure_port(
                internal_address, grpc_server_credentials(self.tls, require_client_cert=True)
            )
            if config.public_plaintext:
                port = public.add_insecure_port(public_address)
            else:
                port = public.add_secure_port(
                    public_address, grpc_server_credentials(self.tls, require_client_cert=False)
                )
        if port == 0 or internal_port == 0:
            raise OSError(f"could not bind {config.bind_host}:{config.port}/{config.internal_port}")
        self.me = Member(
            config.advertised_address or advertised_address(config.bind_host, port),
            config.internal_advertised_address
            or advertised_address(config.bind_host, internal_port),
        )
        reopened = self.replicas.reopen()
        log.info("reopened %d shard replicas (fenced)", reopened)
        public.add_generic_rpc_handlers(generic_handlers(self.client_service))
        internal.add_generic_rpc_handlers(
            [
                coordination_handlers(CoordinationService(self)),
                replication_handlers(ReplicationService(self.directory)),
            ]
        )
        for server in (public, internal):
            add_health_service(self.health, server)
        await public.start()
        await internal.start()
        self._servers = [public, internal]
        # Only once both ports answer: a watcher seeing SERVING may use either.
        self.health.set_serving()
        return self.me

    # -- coordination.ReplicaHost ----------------------------------------------------

    def admit_controller(self, epoch: int) -> None:
        self.epochs.admit(epoch)

    def replica_for(self, shard_id: int, spec: ShardSpec | None) -> ShardReplica:
        return self.replicas.replica_for(shard_id, spec)

    async def delete_replica(self, shard_id: int) -> None:
        await self.replicas.delete(shard_id)

    # -- lifecycle -------------------------------------------------------------------

    async def stop(self, grace_s: float = 5.0) -> None:
        # First, while the servers still answer: watchers (the controller) learn of
        # the stop from NOT_SERVING instead of mistaking it for a crash.
        self.health.enter_graceful_stop()
        await self.directory.close()
        for replica in self.directory.replicas():
            replica.end_streams()
        for server in self._servers:
            await server.stop(grace_s)
        for replica in self.directory.replicas():
            await replica.close()
        await self.peers.close()
