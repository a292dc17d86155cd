"""The standard gRPC health service (`grpc.health.v1.Health`) of a storage pod.

Only the overall status (service "") is kept: NOT_SERVING until the pod has
started its servers, SERVING from then on, NOT_SERVING for good once a graceful
stop begins. The controller watches it on the internal port: a crash breaks
the Watch stream at once, a graceful stop shows as NOT_SERVING.

Written here rather than taken from grpc_health's reference servicer because
that one keeps every Watch stream open until the server stops: a graceful stop
would then always wait out its whole grace period. Here a Watch stream ends
(after sending NOT_SERVING) as soon as the stop begins.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

OVERALL = ""
SERVING: int = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: int = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN: int = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthService:
    """One instance may serve several grpc.aio servers of the same event loop."""

    def __init__(self) -> None:
        self._status = NOT_SERVING
        self._stopping = False
        # Replaced on every change; waiters hold the one current when they looked.
        self._changed = asyncio.Event()

    @property
    def status(self) -> int:
        return self._status

    def set_serving(self) -> None:
        """The pod has started. Ignored once stopping (a stop is final)."""
        if not self._stopping:
            self._change(SERVING)

    def enter_graceful_stop(self) -> None:
        """NOT_SERVING from now on; open Watch streams send it and end."""
        self._stopping = True
        self._change(NOT_SERVING)

    def _change(self, status: int) -> None:
        self._status = status
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _status_of(self, service: str) -> int | None:
        return self._status if service == OVERALL else None

    # -- grpc.health.v1.Health ---------------------------------------------------------

    # The generated servicer's method names.
    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        status = self._status_of(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return health_pb2.HealthListResponse(
            statuses={OVERALL: health_pb2.HealthCheckResponse(status=self._status)}
        )

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> None:
        last_sent: int | None = None
        while True:
            # Read the status and take the event together (no await in between), so
            # that a change after this point always wakes us.
            changed = self._changed
            status = self._status_of(request.service)
            current = SERVICE_UNKNOWN if status is None else status
            if current != last_sent:
                await context.write(health_pb2.HealthCheckResponse(status=current))
                last_sent = current
                # The status may have changed while the write was under way (a stop
                # begun then must still be sent before the stream ends): look again.
                continue
            if self._stopping:
                return
            await changed.wait()


def add_health_service(service: HealthService, server: grpc.aio.Server) -> None:
    health_pb2_grpc.add_HealthServicer_to_server(service, server)
