"""The storage pod's gRPC health service (grpc.health.v1.Health), as the
controller uses it: Watch on the internal port shows SERVING, breaks when the
pod dies, and shows NOT_SERVING (then ends) on a graceful stop."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.storage.rpc.health import HealthService
from support.processes import NodeProcess, StandaloneProcess

pytestmark = pytest.mark.e2e

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WATCH_DEADLINE_S = 20.0


def exit_status(server: StandaloneProcess) -> int:
    """Waits for the exit that a SIGTERM already asked for (`stop()` would send
    another, which may find the default handler back and kill the process)."""
    assert server.process is not None
    return server.process.wait(timeout=10)


def check(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5.0
        )
    return int(answer.status)


class SlowWatchContext:
    """A Watch's context whose writes complete only when `release` is set."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def write(self, message: health_pb2.HealthCheckResponse) -> None:
        self.sent.append(int(message.status))
        self.writing.set()
        await self.release.wait()


def test_a_stop_during_a_watch_write_is_still_sent() -> None:
    async def scenario() -> list[int]:
        service = HealthService()
        service.set_serving()
        context = SlowWatchContext()
        watch = asyncio.create_task(service.Watch(health_pb2.HealthCheckRequest(), context))
        await context.writing.wait()
        # SERVING is on its way when the stop begins.
        service.enter_graceful_stop()
        context.release.set()
        await asyncio.wait_for(watch, timeout=5)
        return context.sent

    assert asyncio.run(scenario()) == [SERVING, NOT_SERVING]


def test_node_serves_health_on_both_ports_and_watch_breaks_when_killed(
    nodes: Callable[[int], list[NodeProcess]],
) -> None:
    (node,) = nodes(1)
    assert check(node.address) == SERVING
    assert check(node.internal_address) == SERVING
    with pytest.raises(grpc.RpcError) as error:
        check(node.internal_address, "no.such.Service")
    assert error.value.code() is grpc.StatusCode.NOT_FOUND

    with grpc.insecure_channel(node.internal_address) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=WATCH_DEADLINE_S
        )
        assert next(stream).status == SERVING
        node.kill()
        killed_at = time.monotonic()
        with pytest.raises(grpc.RpcError) as broken:
            next(stream)
        # At once (the connection closes), not at the deadline.
        assert time.monotonic() - killed_at < 5.0
        assert broken.value.code() is grpc.StatusCode.UNAVAILABLE


def test_node_graceful_stop_shows_not_serving_then_ends_the_watch(
    nodes: Callable[[int], list[NodeProcess]],
) -> None:
    (node,) = nodes(1)
    with grpc.insecure_channel(node.internal_address) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=WATCH_DEADLINE_S
        )
        assert next(stream).status == SERVING
        node.signal(signal.SIGTERM)
        stopping_at = time.monotonic()
        assert next(stream).status == NOT_SERVING
        # The stream ends cleanly, and does not hold up the stop for its grace period.
        assert list(stream) == []
        assert exit_status(node) == 0
        assert time.monotonic() - stopping_at < 4.0


def test_standalone_serves_health_and_not_serving_on_stop(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data", shards=1)
    server.start()
    try:
        assert check(server.address) == SERVING
        with grpc.insecure_channel(server.address) as channel:
            stream = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(), timeout=WATCH_DEADLINE_S
            )
            assert next(stream).status == SERVING
            server.signal(signal.SIGTERM)
            assert next(stream).status == NOT_SERVING
            assert list(stream) == []
        assert exit_status(server) == 0
    finally:
        server.kill()
