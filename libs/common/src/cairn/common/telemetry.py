"""Metrics for every Cairn process: OpenTelemetry SDK, served for Prometheus on `/metrics`.

One `Telemetry` per process owns the MeterProvider. Its readers:
- a Prometheus reader whose registry a small HTTP server (prometheus_client's, on a
  thread of its own) serves at `http://HOST:PORT/metrics`; a scrape runs the
  observable callbacks on that thread;
- an OTLP (gRPC) exporter, only when `OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set (the SDK reads the other standard
  `OTEL_EXPORTER_OTLP_*` and `OTEL_METRIC_EXPORT_INTERVAL` variables itself).

Hot paths never call a synchronous OTel instrument (one call costs more than a put's
server CPU; measurements: docs/performance.md, "Metrics off the hot path"). They
count in plain ints, and latencies go into a `LatencyCounter`: a list of ints
indexed by bisect over fixed bounds (one bisect and two adds). Observable
instruments publish the ints; `observe_histograms` publishes the latency counters
as real histograms (the OTel API has no observable histogram, so each reader adds
them to what the SDK collected, see `_with_callback_histograms`).

A scrape runs the callbacks and formats the page on the endpoint's thread, holding
the GIL meanwhile for milliseconds of CPU, most of them the SDK's collection and
prometheus_client's text (measurements: docs/performance.md, "Metrics off the hot
path").

Names follow the OpenTelemetry semantic conventions where there is one
(`rpc.server.call.duration`, `http.server.request.duration`, `process.cpu.time`...)
and carry a `cairn.` prefix otherwise; durations are in seconds with the explicit
bucket bounds of `DURATION_BOUNDS_S` (a View applies them to synchronous histograms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import resource
import ssl
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry, start_http_server

from cairn.common.certificate_expiry import CertificateExpiry
from cairn.common.tls import LiveSSLContext, TlsConfigError, TlsSource

log = logging.getLogger(__name__)
T = TypeVar("T")

# Latency bucket bounds, in seconds: 50 us (a cached get) to 10 s (a stalled write).
DURATION_BOUNDS_S: tuple[float, ...] = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# Default `/metrics` ports, one per kind of process (ARCHITECTURE: 9090-9099).
METRICS_PORT_STORAGE = 9090
METRICS_PORT_CONTROLLER = 9091
METRICS_PORT_GATEWAY = 9092
METRICS_PORT_HEALTH = 9093

OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
EVENT_LOOP_LAG_INTERVAL_S = 0.5
_NS_PER_S = 1_000_000_000
_SCOPE = InstrumentationScope("cairn")


class LatencyCounter:
    """Durations in fixed buckets, counted in plain ints (no lock: one event loop
    records, a scrape reads; a scrape may see a count one sample ahead of the sum)."""

    __slots__ = ("bounds_ns", "bounds_s", "counts", "sum_ns")

    def __init__(self, bounds_s: Sequence[float] = DURATION_BOUNDS_S) -> None:
        self.bounds_s = tuple(bounds_s)
        self.bounds_ns = [round(bound * _NS_PER_S) for bound in self.bounds_s]
        # counts[i] holds durations in (bounds[i-1], bounds[i]]; the last, above them all.
        self.counts = [0] * (len(self.bounds_ns) + 1)
        self.sum_ns = 0

    def record_ns(self, elapsed_ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, elapsed_ns)] += 1
        self.sum_ns += elapsed_ns

    def record_since(self, start_ns: int) -> None:
        """Record the time from `start_ns` (a `time.perf_counter_ns()`) to now."""
        elapsed_ns = time.perf_counter_ns() - start_ns
        self.counts[bisect_left(self.bounds_ns, elapsed_ns)] += 1
        self.sum_ns += elapsed_ns

    @property
    def count(self) -> int:
        return sum(self.counts)


class LoopSnapshot(Generic[T]):
    """A value computed on the event loop's thread for callbacks that run elsewhere
    (a scrape runs on the endpoint's thread): state the loop mutates is read there,
    never half-changed. One value serves every callback of a collection: pass
    `invalidate` to `Telemetry.before_collect` (a scrape calls it first; an OTLP
    export, whose collection has no such hook, takes values up to `max_age_s` old)."""

    def __init__(
        self,
        take: Callable[[], T],
        loop: asyncio.AbstractEventLoop,
        max_age_s: float = 1.0,
        timeout_s: float = 5.0,
    ) -> None:
        self._take = take
        self._loop = loop
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._value: T | None = None
        self._taken_at = 0.0

    def invalidate(self) -> None:
        with self._lock:
            self._value = None

    def get(self) -> T:
        with self._lock:
            now = time.monotonic()
            if self._value is None or now - self._taken_at > self._max_age_s:
                self._value = self._take_on_loop()
                self._taken_at = now
            return self._value

    def _take_on_loop(self) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return self._take()

        async def take() -> T:
            return self._take()

        return asyncio.run_coroutine_threadsafe(take(), self._loop).result(self._timeout_s)


# A callback yields (attributes, counter) pairs: one histogram data point each.
HistogramCallback = Callable[[], Iterable[tuple[dict[str, Any], LatencyCounter]]]


@dataclass(frozen=True)
class _CallbackHistogram:
    name: str
    unit: str
    description: str
    callback: HistogramCallback


def _data_point(
    attributes: dict[str, Any], counter: LatencyCounter, start_ns: int, now_ns: int
) -> HistogramDataPoint:
    counts = list(counter.counts)
    total = sum(counts)
    bounds = counter.bounds_s
    # Min and max are not tracked (a compare per sample); the bounds of the outermost
    # non-empty buckets stand in for them.
    used = [i for i, n in enumerate(counts) if n]
    low = bounds[used[0] - 1] if used and used[0] > 0 else 0.0
    high = bounds[min(used[-1], len(bounds) - 1)] if used else 0.0
    return HistogramDataPoint(
        attributes=attributes,
        start_time_unix_nano=start_ns,
        time_unix_nano=now_ns,
        count=total,
        sum=counter.sum_ns / _NS_PER_S,
        bucket_counts=counts,
        explicit_bounds=list(bounds),
        min=low,
        max=high,
    )


class _CallbackHistograms:
    """The latency counters' histograms, added to each collection."""

    def __init__(self, resource_: Resource) -> None:
        self.resource = resource_
        self.start_ns = time.time_ns()
        self.histograms: list[_CallbackHistogram] = []
        self.before_collect: list[Callable[[], None]] = []

    def collection_starts(self) -> None:
        for hook in self.before_collect:
            hook()

    def metrics(self) -> list[Metric]:
        now_ns = time.time_ns()
        found: list[Metric] = []
        for histogram in self.histograms:
            try:
                points = [
                    _data_point(attributes, counter, self.start_ns, now_ns)
                    for attributes, counter in histogram.callback()
                ]
            except Exception:  # a metric must never take the process down
                log.exception("metric callback for %s failed", histogram.name)
                continue
            if points:
                found.append(
                    Metric(
                        name=histogram.name,
                        description=histogram.description,
                        unit=histogram.unit,
                        data=Histogram(
                            data_points=points,
                            aggregation_temporality=AggregationTemporality.CUMULATIVE,
                        ),
                    )
                )
        return found

    def added_to(self, data: MetricsData | None) -> MetricsData | None:
        extra = self.metrics()
        if not extra:
            return data
        scope = ScopeMetrics(scope=_SCOPE, metrics=extra, schema_url="")
        if data is None or not data.resource_metrics:
            return MetricsData(
                resource_metrics=[
                    ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")
                ]
            )
        first, *rest = data.resource_metrics
        merged = ResourceMetrics(
            resource=first.resource,
            scope_metrics=[*first.scope_metrics, scope],
            schema_url=first.schema_url,
        )
        return MetricsData(resource_metrics=[merged, *rest])


class _PrometheusReader(PrometheusMetricReader):
    def __init__(self, registry: CollectorRegistry, histograms: _CallbackHistograms) -> None:
        super().__init__(scope_info_enabled=False, registry=registry)
        self._histograms = histograms
        # One scrape at a time: the collector queues each collection it is given and
        # writes out every queued one, so two scrapes at once (the endpoint serves
        # each on a thread of its own) would print families twice, which Prometheus
        # refuses.
        collector = self._collector
        collect = collector.collect
        lock = threading.Lock()

        def collect_alone() -> list[Any]:
            with lock:
                queued = getattr(collector, "_metrics_datas", None)
                if queued is not None:
                    queued.clear()  # left by a scrape that went away part way
                histograms.collection_starts()
                return list(collect())

        collector.collect = collect_alone  # type: ignore[method-assign]

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        super()._receive_metrics(
            self._histograms.added_to(metrics_data),  # type: ignore[arg-type]
            timeout_millis,
            **kwargs,
        )


class _PeriodicReader(PeriodicExportingMetricReader):
    def __init__(self, exporter: MetricExporter, histograms: _CallbackHistograms) -> None:
        super().__init__(exporter)
        self._histograms = histograms

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        super()._receive_metrics(
            self._histograms.added_to(metrics_data),  # type: ignore[arg-type]
            timeout_millis,
            **kwargs,
        )


def otlp_configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(name) for name in OTLP_ENDPOINT_VARIABLES)


