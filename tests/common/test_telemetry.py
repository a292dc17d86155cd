"""cairn.common.telemetry: the latency counter, the /metrics endpoint (checked by
promtool), callback histograms, process metrics, and the OTLP reader."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from cairn.common.telemetry import (
    DURATION_BOUNDS_S,
    LatencyCounter,
    LoopSnapshot,
    Telemetry,
    add_metrics_arguments,
    otlp_configured,
    parse_metrics_port,
)
from support.promtool import check_metrics, samples, scrape


def test_latency_counter_buckets_match_prometheus_le() -> None:
    counter = LatencyCounter((0.001, 0.01))
    counter.record_ns(1_000_000)  # exactly on a bound: that bucket (le is inclusive)
    counter.record_ns(1_000_001)
    counter.record_ns(10_000_000)
    counter.record_ns(20_000_000_000)  # above every bound: the overflow bucket
    assert counter.counts == [1, 2, 1]
    assert counter.count == 4
    assert counter.sum_ns == 1_000_000 + 1_000_001 + 10_000_000 + 20_000_000_000


def test_metrics_port_values() -> None:
    assert parse_metrics_port("9090") == 9090
    assert parse_metrics_port("0") == 0
    assert parse_metrics_port("off") is None
    with pytest.raises(ValueError, match="65535"):
        parse_metrics_port("70000")
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser, 9093)
    assert parser.parse_args([]).metrics_port == 9093
    assert parser.parse_args(["--metrics-port", "off"]).metrics_port is None


def test_otlp_only_when_an_endpoint_is_set() -> None:
    assert not otlp_configured({})
    assert otlp_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert otlp_configured({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4317"})


def test_endpoint_passes_promtool_and_publishes_counters() -> None:
    asyncio.run(_endpoint_passes_promtool())


async def _endpoint_passes_promtool() -> None:
    telemetry = Telemetry("cairn-test", "instance-1", metrics_port=0)
    latency = LatencyCounter()
    latency.record_ns(300_000)
    telemetry.observe_histograms(
        "rpc.server.call.duration",
        "s",
        "call durations",
        lambda: [({"rpc.method": "Write"}, latency)],
    )
    requests = {"count": 0}
    telemetry.meter.create_observable_counter(
        "cairn.test.requests",
        [lambda _: [Observation(requests["count"], {"shard": 0})]],
        unit="{request}",
        description="requests",
    )
    http = telemetry.meter.create_histogram(
        "http.server.request.duration", unit="s", description="HTTP request durations"
    )
    http.record(0.003, {"http.route": "/v1/x"})
    address = telemetry.start()
    assert address is not None
    try:
        await asyncio.sleep(0.6)  # one event-loop lag sample
        requests["count"] = 5
        text = await asyncio.to_thread(scrape, address)
        check_metrics(text)
        assert samples(text, "cairn_test_requests_total") == {frozenset({("shard", "0")}): 5}
        buckets = samples(text, "rpc_server_call_duration_seconds_bucket")
        assert buckets[frozenset({("rpc_method", "Write"), ("le", "0.0005")})] == 1
        assert buckets[frozenset({("rpc_method", "Write"), ("le", "0.00025")})] == 0
        # Synchronous histograms get the same explicit bounds (in seconds).
        http_buckets = samples(text, "http_server_request_duration_seconds_bucket")
        assert len(http_buckets) == len(DURATION_BOUNDS_S) + 1
        for name in (
            "process_cpu_time_seconds_total",
            "process_memory_usage_bytes",
            "cairn_process_open_files",
            "cpython_gc_collections_total",
            "cairn_process_event_loop_lag_seconds_count",
            "target_info",
        ):
            assert samples(text, name), name
        # Two scrapes at once each get the whole page once.
        pages = await asyncio.gather(*(asyncio.to_thread(scrape, address) for _ in range(4)))
        for page in pages:
            check_metrics(page)
    finally:
        telemetry.shutdown()


def test_endpoint_off_serves_nothing() -> None:
    telemetry = Telemetry("cairn-test", metrics_port=None)
    assert telemetry.start() is None
    telemetry.shutdown()


class _Exporter(MetricExporter):
    def __init__(self) -> None:
        super().__init__(preferred_temporality={})
        self.exported: list[MetricsData] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        self.exported.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        pass


def test_otlp_reader_exports_callback_histograms() -> None:
    exporter = _Exporter()
    telemetry = Telemetry("cairn-test", otlp_exporter=exporter)
    latency = LatencyCounter()
    latency.record_ns(2_000_000)
    telemetry.observe_histograms("cairn.test.duration", "s", "d", lambda: [({}, latency)])
    telemetry.provider.force_flush()
    telemetry.shutdown()
    points = [
        (metric.name, point, metric.data.aggregation_temporality)  # type: ignore[union-attr]
        for data in exporter.exported
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
        if metric.name == "cairn.test.duration"
    ]
    assert points
    _, point, temporality = points[0]
    assert isinstance(point, HistogramDataPoint)
    assert point.count == 1
    assert temporality is AggregationTemporality.CUMULATIVE


def test_loop_snapshot_runs_on_the_loop() -> None:
    asyncio.run(_loop_snapshot())


async def _loop_snapshot() -> None:
    import threading

    loop = asyncio.get_running_loop()
    threads: list[int] = []

    def take() -> int:
        threads.append(threading.get_ident())
        return len(threads)

    snapshot = LoopSnapshot(take, loop, max_age_s=60.0)
    assert await asyncio.to_thread(snapshot.get) == 1
    assert await asyncio.to_thread(snapshot.get) == 1  # reused within max_age_s
    assert threads == [threading.get_ident()]
