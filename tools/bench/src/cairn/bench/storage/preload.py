"""Writing the key space once before a get workload, so gets find their keys."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from cairn.bench.storage.pools import count_put_results, key_name, value_source
from cairn.bench.storage.rpc import (
    METHOD_WRITE_STREAM,
    NAMESPACE,
    Channels,
    Router,
    ShardInfo,
    describe,
)
from cairn.proto import oxia_client_pb2 as pb

PRELOAD_BATCH = 1000
PRELOAD_INFLIGHT_PER_SHARD = 4


class _PreloadStream:
    """One WriteStream of the preload, with a bounded window of unanswered requests."""

    def __init__(self, channel: grpc.aio.Channel, shard_id: int, timeout_s: float) -> None:
        method = channel.stream_stream(METHOD_WRITE_STREAM)
        metadata = (("shard-id", str(shard_id)), ("namespace", NAMESPACE))
        self.shard_id = shard_id
        self._call = method(metadata=metadata, timeout=timeout_s)
        self._slots = asyncio.Semaphore(PRELOAD_INFLIGHT_PER_SHARD)
        self._sizes: collections.deque[int] = collections.deque()
        self.failed_ops = 0
        self._reader = asyncio.create_task(self._read_all())

    async def _read_all(self) -> None:
        while True:
            raw = await self._call.read()
            if raw is grpc.aio.EOF:
                if self._sizes:
                    raise RuntimeError(f"shard {self.shard_id}: stream ended early")
                return
            _ok, failed = count_put_results(raw, self._sizes.popleft())
            self.failed_ops += failed
            self._slots.release()

    async def send(self, request: bytes, ops: int) -> None:
        await self._slots.acquire()
        if self._reader.done():
            await self._reader  # raises the stream's error
            raise RuntimeError(f"shard {self.shard_id}: stream closed during preload")
        self._sizes.append(ops)
        await self._call.write(request)

    async def finish(self) -> None:
        await self._call.done_writing()
        await self._reader

    def abort(self) -> None:
        self._call.cancel()
        self._reader.cancel()


async def preload(
    shards: Sequence[ShardInfo],
    keys: int,
    value_size_bytes: int,
    timeout_s: float,
    seed: int = 1,
    batch: int = PRELOAD_BATCH,
) -> float:
    """Write keys [0, keys) once, in `batch`-put WriteStream requests; returns seconds taken.

    Keys are routed and requests built as they go, so memory stays bounded by one
    pending batch plus the in-flight window per shard. Raises if any put failed.
    """
    router = Router(shards)
    value_of = value_source(value_size_bytes, random.Random(seed))
    started_s = time.monotonic()
    channels = Channels(1)
    streams: dict[int, _PreloadStream] = {}
    try:
        async with asyncio.timeout(timeout_s):
            for shard in router.shards:
                streams[shard.shard_id] = _PreloadStream(
                    channels.get(shard.leader), shard.shard_id, timeout_s
                )
            buffers: dict[int, list[Any]] = {shard_id: [] for shard_id in streams}
            for index in range(keys):
                name = key_name(index)
                shard_id = router.shard_of(name).shard_id
                buffer = buffers[shard_id]
                buffer.append(pb.PutRequest(key=name, value=value_of(index)))
                if len(buffer) >= batch:
                    request = pb.WriteRequest(shard=shard_id, puts=buffer).SerializeToString()
                    await streams[shard_id].send(request, len(buffer))
                    buffers[shard_id] = []
            for shard_id, buffer in buffers.items():
                if buffer:
                    request = pb.WriteRequest(shard=shard_id, puts=buffer).SerializeToString()
                    await streams[shard_id].send(request, len(buffer))
            await asyncio.gather(*(stream.finish() for stream in streams.values()))
    except BaseException as error:
        for stream in streams.values():
            stream.abort()
        raise RuntimeError(f"preload of {keys} keys failed: {describe(error)}") from error
    finally:
        await channels.close()
    failed_ops = sum(stream.failed_ops for stream in streams.values())
    if failed_ops:
        raise RuntimeError(f"preload of {keys} keys: {failed_ops} puts failed")
    return time.monotonic() - started_s
