"""A blocking client over AsyncClient, for code without an event loop.

The async client runs on an event loop in a daemon thread owned by this object;
each method hands its coroutine to that loop and waits. Iterators are pulled one
item at a time through the same loop, so nothing is buffered beyond what the
async client itself holds.

    with Client("127.0.0.1:6648") as client:
        client.put("/app/config", b"v1")
        print(client.get("/app/config").value)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.client.records import Comparison, NotificationBatch, PutResult, Record
from cairn.client.routing import ShardMap
from cairn.client.scans import KEYS_END

T = TypeVar("T")


# Named outside the class, whose `list` method hides the builtin in annotations.
NotificationBatches = list[NotificationBatch]


class Client:
    def __init__(
        self,
        address: str | Sequence[str],
        *,
        namespace: str = "default",
        options: ClientOptions | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="cairn-client", daemon=True
        )
        self._thread.start()
        try:
            self._async = self._run(
                AsyncClient.connect(address, namespace=namespace, options=options)
            )
        except BaseException:
            self._stop_loop()
            raise
        self.namespace = namespace

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _iterate(self, iterator: AsyncGenerator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._run(_next(iterator))
                except StopAsyncIteration:
                    return
        finally:
            if self._loop.is_running():
                self._run(iterator.aclose())

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._async.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def shard_map(self) -> ShardMap:
        return self._async.shard_map

    def shard_for(self, key: str, partition_key: str | None = None) -> int:
        return self._async.shard_for(key, partition_key)

    def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        partition_key: str | None = None,
        ephemeral: bool = False,
        session_id: int | None = None,
        sequence_key_deltas: Sequence[int] | None = None,
        secondary_indexes: Mapping[str, str] | None = None,
        client_identity: str | None = None,
    ) -> PutResult:
        return self._run(
            self._async.put(
                key,
                value,
                expected_version=expected_version,
                partition_key=partition_key,
                ephemeral=ephemeral,
                session_id=session_id,
                sequence_key_deltas=sequence_key_deltas,
                secondary_indexes=secondary_indexes,
                client_identity=client_identity,
            )
        )

    def get(
        self,
        key: str,
        *,
        comparison: Comparison = Comparison.EQUAL,
        include_value: bool = True,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> Record:
        return self._run(
            self._async.get(
                key,
                comparison=comparison,
                include_value=include_value,
                partition_key=partition_key,
                secondary_index=secondary_index,
            )
        )

    def delete(
        self, key: str, *, expected_version: int | None = None, partition_key: str | None = None
    ) -> None:
        self._run(
            self._async.delete(key, expected_version=expected_version, partition_key=partition_key)
        )

    def delete_range(
        self, start_inclusive: str, end_exclusive: str, *, partition_key: str | None = None
    ) -> None:
        self._run(
            self._async.delete_range(start_inclusive, end_exclusive, partition_key=partition_key)
        )

    def list(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
        limit: int | None = None,
    ) -> list[str]:
        return self._run(
            self._async.list(
                start_inclusive,
                end_exclusive,
                partition_key=partition_key,
                secondary_index=secondary_index,
                limit=limit,
            )
        )

    def iter_list(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> Iterator[str]:
        return self._iterate(
            self._async.iter_list(
                start_inclusive,
                end_exclusive,
                partition_key=partition_key,
                secondary_index=secondary_index,
            )
        )

    def range_scan(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> Iterator[Record]:
        return self._iterate(
            self._async.range_scan(
                start_inclusive,
                end_exclusive,
                partition_key=partition_key,
                secondary_index=secondary_index,
            )
        )

    def shard_scan(
        self,
        shard: int,
        start_inclusive: str = "",
        end_exclusive: str = KEYS_END,
        *,
        limit: int | None = None,
    ) -> Iterator[Record]:
        return self._iterate(
            self._async.shard_scan(shard, start_inclusive, end_exclusive, limit=limit)
        )

    def notification_head(self, shard: int) -> int:
        return self._run(self._async.notification_head(shard))

    def read_notifications(
        self,
        shard: int,
        after_offset: int,
        end_offset: int | None = None,
        *,
        max_batches: int = 1000,
        idle_timeout_s: float | None = None,
        key_prefixes: Sequence[str] = (),
    ) -> NotificationBatches:
        return self._run(
            self._async.read_notifications(
                shard,
                after_offset,
                end_offset,
                max_batches=max_batches,
                idle_timeout_s=idle_timeout_s,
                key_prefixes=key_prefixes,
            )
        )

    def notifications(
        self,
        start_offsets: Mapping[int, int] | None = None,
        *,
        key_prefixes: Sequence[str] = (),
        include_stat: bool = True,
    ) -> Iterator[NotificationBatch]:
        return self._iterate(
            self._async.notifications(
                start_offsets, key_prefixes=key_prefixes, include_stat=include_stat
            )
        )

    def sequence_updates(self, key: str, *, partition_key: str) -> Iterator[str]:
        return self._iterate(self._async.sequence_updates(key, partition_key=partition_key))

    def create_session(
        self, shard: int, *, timeout_ms: int | None = None, client_identity: str | None = None
    ) -> int:
        return self._run(
            self._async.create_session(
                shard, timeout_ms=timeout_ms, client_identity=client_identity
            )
        )

    def keep_alive(self, shard: int, session_id: int) -> None:
        self._run(self._async.keep_alive(shard, session_id))

    def close_session(self, shard: int, session_id: int) -> None:
        self._run(self._async.close_session(shard, session_id))


async def _next(iterator: AsyncGenerator[T]) -> T:
    return await anext(iterator)