def parse_metrics_port(text: str) -> int | None:
    """`--metrics-port` values: a port (0 picks a free one), or `off`."""
    if text.strip().lower() in ("off", "none", "-1"):
        return None
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port {port} is not within 0..65535")
    return port


def add_metrics_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    """The `--metrics-host` and `--metrics-port` options every Cairn program takes."""

    def port(text: str) -> int | None:
        try:
            return parse_metrics_port(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the Prometheus /metrics endpoint binds (default 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port,
        default=default_port,
        help=f"port of the Prometheus /metrics endpoint (default {default_port}; "
        "0 picks a free one; off: no endpoint)",
    )
    parser.add_argument(
        "--metrics-plaintext",
        action="store_true",
        help="serve /metrics over plain HTTP even when the process has --tls-dir",
    )


def metrics_tls_dir(args: argparse.Namespace) -> Path | None:
    """The certificate directory /metrics serves TLS with: the process's own
    (`--tls-dir`) unless `--metrics-plaintext`."""
    tls_dir: Path | None = getattr(args, "tls_dir", None)
    return None if args.metrics_plaintext else tls_dir


class Telemetry:
    """A process's meter provider, its readers and its `/metrics` endpoint."""

    def __init__(
        self,
        service_name: str,
        instance_id: str = "",
        *,
        metrics_host: str = "127.0.0.1",
        metrics_port: int | None = None,
        otlp_exporter: MetricExporter | None = None,
        metrics_tls_dir: Path | None = None,
        tls_dir: Path | None = None,
    ) -> None:
        """`metrics_port` None serves no endpoint; `otlp_exporter` (tests) overrides
        the one the environment would configure. `metrics_tls_dir`: serve /metrics
        over TLS with that certificate directory (reloaded when it changes; no
        client certificate asked for: scrapers rarely have one). `tls_dir`: the
        process's certificate directory, whose expiry `cairn.tls.certificate.expiry`
        publishes (with or without TLS on /metrics itself)."""
        attributes: dict[str, str] = {"service.name": service_name}
        if instance_id:
            attributes["service.instance.id"] = instance_id
        self.resource = Resource.create(attributes)
        self._histograms = _CallbackHistograms(self.resource)
        self.registry = CollectorRegistry(auto_describe=False)
        readers: list[MetricReader] = [_PrometheusReader(self.registry, self._histograms)]
        if otlp_exporter is None and otlp_configured():
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )

            otlp_exporter = OTLPMetricExporter()
        if otlp_exporter is not None:
            readers.append(_PeriodicReader(otlp_exporter, self._histograms))
        self.provider = MeterProvider(
            metric_readers=readers,
            resource=self.resource,
            views=[
                View(
                    instrument_type=HistogramInstrument,
                    instrument_unit="s",
                    aggregation=ExplicitBucketHistogramAggregation(DURATION_BOUNDS_S),
                ),
            ],
        )
        self.meter: Meter = self.provider.get_meter("cairn")
        self._metrics_host = metrics_host
        self._metrics_port = metrics_port
        self._metrics_tls_dir = metrics_tls_dir
        self.scheme = "https" if metrics_tls_dir is not None else "http"
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.address: str | None = None
        self._loop_lag = LatencyCounter()
        self._gc_pauses = LatencyCounter()
        self._gc_started_ns = 0
        self._lag_task: asyncio.Task[None] | None = None
        self._process_metrics()
        if tls_dir is not None:
            self._certificate_metrics(CertificateExpiry(tls_dir))

    # -- instruments ---------------------------------------------------------------------

    def observe_histograms(
        self, name: str, unit: str, description: str, callback: HistogramCallback
    ) -> None:
        """Publish latency counters as a histogram: one data point per
        (attributes, counter) pair the callback yields at each collection."""
        self._histograms.histograms.append(_CallbackHistogram(name, unit, description, callback))

    def before_collect(self, hook: Callable[[], None]) -> None:
        """Run `hook` at the start of every scrape (e.g. `LoopSnapshot.invalidate`)."""
        self._histograms.before_collect.append(hook)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> str | None:
        """Serve `/metrics` (if a port is set); returns `host:port` of the endpoint.
        Call from the event loop's thread when there is one (event-loop lag is
        measured on it)."""
        with contextlib.suppress(RuntimeError):
            self._lag_task = asyncio.get_running_loop().create_task(self._measure_loop_lag())
        if self._metrics_port is not None:
            try:
                self._server, self._thread = self._start_http_server()
            except OSError as error:
                # Metrics are not worth refusing to serve for: say so, loudly, and go on.
                log.error(
                    "no metrics endpoint: cannot bind %s:%d: %s",
                    self._metrics_host,
                    self._metrics_port,
                    error,
                )
                return None
            port = self._server.server_port
            host = self._metrics_host
            self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            log.info("metrics on %s://%s/metrics", self.scheme, self.address)
        return self.address

    def _start_http_server(self) -> tuple[Any, threading.Thread]:
        assert self._metrics_port is not None
        if self._metrics_tls_dir is None:
            return start_http_server(self._metrics_port, self._metrics_host, self.registry)
        source = TlsSource.from_directory(self._metrics_tls_dir)
        files = source.files
        if files.certificate is None or files.key is None:
            raise TlsConfigError(f"{self._metrics_tls_dir} has no tls.crt and tls.key")
        server, thread = start_http_server(
            self._metrics_port,
            self._metrics_host,
            self.registry,
            certfile=str(files.certificate),
            keyfile=str(files.key),
        )
        # prometheus_client made the context from the files; its listening socket
        # keeps it, and a rotated certificate is loaded into it in place.
        listening = server.socket
        assert isinstance(listening, ssl.SSLSocket), "prometheus_client wraps the socket"
        LiveSSLContext(source, server=True, context=listening.context).keep_fresh_in_thread()
        return server, thread

    def shutdown(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            self._lag_task = None
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.provider.shutdown()

    # -- every process -------------------------------------------------------------------

    def _process_metrics(self) -> None:
        meter = self.meter
        meter.create_observable_counter(
            "process.cpu.time",
            [_cpu_time],
            unit="s",
            description="CPU time this process used, by mode (user, system)",
        )
        meter.create_observable_up_down_counter(
            "process.memory.usage",
            [_resident_bytes],
            unit="By",
            description="resident memory of this process",
        )
        # (The conventions' process.unix.file_descriptor.count and process.thread.count
        # would end in _count, which Prometheus keeps for histograms: promtool refuses them.)
        meter.create_observable_up_down_counter(
            "cairn.process.open_files",
            [_open_files],
            unit="{file_descriptor}",
            description="file descriptors this process holds open",
        )
        meter.create_observable_up_down_counter(
            "cairn.process.threads",
            [lambda _: [Observation(threading.active_count())]],
            unit="{thread}",
            description="Python threads of this process",
        )
        meter.create_observable_counter(
            "cpython.gc.collections",
            [_gc_collections],
            unit="{collection}",
            description="garbage collections, by generation",
        )
        meter.create_observable_up_down_counter(
            "cairn.process.gc.frozen_objects",
            [lambda _: [Observation(gc.get_freeze_count())]],
            unit="{object}",
            description="objects kept out of garbage collections (a server freezes "
            "what startup built)",
        )
        gc.callbacks.append(self._gc_callback)
        self.observe_histograms(
            "cairn.process.gc.pause.duration",
            "s",
            "time each garbage collection held the interpreter",
            lambda: [({}, self._gc_pauses)],
        )
        self.observe_histograms(
            "cairn.process.event_loop.lag",
            "s",
            f"how late a timer due every {EVENT_LOOP_LAG_INTERVAL_S} s ran on the event loop",
            lambda: [({}, self._loop_lag)] if self._lag_task is not None else [],
        )

    def _certificate_metrics(self, expiry: CertificateExpiry) -> None:
        def observe(_: CallbackOptions) -> list[Observation]:
            return [
                Observation(not_after, {"certificate": name})
                for name, not_after in expiry.expiries().items()
            ]

        self.meter.create_observable_gauge(
            "cairn.tls.certificate.expiry",
            [observe],
            unit="s",
            description="when each certificate file of the TLS directory expires "
            "(its earliest notAfter, Unix time)",
        )

    def _gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started_ns = time.perf_counter_ns()
        elif self._gc_started_ns:
            self._gc_pauses.record_since(self._gc_started_ns)

    async def _measure_loop_lag(self) -> None:
        interval_ns = round(EVENT_LOOP_LAG_INTERVAL_S * _NS_PER_S)
        while True:
            due = time.perf_counter_ns() + interval_ns
            await asyncio.sleep(EVENT_LOOP_LAG_INTERVAL_S)
            self._loop_lag.record_ns(max(0, time.perf_counter_ns() - due))


def _cpu_time(_: CallbackOptions) -> list[Observation]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [
        Observation(usage.ru_utime, {"cpu.mode": "user"}),
        Observation(usage.ru_stime, {"cpu.mode": "system"}),
    ]


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes(_: CallbackOptions) -> list[Observation]:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return [Observation(int(statm.read().split()[1]) * _PAGE_BYTES)]
    except OSError:  # not Linux: the peak is what getrusage knows (KiB on Linux, bytes on macOS)
        return [Observation(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)]


def _open_files(_: CallbackOptions) -> list[Observation]:
    try:
        return [Observation(len(os.listdir("/proc/self/fd")))]
    except OSError:
        return []


def _gc_collections(_: CallbackOptions) -> list[Observation]:
    return [
        Observation(stats["collections"], {"generation": str(generation)})
        for generation, stats in enumerate(gc.get_stats())
    ]
