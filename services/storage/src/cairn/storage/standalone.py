"""Standalone mode: one process is the leader of every shard, replication factor 1.
Each start begins a new term for every shard (an ensemble of one elects itself).

The data directory remembers its namespace layout (`layout.json`: each namespace's
key order, notifications switch and shard ids), so a restart serves the same
shards. A restart asking for a different shard count or key order for a namespace
it holds is refused instead of silently re-routing or re-ordering keys. A restart
may add namespaces: their shards get ids after the highest existing one, because
requests name only a shard id, so ids must stay unique across namespaces. A
namespace the configuration no longer names keeps being served (and is logged):
dropping it would drop its data.

Of the Coordination service only the read-only GetStatus is served, on the client
port: shards, offsets and request counters, as a pod reports them. Fencing and
leadership calls are UNIMPLEMENTED, since nobody but this process may lead here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cairn.common.errors import CairnError
from cairn.common.files import write_atomically
from cairn.common.hashing import split_hash_space
from cairn.common.keyorder import KeyOrder
from cairn.common.tls import TlsSource, grpc_server_credentials
from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import DEFAULT_NAMESPACE, NamespaceConfig, ShardSpec, StandaloneConfig
from cairn.storage.core.replication.replica import Member
from cairn.storage.directory import NamespaceLayout, ShardDirectory, ShardPlacement
from cairn.storage.replication.leader import lead_alone
from cairn.storage.replication.wire import node_message
from cairn.storage.rpc import new_server
from cairn.storage.rpc.access import AccessControl
from cairn.storage.rpc.client_api import ClientService, generic_handlers
from cairn.storage.rpc.health import HealthService, add_health_service
from cairn.storage.rpc.status import abort
from cairn.storage.shard import ShardReplica
from cairn.storage.shard_status import shard_status

log = logging.getLogger(__name__)
LAYOUT_FILE = "layout.json"


class LayoutMismatch(Exception):
    """The data directory's namespace layout conflicts with the configuration, or
    cannot be read."""


@dataclass(frozen=True, slots=True)
class StoredNamespace:
    name: str
    key_order: KeyOrder
    shard_ids: tuple[int, ...]
    notifications_enabled: bool = True


def _read_layout(path: Path) -> list[StoredNamespace]:
    try:
        document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        namespaces = [
            StoredNamespace(
                str(entry["name"]),
                KeyOrder(entry["key_order"]),
                tuple(int(shard_id) for shard_id in entry["shard_ids"]),
                # Files written before the switch existed: notifications were on.
                bool(entry.get("notifications_enabled", True)),
            )
            for entry in document["namespaces"]
        ]
    except (ValueError, KeyError, TypeError) as error:
        raise LayoutMismatch(f"{path} is unreadable: {error!r}") from error
    seen_shard_ids: set[int] = set()
    for namespace in namespaces:
        ids = set(namespace.shard_ids)
        if not ids or len(ids) != len(namespace.shard_ids) or ids & seen_shard_ids:
            raise LayoutMismatch(
                f"{path} is inconsistent: namespace {namespace.name!r} has no shards or "
                "reuses a shard id"
            )
        seen_shard_ids |= ids
    return namespaces


def _layout_document(namespaces: Sequence[StoredNamespace]) -> str:
    document = {
        "namespaces": [
            {
                "name": namespace.name,
                "key_order": namespace.key_order.value,
                "shard_ids": list(namespace.shard_ids),
                "notifications_enabled": namespace.notifications_enabled,
            }
            for namespace in namespaces
        ]
    }
    return json.dumps(document, indent=2) + "\n"


def reconcile_layout(
    stored: Sequence[StoredNamespace], wanted: Sequence[NamespaceConfig], where: Path
) -> list[StoredNamespace]:
    """The namespaces to serve: the stored ones, checked against `wanted` (whose
    notifications switch wins, as it is not part of the data), then the wanted
    ones not stored yet, with fresh shard ids."""
    requested = {namespace.name: namespace for namespace in wanted}
    served: list[StoredNamespace] = []
    for namespace in stored:
        config = requested.get(namespace.name)
        shard_count = len(namespace.shard_ids)
        if config is None:
            log.warning(
                "namespace %r (%d shards) is in %s but not in the configuration; "
                "still serving it, as dropping it would drop its data",
                namespace.name,
                shard_count,
                where,
            )
            served.append(namespace)
            continue
        if config.initial_shard_count != shard_count or config.key_order is not namespace.key_order:
            raise LayoutMismatch(
                f"{where} holds namespace {namespace.name!r} with {shard_count} shards in "
                f"{namespace.key_order.value} order; asked for {config.initial_shard_count} "
                f"shards in {config.key_order.value} order (resharding and changing the key "
                "order are not supported)"
            )
        if config.notifications_enabled != namespace.notifications_enabled:
            log.warning(
                "namespace %r: notifications turned %s",
                namespace.name,
                "on" if config.notifications_enabled else "off",
            )
        served.append(
            dataclasses.replace(namespace, notifications_enabled=config.notifications_enabled)
        )
    next_shard_id = max((i for namespace in stored for i in namespace.shard_ids), default=-1) + 1
    stored_names = {namespace.name for namespace in stored}
    for config in wanted:
        if config.name in stored_names:
            continue
        shard_ids = tuple(range(next_shard_id, next_shard_id + config.initial_shard_count))
        next_shard_id += config.initial_shard_count
        if stored:
            log.info(
                "adding namespace %r with shards %d..%d", config.name, shard_ids[0], shard_ids[-1]
            )
        served.append(
            StoredNamespace(config.name, config.key_order, shard_ids, config.notifications_enabled)
        )
    return served


def load_or_create_layout(config: StandaloneConfig) -> list[StoredNamespace]:
    path = config.data_dir / LAYOUT_FILE
    stored = _read_layout(path) if path.exists() else []
    served = reconcile_layout(stored, config.namespaces, path)
    if served != stored:
        # Written before any new shard opens, so a crash in between leaves shard ids
        # recorded (their directories are created empty on the next start).
        config.data_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(path, _layout_document(served))
    return served


def default_namespace(config: StandaloneConfig, served: Sequence[StoredNamespace]) -> str:
    """What an empty namespace in a request means: "default" when served (the
    Python client always asks for it, and Oxia servers read an empty name as it),
    else the first configured namespace."""
    if any(namespace.name == DEFAULT_NAMESPACE for namespace in served):
        return DEFAULT_NAMESPACE
    return config.namespaces[0].name


def advertised_address(bind_host: str, port: int) -> str:
    """An address others can dial for a server bound to `bind_host`:`port`."""
    host = bind_host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


COORDINATION_SERVICE = rpb.DESCRIPTOR.services_by_name["Coordination"].full_name


class StatusOnlyCoordination:
    """The Coordination service's read-only `GetStatus`, so that `cairn status` and
    operators see a standalone server's shards and request counters the way they see
    a pod's. Nothing else of the service is served here: a standalone server leads
    every shard alone, and a NewTerm or BecomeLeader from anyone would break that."""

    def __init__(self, directory: ShardDirectory, me: Member) -> None:
        self.directory = directory
        self.me = me

    async def get_status(
        self, request: rpb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> rpb.GetStatusResponse:
        try:
            if request.HasField("shard"):
                replicas = [self.directory.replica(request.shard)]
            else:
                replicas = sorted(self.directory.replicas(), key=lambda r: r.shard_id)
        except CairnError as error:
            await abort(context, error)
        return rpb.GetStatusResponse(
            shards=[shard_status(replica) for replica in replicas], node=node_message(self.me)
        )

    def handler(self) -> grpc.GenericRpcHandler:
        """Registers GetStatus alone: every other method of the service is
        UNIMPLEMENTED on this server."""
        get_status = grpc.unary_unary_rpc_method_handler(
            self.get_status,
            request_deserializer=rpb.GetStatusRequest.FromString,
            response_serializer=rpb.GetStatusResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(COORDINATION_SERVICE, {"GetStatus": get_status})


class StandaloneServer:
    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.directory = ShardDirectory(config.namespaces[0].name)
        self.client_service = ClientService(
            self.directory, config.limits, AccessControl(config.auth, config.trust_domain)
        )
        self._server: grpc.aio.Server | None = None
        self.health = HealthService()
        self.address = ""

    async def start(self) -> str:
        config = self.config
        layout = load_or_create_layout(config)
        self.directory.default_namespace = default_namespace(config, layout)
        limits = config.limits
        server = new_server(limits)
        bind = f"{config.bind_host}:{config.port}"
        if config.tls_dir is None:
            port = server.add_insecure_port(bind)
        else:
            # TLS for clients (a standalone server has no internal port).
            tls = TlsSource.from_directory(config.tls_dir)
            port = server.add_secure_port(bind, grpc_server_credentials(tls, False))
        if port == 0:
            raise OSError(f"could not bind {config.bind_host}:{config.port}")
        self.address = config.advertised_address or advertised_address(config.bind_host, port)
        for stored in layout:
            ranges = split_hash_space(len(stored.shard_ids))
            replicas = {}
            for shard_id in stored.shard_ids:
                replica = ShardReplica.open(
                    shard_id,
                    ShardSpec(stored.name, stored.key_order, stored.notifications_enabled),
                    config.data_dir / "shards" / str(shard_id),
                    limits,
                    config.wal_segment_size_bytes,
                    config.wal_retention,
                    wal_zero_fill_bytes=config.wal_zero_fill_bytes,
                    wal_spare_segments=config.wal_spare_segments,
                )
                replicas[shard_id] = replica
                await lead_alone(replica, Member(self.address, self.address))
            placements = tuple(
                ShardPlacement(shard_id, hash_range, self.address)
                for shard_id, hash_range in zip(stored.shard_ids, ranges, strict=True)
            )
            await self.directory.set_namespace(
                NamespaceLayout(
                    stored.name, stored.key_order, placements, stored.notifications_enabled
                ),
                replicas,
            )
            log.info(
                "namespace %r: shards %d..%d, %s order, notifications %s",
                stored.name,
                stored.shard_ids[0],
                stored.shard_ids[-1],
                stored.key_order.value,
                "on" if stored.notifications_enabled else "off",
            )
        server.add_generic_rpc_handlers(generic_handlers(self.client_service))
        me = Member(self.address, self.address)
        server.add_generic_rpc_handlers([StatusOnlyCoordination(self.directory, me).handler()])
        add_health_service(self.health, server)
        await server.start()
        self._server = server
        self.health.set_serving()
        return self.address

    async def stop(self, grace_s: float = 5.0) -> None:
        # NOT_SERVING while the server still answers, so that watchers see the stop.
        self.health.enter_graceful_stop()
        # End the open-ended streams (assignments, notifications, health watches)
        # first, so the grace period only waits for real requests in flight.
        await self.directory.close()
        for replica in self.directory.replicas():
            replica.end_streams()
        if self._server is not None:
            await self._server.stop(grace_s)
        for replica in self.directory.replicas():
            await replica.close()
