"""The health sidecar's metrics: its probes of the storage pod (by result, and
their durations) and the verdicts it serves (live, ready, storage reachable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from cairn.common.telemetry import Telemetry
from cairn.health.prober import Prober


def register(telemetry: Telemetry, prober: Prober, sidecar: Any) -> None:
    """`sidecar` is the service's Sidecar (its liveness and readiness verdicts)."""
    meter = telemetry.meter

    def probes(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(prober.probes_ok, {"result": "ok"}),
            Observation(prober.probes_failed, {"result": "failed"}),
        ]

    meter.create_observable_counter(
        "cairn.health.probes",
        [probes],
        unit="{probe}",
        description="GetStatus probes of the storage pod, by result",
    )

    def gauge(value: Callable[[], bool]) -> Callable[[CallbackOptions], list[Observation]]:
        return lambda _: [Observation(1 if value() else 0)]

    for name, description, value in (
        (
            "cairn.health.storage_reachable",
            "1 if the latest probe of the storage pod succeeded",
            lambda: prober.record.last_probe_ok,
        ),
        ("cairn.health.live", "1 while /livez answers live", lambda: sidecar.liveness().ok),
        ("cairn.health.ready", "1 while /readyz answers ready", lambda: sidecar.readiness().ok),
    ):
        meter.create_observable_gauge(name, [gauge(value)], unit="1", description=description)
    telemetry.observe_histograms(
        "cairn.health.probe.duration",
        "s",
        "GetStatus probes of the storage pod (a failed one: until it failed)",
        lambda: [({}, prober.latency)],
    )
