"""Probes the storage pod: Coordination.GetStatus of every shard, every probe
interval, each bounded by the probe timeout. Keeps what the probes amount to
(`record`) for the heartbeat and the HTTP endpoints to read."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from cairn.common.telemetry import LatencyCounter
from cairn.common.tls import ChannelCache, TlsSource
from cairn.health.core import PodStatus, ProbeRecord, pod_status_of
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

# A restarted pod must be seen within about a second, not after gRPC's default
# reconnect backoff (which grows to two minutes).
RECONNECT_INITIAL_BACKOFF_MS = 100
RECONNECT_MAX_BACKOFF_MS = 1000


class Prober:
    def __init__(
        self,
        target: str,
        interval_ms: int,
        timeout_ms: int,
        clock_s: Callable[[], float] = time.monotonic,
        tls: TlsSource | None = None,
    ) -> None:
        """`tls`: the sidecar's certificate (the pod's internal port is mutual TLS)."""
        self.target = target
        self.tls = tls
        self.interval_s = interval_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.record = ProbeRecord()
        self._clock_s = clock_s
        self._channels: ChannelCache | None = None
        # Metrics (metrics.py): probes by result, and their durations.
        self.probes_ok = 0
        self.probes_failed = 0
        self.latency = LatencyCounter()

    async def run(self) -> None:
        """Probe until cancelled (one probe at a time: a slow one delays the next)."""
        # A cache of one: the channel is made again when the certificate changes.
        self._channels = ChannelCache(
            self.tls,
            [
                ("grpc.initial_reconnect_backoff_ms", RECONNECT_INITIAL_BACKOFF_MS),
                ("grpc.min_reconnect_backoff_ms", RECONNECT_INITIAL_BACKOFF_MS),
                ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_BACKOFF_MS),
            ],
        )
        try:
            next_at_s = self._clock_s()
            while True:
                await self.probe_once()
                next_at_s += self.interval_s
                now_s = self._clock_s()
                # After a probe that took longer than the interval, go on from now
                # rather than catching up with a burst.
                next_at_s = max(next_at_s, now_s)
                await asyncio.sleep(next_at_s - now_s)
        finally:
            channels, self._channels = self._channels, None
            await channels.close()

    async def probe_once(self) -> None:
        was_ok = self.record.last_probe_ok
        started_ns = time.perf_counter_ns()
        try:
            pod = await self._get_status()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.latency.record_since(started_ns)
            self.probes_failed += 1
            message = _describe(error, self.timeout_s)
            if was_ok or self.record.last_probe_at_s is None:
                log.warning("storage pod %s unreachable: %s", self.target, message)
            self.record = self.record.after_failure(message, self._clock_s())
            return
        self.latency.record_since(started_ns)
        self.probes_ok += 1
        if not was_ok:
            log.info("storage pod %s reachable", self.target)
        self.record = self.record.after_success(pod, self._clock_s())

    async def _get_status(self) -> PodStatus:
        assert self._channels is not None
        stub = rpb_grpc.CoordinationStub(self._channels.get(self.target))
        # The gRPC deadline ends a call to a hung (stopped) pod; the asyncio timeout
        # also bounds whatever of the call the deadline might not cover, so that a
        # probe never blocks the sidecar for longer than the probe timeout.
        async with asyncio.timeout(self.timeout_s):
            response = await stub.GetStatus(rpb.GetStatusRequest(), timeout=self.timeout_s)
        return pod_status_of(response)


def _describe(error: Exception, timeout_s: float) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {round(timeout_s * 1000)} ms"
    if isinstance(error, grpc.aio.AioRpcError):
        code = error.code()
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"no answer within {round(timeout_s * 1000)} ms"
        return f"{code.name}: {error.details()}"
    return f"{type(error).__name__}: {error}"
