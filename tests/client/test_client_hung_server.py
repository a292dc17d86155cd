"""A server that takes requests and never answers (a hung pod the controller has not
noticed yet): the client's calls end with RequestTimeout near their deadline, the
write stream is dropped and opened again, and nothing waits forever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from cairn.client import errors
from cairn.client.channels import SERVICE
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.proto import oxia_client_pb2 as pb

TIMEOUT_S = 1.0


class HungServer:
    def __init__(self) -> None:
        self.address = ""
        self.write_streams = 0
        self.writes_received = 0
        self.reads = 0
        self._server = grpc.aio.server()

    async def assignments(
        self, request: pb.ShardAssignmentsRequest, context: Any
    ) -> AsyncIterator[pb.ShardAssignments]:
        message = pb.ShardAssignments()
        namespace = message.namespaces["default"]
        namespace.shard_key_router = pb.XXHASH3
        shard = namespace.assignments.add(shard=0, leader=self.address)
        shard.int32_hash_range.min_hash_inclusive = 0
        shard.int32_hash_range.max_hash_inclusive = 0xFFFFFFFF
        yield message
        await asyncio.Event().wait()

    async def write_stream(
        self, requests: AsyncIterator[pb.WriteRequest], context: Any
    ) -> AsyncIterator[pb.WriteResponse]:
        self.write_streams += 1
        async for _ in requests:
            self.writes_received += 1
        await asyncio.Event().wait()
        yield pb.WriteResponse()  # never reached

    async def read(self, request: pb.ReadRequest, context: Any) -> AsyncIterator[pb.ReadResponse]:
        self.reads += 1
        await asyncio.Event().wait()
        yield pb.ReadResponse()  # never reached

    async def start(self) -> None:
        handlers = {
            "GetShardAssignments": grpc.unary_stream_rpc_method_handler(
                self.assignments,
                request_deserializer=pb.ShardAssignmentsRequest.FromString,
                response_serializer=pb.ShardAssignments.SerializeToString,
            ),
            "WriteStream": grpc.stream_stream_rpc_method_handler(
                self.write_stream,
                request_deserializer=pb.WriteRequest.FromString,
                response_serializer=pb.WriteResponse.SerializeToString,
            ),
            "Read": grpc.unary_stream_rpc_method_handler(
                self.read,
                request_deserializer=pb.ReadRequest.FromString,
                response_serializer=pb.ReadResponse.SerializeToString,
            ),
        }
        self._server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(SERVICE, handlers)]
        )
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=None)


@pytest.mark.parametrize("batching", [True, False])
def test_calls_to_a_server_that_never_answers_time_out(batching: bool) -> None:
    async def scenario() -> None:
        server = HungServer()
        await server.start()
        options = ClientOptions(request_timeout_s=TIMEOUT_S, batching=batching)
        client = await AsyncClient.connect(server.address, options=options)
        try:
            started = time.monotonic()
            outcomes = await asyncio.gather(
                *(client.put(f"/k{i}", b"v") for i in range(20)),
                client.get("/k1"),
                return_exceptions=True,
            )
            elapsed = time.monotonic() - started
            assert all(isinstance(o, errors.RequestTimeout) for o in outcomes), outcomes
            # The deadline, plus at most one more answer timeout for a write sent
            # late in it, plus scheduling slack.
            assert TIMEOUT_S * 0.9 <= elapsed < TIMEOUT_S * 2 + 1.0
            assert server.writes_received >= 1 and server.reads >= 1
            # The silent stream was given up: the next write opens another.
            with pytest.raises(errors.RequestTimeout):
                await client.put("/after", b"v")
            assert server.write_streams == 2
        finally:
            await client.close()
            await server.stop()

    asyncio.run(scenario())
