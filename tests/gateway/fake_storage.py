"""A fake storage pod for the failures a real one cannot be made to show on
demand: it serves a one-shard map whose leader is itself, refuses every
notification resume point as trimmed (the real retention is an hour), and
never answers reads (so the gateway's calls time out)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc

NAMESPACE = "default"


class _Servicer(pb_grpc.OxiaClientServicer):
    def __init__(self, address_of: Any, stopping: threading.Event) -> None:
        self._address_of = address_of
        self._stopping = stopping
        self._lock = threading.Lock()
        self.reads = 0

    def GetShardAssignments(
        self, request: pb.ShardAssignmentsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ShardAssignments]:
        if request.namespace not in ("", NAMESPACE):
            context.abort(grpc.StatusCode.NOT_FOUND, f"namespace {request.namespace!r}")
        message = pb.ShardAssignments()
        assignment = message.namespaces[NAMESPACE]
        assignment.shard_key_router = pb.XXHASH3
        shard = assignment.assignments.add(shard=0, leader=self._address_of())
        shard.int32_hash_range.min_hash_inclusive = 0
        shard.int32_hash_range.max_hash_inclusive = 0xFFFFFFFF
        yield message
        # The stream stays open, as a real pod's does, until the server stops.
        while context.is_active() and not self._stopping.wait(0.1):
            pass

    def GetNotifications(
        self, request: pb.NotificationsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.NotificationBatch]:
        if request.HasField("start_offset_exclusive"):
            context.abort(grpc.StatusCode.OUT_OF_RANGE, "notifications were trimmed (retention)")
        yield pb.NotificationBatch(shard=0, offset=0, timestamp=0)
        while context.is_active() and not self._stopping.wait(0.1):
            pass

    def Read(
        self, request: pb.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ReadResponse]:
        with self._lock:
            self.reads += 1
        # Unavailable, forever: the client retries until its deadline.
        context.abort(grpc.StatusCode.UNAVAILABLE, "this fake never serves reads")
        yield from ()


class FakeStorage:
    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self._servicer = _Servicer(lambda: self.address, self._stopping)
        pb_grpc.add_OxiaClientServicer_to_server(self._servicer, self._server)

    @property
    def reads(self) -> int:
        """Read calls taken so far (each refused)."""
        return self._servicer.reads

    def start(self) -> str:
        self._server.start()
        return self.address

    def stop(self) -> None:
        self._stopping.set()
        self._server.stop(grace=None).wait(10)
