"""The sidecar assembled: prober, heartbeat pusher and HTTP server in one event
loop, until asked to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import uvicorn

from cairn.common.heartbeat import Heartbeat
from cairn.common.telemetry import Telemetry
from cairn.common.tls import LiveSSLContext, TlsSource
from cairn.common.tls_asgi import uvicorn_tls_options
from cairn.health import metrics
from cairn.health.api import create_app
from cairn.health.core import Verdict, build_heartbeat, liveness, readiness, status_document
from cairn.health.prober import Prober
from cairn.health.pusher import HeartbeatPusher, new_client
from cairn.health.settings import Settings

log = logging.getLogger(__name__)

LISTENING_PREFIX = "cairn-health listening on "
# Time given to HTTP requests in flight when the sidecar stops.
HTTP_GRACE_S = 2


class Sidecar:
    """The decisions of core.py applied to the prober's latest record."""

    def __init__(self, settings: Settings, prober: Prober) -> None:
        self.settings = settings
        self.prober = prober

    def liveness(self) -> Verdict:
        return liveness(self.prober.record, time.monotonic(), self.settings.liveness_failure_ms)

    def readiness(self) -> Verdict:
        return readiness(self.prober.record, self.settings.ready_max_lag_entries)

    def status(self) -> dict[str, Any]:
        return status_document(
            self.settings.node_name,
            self.prober.record,
            time.monotonic(),
            self.liveness(),
            self.readiness(),
        )

    def heartbeat(self) -> Heartbeat:
        return build_heartbeat(
            self.settings.node_name,
            self.settings.labels,
            self.prober.record,
            sent_at_ms=time.time_ns() // 1_000_000,
        )


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host program. uvicorn's own
    handling would re-raise SIGTERM after its shutdown, killing the process
    before the rest of the sidecar has stopped."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.listening.set()


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def http_address(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


async def run(
    settings: Settings,
    stop: asyncio.Event,
    on_listening: Callable[[str], None] | None = None,
    on_metrics: Callable[[str], None] | None = None,
) -> None:
    """Serve until `stop` is set. `on_listening` gets the HTTP base address once
    requests are answered, `on_metrics` the metrics endpoint's `host:port` (when
    there is one). Raises if a part of the sidecar fails on its own."""
    tls = TlsSource.from_directory(settings.tls_dir) if settings.tls_dir else None
    prober = Prober(
        settings.storage_internal, settings.probe_interval_ms, settings.probe_timeout_ms, tls=tls
    )
    sidecar = Sidecar(settings, prober)
    # The kubelet's HTTPS probes present no certificate: none is required here.
    server_tls = LiveSSLContext(tls, server=True) if tls is not None else None
    client_tls = LiveSSLContext(tls, server=False) if tls is not None else None
    server = _EmbeddedServer(
        uvicorn.Config(
            create_app(sidecar),
            # The kubelet probes every few seconds: an access log would be noise.
            access_log=False,
            lifespan="off",
            # Keep the program's logging configuration.
            log_config=None,
            log_level=settings.log_level.lower(),
            timeout_graceful_shutdown=HTTP_GRACE_S,
            **uvicorn_tls_options(server_tls),
        )
    )
    async with contextlib.AsyncExitStack() as stack:
        sock = bind(settings.host, settings.port)
        stack.callback(sock.close)
        telemetry = Telemetry(
            "cairn-health",
            settings.node_name,
            metrics_host=settings.metrics_host,
            metrics_port=settings.metrics_port,
            metrics_tls_dir=None if settings.metrics_plaintext else settings.tls_dir,
            tls_dir=settings.tls_dir,
        )
        stack.callback(telemetry.shutdown)
        metrics.register(telemetry, prober, sidecar)
        metrics_address = telemetry.start()
        if metrics_address is not None and on_metrics is not None:
            on_metrics(metrics_address)
        tasks: dict[asyncio.Task[None], str] = {}

        def start(name: str, work: Coroutine[Any, Any, None]) -> None:
            tasks[asyncio.create_task(work, name=name)] = name

        start("prober", prober.run())
        if server_tls is not None:
            start("tls-reload", server_tls.keep_fresh())
        url = settings.heartbeat_url
        if url is not None:
            client = await stack.enter_async_context(
                new_client(settings.heartbeat_timeout_ms, client_tls)
            )
            pusher = HeartbeatPusher(
                url,
                settings.heartbeat_interval_ms,
                settings.heartbeat_timeout_ms,
                sidecar.heartbeat,
                client,
            )
            start("heartbeats", pusher.run())
        else:
            log.info("no --controller: sending no heartbeats")
        http_task = asyncio.create_task(server.serve(sockets=[sock]), name="http")
        tasks[http_task] = "http"
        stop_task = asyncio.create_task(stop.wait(), name="stop")
        listening_task = asyncio.create_task(server.listening.wait(), name="listening")
        done: set[asyncio.Task[Any]] = set()
        try:
            await asyncio.wait(
                [listening_task, stop_task, *tasks], return_when=asyncio.FIRST_COMPLETED
            )
            if server.listening.is_set() and on_listening is not None:
                on_listening(http_address(sock, "https" if server_tls else "http"))
            done, _ = await asyncio.wait([stop_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            others = [stop_task, listening_task, *(t for t in tasks if t is not http_task)]
            await _stop(server, http_task, others)
        if stop_task not in done:
            failed = next(iter(done))
            cause = None if failed.cancelled() else failed.exception()
            raise RuntimeError(f"the sidecar's {tasks[failed]} ended on its own") from cause


async def _stop(
    server: uvicorn.Server, http_task: asyncio.Task[None], others: list[asyncio.Task[Any]]
) -> None:
    # The HTTP server first, while the probes still run: /readyz answers stay
    # truthful until the port closes.
    server.should_exit = True
    await asyncio.gather(http_task, return_exceptions=True)
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
