"""Clients of simulated pods: writes and reads made as the client API makes
them, and what the clients were told (the writes acknowledged, in order).

A write goes to the pod's leader replica (`directory.leader_shard`) through
`write` with the API's plain-puts test, so a leader folds it when entries wait
for their commit. A read is served as the API serves one (`serving_shard`, then
the read cache) and must find its key, acknowledged before the read began:
check (f).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from cairn.common.errors import CairnError
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.directory import ShardDirectory
from simulation.disk import DiskGone

SHARD = 0
# How long a read waits for its replica to serve (the client's deadline).
READ_DEADLINE_S = 0.1


class ClientTarget(Protocol):
    name: str
    directory: ShardDirectory

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> Any: ...


@dataclass
class Clients:
    count: Callable[[str], None]
    violations: list[str]
    acknowledged: set[str] = field(default_factory=set)
    acknowledged_in_order: list[str] = field(default_factory=list)
    next_key: int = 0

    def write(self, pod: ClientTarget) -> None:
        """A write of a new key."""
        key = f"/k/{self.next_key}"
        self.next_key += 1
        request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key=key, value=b"v")])
        raw = request.SerializeToString()
        directory = pod.directory

        async def write() -> None:
            try:
                replica = directory.leader_shard(SHARD)
                await replica.write(raw, request, has_plain_puts(raw))
            except (CairnError, DiskGone):
                self.count("writes refused or of unknown outcome")
                return
            self.acknowledged.add(key)
            self.acknowledged_in_order.append(key)
            self.count("writes acknowledged")

        pod.spawn(write())

    def read(self, pod: ClientTarget, key: str, started_ms: float) -> None:
        """A read of `key`, acknowledged before `started_ms`: (f)."""
        directory = pod.directory
        order = KeyOrder.HIERARCHICAL

        async def read() -> None:
            try:
                # A client's deadline: a replica that does not serve in time fails it.
                async with asyncio.timeout(READ_DEADLINE_S):
                    replica = await directory.serving_shard(SHARD)
            except (CairnError, TimeoutError):
                self.count("reads refused")
                return
            [value] = replica.read_cache.answers(replica.kv, [order.encode(key)])
            self.count("reads answered")
            if value is None:
                self.violations.append(
                    f"(f) {pod.name} answered a read of {key} begun at {started_ms:g} ms "
                    f"without it, though it was acknowledged before (term {replica.term})"
                )

        pod.spawn(read())
