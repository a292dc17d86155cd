"""Standalone mode: one process is the leader of every shard, replication factor 1.

The data directory remembers the namespace layout it was created with
(`layout.json`), so a restart serves the same shards, and a restart asking for
a different shard count is refused instead of silently re-routing keys.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cairn.common.hashing import split_hash_space
from cairn.common.keyorder import KeyOrder
from cairn.storage.config import NamespaceConfig, StandaloneConfig
from cairn.storage.directory import NamespaceLayout, ShardDirectory, ShardPlacement
from cairn.storage.rpc.client_api import ClientService, generic_handlers
from cairn.storage.shard import ShardReplica

log = logging.getLogger(__name__)
LAYOUT_FILE = "layout.json"


class LayoutMismatch(Exception):
    """The data directory was created with a different namespace layout."""


@dataclass(frozen=True, slots=True)
class StoredNamespace:
    name: str
    key_order: KeyOrder
    shard_ids: tuple[int, ...]


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load_or_create_layout(config: StandaloneConfig) -> list[StoredNamespace]:
    path = config.data_dir / LAYOUT_FILE
    if path.exists():
        stored: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        namespaces = [
            StoredNamespace(n["name"], KeyOrder(n["key_order"]), tuple(n["shard_ids"]))
            for n in stored["namespaces"]
        ]
        wanted = {n.name: n for n in config.namespaces}
        for namespace in namespaces:
            requested: NamespaceConfig | None = wanted.get(namespace.name)
            if requested is not None and (
                requested.initial_shard_count != len(namespace.shard_ids)
                or requested.key_order is not namespace.key_order
            ):
                raise LayoutMismatch(
                    f"{config.data_dir} holds namespace {namespace.name!r} with "
                    f"{len(namespace.shard_ids)} shards in {namespace.key_order.value} order; "
                    f"asked for {requested.initial_shard_count} shards in "
                    f"{requested.key_order.value} order (resharding is not supported)"
                )
        return namespaces
    namespaces = []
    next_shard_id = 0
    for namespace_config in config.namespaces:
        count = namespace_config.initial_shard_count
        shard_ids = tuple(range(next_shard_id, next_shard_id + count))
        next_shard_id += count
        namespaces.append(
            StoredNamespace(namespace_config.name, namespace_config.key_order, shard_ids)
        )
    config.data_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "namespaces": [
            {"name": n.name, "key_order": n.key_order.value, "shard_ids": list(n.shard_ids)}
            for n in namespaces
        ]
    }
    _write_atomically(path, json.dumps(document, indent=2) + "\n")
    return namespaces


def advertised_address(config: StandaloneConfig, port: int) -> str:
    if config.advertised_address:
        return config.advertised_address
    host = config.bind_host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


class StandaloneServer:
    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.directory = ShardDirectory(config.namespaces[0].name)
        self._server: grpc.aio.Server | None = None
        self.address = ""

    async def start(self) -> str:
        config = self.config
        layout = load_or_create_layout(config)
        limits = config.limits
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limits.max_message_bytes),
                ("grpc.max_send_message_length", limits.max_message_bytes),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
        )
        port = server.add_insecure_port(f"{config.bind_host}:{config.port}")
        if port == 0:
            raise OSError(f"could not bind {config.bind_host}:{config.port}")
        self.address = advertised_address(config, port)
        for stored in layout:
            ranges = split_hash_space(len(stored.shard_ids))
            replicas = {}
            for shard_id in stored.shard_ids:
                replicas[shard_id] = ShardReplica.open(
                    shard_id,
                    stored.name,
                    stored.key_order,
                    config.data_dir / "shards" / str(shard_id),
                    limits,
                    config.wal_segment_size_bytes,
                )
            placements = tuple(
                ShardPlacement(shard_id, hash_range, self.address)
                for shard_id, hash_range in zip(stored.shard_ids, ranges, strict=True)
            )
            await self.directory.set_namespace(
                NamespaceLayout(stored.name, stored.key_order, placements), replicas
            )
        server.add_generic_rpc_handlers(generic_handlers(ClientService(self.directory, limits)))
        await server.start()
        self._server = server
        return self.address

    async def stop(self, grace_s: float = 5.0) -> None:
        # End the open-ended assignment streams first, so the grace period only
        # waits for real requests in flight.
        await self.directory.close()
        if self._server is not None:
            await self._server.stop(grace_s)
        for replica in self.directory.replicas():
            await replica.close()
