"""The gateway's metrics: `http.server.request.duration` by method, route template
and status (recorded by the app's front, fastpath.Front), and the change-feed streams open.

Durations are counted in `LatencyCounter`s (plain ints, one per method, route and
status) and published at collection time, like the storage pods' latencies.
Labels stay bounded: the route is the matched template (`/v1/namespaces/{namespace}/
keys/{key}`), never the path; a request no route matched is `unmatched`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from cairn.common.telemetry import LatencyCounter, Telemetry

UNMATCHED_ROUTE = "unmatched"


class GatewayCounters:
    """Counted by the app as it serves (single event loop: plain ints)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], LatencyCounter] = {}
        self.sse_streams = 0


COUNTERS = GatewayCounters()


def record_request(
    counters: GatewayCounters, method: str, route: str, status: int, started_ns: int
) -> None:
    """Count one HTTP request, timed from `started_ns` (its start) to now (its
    last body byte; a change feed: the whole stream)."""
    key = (method, route, status)
    counter = counters.requests.get(key)
    if counter is None:
        counter = counters.requests[key] = LatencyCounter()
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
