"""The gateway's metrics: `http.server.request.duration` by method, route template
and status (an ASGI wrapper around the app), and the change-feed streams open.

Durations are counted in `LatencyCounter`s (plain ints, one per method, route and
status) and published at collection time, like the storage pods' latencies.
Labels stay bounded: the route is the matched template (`/v1/namespaces/{namespace}/
keys/{key}`), never the path; a request no route matched is `unmatched`.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.common.telemetry import LatencyCounter, Telemetry

UNMATCHED_ROUTE = "unmatched"


class GatewayCounters:
    """Counted by the app as it serves (single event loop: plain ints)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], LatencyCounter] = {}
        self.sse_streams = 0


COUNTERS = GatewayCounters()


class HttpMetrics:
    """ASGI wrapper: times each HTTP request from its start to its last body byte
    (a change feed: the whole stream)."""

    def __init__(self, app: ASGIApp, counters: GatewayCounters = COUNTERS) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_ns = time.perf_counter_ns()
        status = 500  # if the app fails before it answers

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            key = (str(scope.get("method", "")), str(template), status)
            counter = self.counters.requests.get(key)
            if counter is None:
                counter = self.counters.requests[key] = LatencyCounter()
            counter.record_since(started_ns)


def register(telemetry: Telemetry, counters: GatewayCounters = COUNTERS) -> None:
    def requests() -> list[tuple[dict[str, Any], LatencyCounter]]:
        return [
            (
                {
                    "http.request.method": method,
                    "http.route": route,
                    "http.response.status_code": status,
                },
                counter,
            )
            for (method, route, status), counter in list(counters.requests.items())
        ]

    telemetry.observe_histograms(
        "http.server.request.duration",
        "s",
        "HTTP requests, by method, route template and status (a change feed: its stream)",
        requests,
    )

    def streams(_: CallbackOptions) -> list[Observation]:
        return [Observation(counters.sse_streams)]

    telemetry.meter.create_observable_up_down_counter(
        "cairn.gateway.sse.streams",
        [streams],
        unit="{stream}",
        description="change feed (Server-Sent Events) streams open",
    )
