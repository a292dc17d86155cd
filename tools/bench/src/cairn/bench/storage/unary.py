"""The one-request-per-call driver: unary Write (put, `--mode unary`) and Read (get).

`concurrency` workers share one request list (cycling through the shards) and,
in open loop, one schedule; each has one request in flight at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc
import grpc.aio

from cairn.bench.storage.pools import count_get_results, count_put_results
from cairn.bench.storage.rpc import METHOD_READ, METHOD_WRITE, Channels, Router
from cairn.bench.storage.specs import LoadSpec
from cairn.bench.storage.timing import AnswerObserver, Schedule, Tally, Window, sleep_until

# After an RPC failed because the server is gone or too slow: do not spin on it.
UNAVAILABLE_BACKOFF_S = 0.1

# (ops ok, ops failed, the response: a WriteResponse's bytes, or b"" for a Read)
Sender = Callable[[int, bytes], Awaitable[tuple[int, int, bytes]]]


async def unary_worker(
    send: Sender,
    requests: Sequence[tuple[int, bytes]],
    cursor: list[int],
    window: Window,
    schedule: Schedule | None,
    tally: Tally,
    observer: AnswerObserver | None = None,
) -> None:
    """One request at a time: Write (put, unary mode) or Read (get)."""
    count = len(requests)
    while True:
        if schedule is not None:
            start_s = schedule.take()
            if start_s >= window.end_s:
                return
            if time.monotonic() >= window.drain_deadline_s:
                tally.unsent(1 + schedule.count_before(window.end_s))
                return
            await sleep_until(start_s)
            sent_s: float | None = time.monotonic()
        else:
            start_s = time.monotonic()
            sent_s = None
            if start_s >= window.end_s:
                return
        shard_id, request = requests[cursor[0] % count]
        cursor[0] += 1
        try:
            ok, failed, response = await send(shard_id, request)
        except Exception as error:
            tally.failed(start_s, time.monotonic(), error)
            if isinstance(error, grpc.aio.AioRpcError) and error.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ):
                await asyncio.sleep(UNAVAILABLE_BACKOFF_S)
        else:
            answered_s = time.monotonic()
            tally.done(start_s, sent_s, answered_s, ok, failed)
            if observer is not None and response:
                observer(request, response, start_s, sent_s, answered_s)


def unary_sender(
    channels: Channels,
    router: Router,
    spec: LoadSpec,
    rpc_timeout_s: float,
) -> Sender:
    """A function sending one pooled request to its shard's leader: (ops ok, ops failed)."""
    by_shard = {s.shard_id: s for s in router.shards}
    batch = spec.batch
    if spec.kind == "put":
        writes = {
            shard_id: channels.get(shard.leader).unary_unary(METHOD_WRITE)
            for shard_id, shard in by_shard.items()
        }

        async def send_write(shard_id: int, request: bytes) -> tuple[int, int, bytes]:
            raw: bytes = await writes[shard_id](request, timeout=rpc_timeout_s)
            ok, failed = count_put_results(raw, batch)
            return ok, failed, raw

        return send_write
    reads = {
        shard_id: channels.get(shard.leader).unary_stream(METHOD_READ)
        for shard_id, shard in by_shard.items()
    }

    async def send_read(shard_id: int, request: bytes) -> tuple[int, int, bytes]:
        call = reads[shard_id](request, timeout=rpc_timeout_s)
        chunks: list[bytes] = []
        while True:
            raw = await call.read()
            if raw is grpc.aio.EOF:
                break
            chunks.append(raw)
        ok, failed = count_get_results(chunks, batch)
        return ok, failed, b""

    return send_read
