"""Following a namespace's shard map: the GetShardAssignments stream stays open
and every message is a complete new map. When the stream breaks, the client
reconnects to any server it knows (the seed addresses, then the leaders of the
last map), with backoff, and goes on routing by the last map meanwhile.

Between maps, a NOT_LEADER error's leader hint overrides the map for its shard:
the hint is newer than the map that sent the write to the wrong place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence

import grpc.aio

from cairn.client import errors
from cairn.client.attempts import Attempts
from cairn.client.channels import ChannelPool
from cairn.client.failures import Retry, classify, server_status
from cairn.client.routing import ShardMap, ShardMapError
from cairn.common.hashing import KeyHash
from cairn.proto import oxia_client_pb2 as pb

log = logging.getLogger(__name__)


class ShardMapFollower:
    def __init__(
        self,
        pool: ChannelPool,
        seeds: Sequence[str],
        namespace: str,
        initial_backoff_s: float,
        max_backoff_s: float,
        on_change: Callable[[], None],
        key_hash: KeyHash = KeyHash.XXH3,
    ) -> None:
        if not seeds:
            raise ValueError("at least one server address is needed")
        self._pool = pool
        self._key_hash = key_hash
        self._seeds = list(seeds)
        self.namespace = namespace
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._on_change = on_change
        self._map: ShardMap | None = None
        self._hints: dict[int, str] = {}
        self._first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._changed = asyncio.Event()
        self.version = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float) -> None:
        """Follow the stream; return once the first map is known."""
        self._task = asyncio.create_task(self._follow(), name=f"shard-map:{self.namespace}")
        try:
            await asyncio.wait_for(asyncio.shield(self._first), timeout_s)
        except TimeoutError:
            await self.close()
            raise errors.RequestTimeout(
                f"no shard map for namespace {self.namespace!r} from {self._seeds} "
                f"within {timeout_s:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not self._first.done():
            self._first.cancel()

    @property
    def map(self) -> ShardMap:
        assert self._map is not None, "used before the first shard map"
        return self._map

    def leader(self, shard: int) -> str | None:
        hint = self._hints.get(shard)
        if hint:
            return hint
        leader = self.map.leader(shard)
        return leader or None

    def note_leader_hint(self, shard: int, address: str | None) -> None:
        known = self._map is not None and self._map.has_shard(shard)
        if address and known and self._hints.get(shard) != address:
            self._hints[shard] = address
            self._on_change()

    def forget_leader_hint(self, shard: int) -> None:
        if self._hints.pop(shard, None) is not None:
            self._on_change()

    async def pause(self, shard: int, retry: Retry, attempts: Attempts) -> None:
        """Between two attempts at a shard: take note of a leader hint, then wait for
        the backoff or a newer map, whichever comes first (RequestTimeout when the
        call's deadline would pass)."""
        delay_s = attempts.next_delay_s(retry)
        if retry.status.leader_hint:
            self.note_leader_hint(shard, retry.status.leader_hint)
        else:
            # A hint is worth one try: a pod's view of the leaders can be stale
            # (it restarted, or missed a push), and the map is the authority.
            self.forget_leader_hint(shard)
        await self.wait_for_change(self.version, delay_s)

    async def wait_for_change(self, seen_version: int, timeout_s: float) -> None:
        """Return once the map is newer than `seen_version`, or after the timeout."""
        if self.version != seen_version:
            return
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()

    def _addresses(self) -> list[str]:
        known = list(self._seeds)
        if self._map is not None:
            known += sorted(self._map.leaders() - set(known))
        return known

    async def _follow(self) -> None:
        backoff_s = self._initial_backoff_s
        attempt = 0
        while True:
            addresses = self._addresses()
            address = addresses[attempt % len(addresses)]
            attempt += 1
            try:
                call = self._pool.stubs(address).get_shard_assignments(
                    pb.ShardAssignmentsRequest(namespace=self.namespace)
                )
                async for message in call:
                    self._accept(message)
                    backoff_s = self._initial_backoff_s
                log.info("shard map stream from %s ended; reconnecting", address)
            except grpc.aio.AioRpcError as error:
                outcome = classify(server_status(error), sent=False)
                refusals = (
                    errors.NamespaceNotFound,
                    errors.Unauthenticated,
                    errors.PermissionDenied,
                )
                if isinstance(outcome, refusals) and not self._first.done():
                    self._first.set_exception(outcome)
                    return
                log.debug("shard map stream from %s failed: %s", address, error.details())
            except ShardMapError as error:
                log.warning("unusable shard map from %s: %s", address, error)
            except Exception:
                # Followed again all the same: ending here would leave the client
                # routing by this map for good.
                log.exception("following the shard map from %s failed", address)
            await asyncio.sleep(random.uniform(0, backoff_s))
            backoff_s = min(backoff_s * 2, self._max_backoff_s)

    def _accept(self, message: pb.ShardAssignments) -> None:
        new_map = ShardMap.from_proto(self.namespace, message, self._key_hash)
        self._map = new_map
        self._hints.clear()
        self.version += 1
        self._changed.set()
        if not self._first.done():
            self._first.set_result(None)
        self._on_change()
