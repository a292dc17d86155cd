"""A null storage server: grpc.aio answering writes without doing any storage work.

    python -m cairn.bench.storage.null_server --port 0
    # prints: cairn-bench null-server listening on 127.0.0.1:PORT

`cairn-bench ceiling` runs the put load against it, to measure what bare
grpc.aio (on uvloop, like the real server) carries on this machine in the same
run, so the real server's figures can be quoted as a ratio that the noise of a
shared machine affects less than absolute numbers.

It does the least any server of this API must do per request: it parses the
WriteRequest once (to know how many puts to answer) and sends back a WriteResponse
of the same shape as the real server's (status OK, a Version with version id,
modifications count, created and modified timestamps), pre-serialized once per
put count. A Read (a server stream, as in the real server) is answered with one
ReadResponse: a found record per get, with a value of --value-size bytes (the size
the bench's load writes) and the same Version. The handlers (de)serialize as the
real server's do (write handlers take and return raw bytes; Read's request is
parsed by its deserializer, its answer sent as bytes), and it uses the real
server's gRPC options and limits, so the difference between the two is the
storage work and the per-request plumbing around it.

GetShardAssignments answers one message for namespace `default` (shard 0..N-1
over the whole 32-bit hash range, leader = this server) and keeps the stream
open, so the load code discovers shards exactly as with the real server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence

import grpc
import grpc.aio
import uvloop
from google.protobuf.message import DecodeError

from cairn.bench.storage.rpc import NAMESPACE, SERVICE_NAME
from cairn.common.hashing import MAX_SHARDS_PER_NAMESPACE, split_hash_space
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits
from cairn.storage.rpc import new_server

LISTENING_PREFIX = "cairn-bench null-server listening on "
# Response content: a version id of an established log (several varint bytes, as
# the real server's offsets soon are), a key written before, millisecond times.
VERSION_ID = 1_000_000
MODIFICATIONS_COUNT = 1
# One cached response per put count; requests with more puts than this get a
# response built on the spot (nothing the bench sends comes near it).
MAX_CACHED_PUT_COUNTS = 1024
STOP_GRACE_S = 2.0
DEFAULT_VALUE_SIZE_BYTES = 100


class WriteResponses:
    """Serialized WriteResponses with `n` successful PutResponses, built once per `n`."""

    def __init__(self, timestamp_ms: int, max_cached: int = MAX_CACHED_PUT_COUNTS) -> None:
        self._put = pb.PutResponse(
            version=pb.Version(
                version_id=VERSION_ID,
                modifications_count=MODIFICATIONS_COUNT,
                created_timestamp=timestamp_ms,
                modified_timestamp=timestamp_ms,
            )
        )
        self._max_cached = max_cached
        self._cache: dict[int, bytes] = {}

    def for_puts(self, count: int) -> bytes:
        cached = self._cache.get(count)
        if cached is not None:
            return cached
        raw: bytes = pb.WriteResponse(puts=[self._put] * count).SerializeToString()
        if len(self._cache) < self._max_cached:
            self._cache[count] = raw
        return raw


def assignments_message(address: str, shards: int) -> bytes:
    """The serialized ShardAssignments: `shards` shards over the hash space, all here."""
    entry = pb.NamespaceShardsAssignment(shard_key_router=pb.XXHASH3)
    for shard_id, hash_range in enumerate(split_hash_space(shards)):
        assignment = entry.assignments.add(shard=shard_id, leader=address)
        assignment.int32_hash_range.min_hash_inclusive = hash_range.min_inclusive
        assignment.int32_hash_range.max_hash_inclusive = hash_range.max_inclusive
    message = pb.ShardAssignments()
    message.namespaces[NAMESPACE].CopyFrom(entry)
    raw: bytes = message.SerializeToString()
    return raw


class ReadResponses:
    """Serialized ReadResponses with `n` found records, built once per `n`."""

    def __init__(
        self, timestamp_ms: int, value_size_bytes: int, max_cached: int = MAX_CACHED_PUT_COUNTS
    ) -> None:
        self._get = pb.GetResponse(
            value=b"v" * value_size_bytes,
            version=pb.Version(
                version_id=VERSION_ID,
                modifications_count=MODIFICATIONS_COUNT,
                created_timestamp=timestamp_ms,
                modified_timestamp=timestamp_ms,
            ),
        )
        self._max_cached = max_cached
        self._cache: dict[int, bytes] = {}

    def for_gets(self, count: int) -> bytes:
        cached = self._cache.get(count)
        if cached is not None:
            return cached
        raw: bytes = pb.ReadResponse(gets=[self._get] * count).SerializeToString()
        if len(self._cache) < self._max_cached:
            self._cache[count] = raw
        return raw


class NullService:
    def __init__(
        self,
        responses: WriteResponses,
        reads: ReadResponses,
        assignments: bytes,
        max_inflight: int,
    ) -> None:
        self._responses = responses
        self._reads = reads
        self._assignments = assignments
        self._max_inflight = max_inflight  # answered requests not yet sent, per stream
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """End the open assignment streams, so a stop waits for no one."""
        self._stopping.set()

    def _answer(self, raw: bytes) -> bytes | str:
        """The response to one WriteRequest, or why it could not be parsed."""
        try:
            request = pb.WriteRequest.FromString(raw)
        except DecodeError as error:
            return f"malformed WriteRequest: {error}"
        return self._responses.for_puts(len(request.puts))

    async def write(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        answer = self._answer(raw)
        if isinstance(answer, str):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, answer)
        assert isinstance(answer, bytes)
        return answer

    async def write_stream(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        # Pipelined like the real server's: a task reads and answers requests while
        # the handler sends the answers back in order, with at most the real
        # server's per-stream bound of them in between (then reading waits, and
        # gRPC's flow control holds the client back). A one-at-a-time loop cost
        # the same CPU per request here, but would not overlap reads and writes.
        answers: asyncio.Queue[bytes | str | None] = asyncio.Queue(self._max_inflight)

        async def read_requests() -> None:
            try:
                async for raw in requests:
                    await answers.put(self._answer(raw))
            finally:
                await answers.put(None)

        reader = asyncio.create_task(read_requests())
        try:
            while (answer := await answers.get()) is not None:
                if isinstance(answer, str):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, answer)
                assert isinstance(answer, bytes)
                yield answer
            await reader  # surfaces a failure to read the request stream
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        # Parsed by the handler's deserializer, as the real server's Read is.
        yield self._reads.for_gets(len(request.gets))

    async def get_shard_assignments(
        self, raw: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        yield self._assignments
        # Kept open like the real server's (which sends later snapshots on it).
        await self._stopping.wait()


def generic_handler(service: NullService) -> grpc.GenericRpcHandler:
    methods = {
        "Write": grpc.unary_unary_rpc_method_handler(service.write),
        "WriteStream": grpc.stream_stream_rpc_method_handler(service.write_stream),
        "Read": grpc.unary_stream_rpc_method_handler(
            service.read, request_deserializer=pb.ReadRequest.FromString
        ),
        "GetShardAssignments": grpc.unary_stream_rpc_method_handler(service.get_shard_assignments),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)


async def serve(host: str, port: int, shards: int, value_size_bytes: int) -> int:
    limits = Limits()
    server = new_server(limits)
    bound_port = server.add_insecure_port(f"{host}:{port}")
    if bound_port == 0:
        print(f"null-server: could not bind {host}:{port}", file=sys.stderr)
        return 2
    address = f"{host}:{bound_port}"
    now_ms = int(time.time() * 1000)
    service = NullService(
        WriteResponses(timestamp_ms=now_ms),
        ReadResponses(timestamp_ms=now_ms, value_size_bytes=value_size_bytes),
        assignments_message(address, shards),
        limits.max_inflight_per_write_stream,
    )
    server.add_generic_rpc_handlers([generic_handler(service)])
    await server.start()
    print(LISTENING_PREFIX + address, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    service.stop()
    await server.stop(STOP_GRACE_S)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.bench.storage.null_server",
        description=(__doc__ or "").split("\n")[0],
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind and advertise")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free one")
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="shards to announce (match the real server's, so the load opens as many streams)",
    )
    parser.add_argument(
        "--value-size",
        type=int,
        default=DEFAULT_VALUE_SIZE_BYTES,
        help="bytes of the value each get answers (match the load's --value-size)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.shards <= MAX_SHARDS_PER_NAMESPACE:
        print(f"null-server: --shards must be in [1, {MAX_SHARDS_PER_NAMESPACE}]", file=sys.stderr)
        return 2
    if args.value_size < 0:
        print("null-server: --value-size must be >= 0", file=sys.stderr)
        return 2
    # uvloop, as the real server runs on it: the ceiling is of the same stack.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(args.host, args.port, args.shards, args.value_size))


if __name__ == "__main__":
    sys.exit(main())
