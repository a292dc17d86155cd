"""`cairn-controller`: reconcile a Cairn cluster.

    cairn-controller --state-dir ./state                  (file store, the default)
    cairn-controller --state kubernetes --cluster cairn    (CairnCluster resource)
    cairn-controller --state kubernetes --statefulset cairn-storage
                       (also keeps that StatefulSet's replicas in step with the spec)

Serves the admin API and the heartbeat endpoint on --port (default 6650); prints
`cairn-controller listening on http(s)://HOST:PORT` once it does.

Transport security is chosen explicitly: `--tls-dir DIR` (cert-manager layout)
serves HTTPS (client certificates verified when presented; heartbeats need the
sending pod's sidecar certificate) and calls the pods' internal ports over
mutual TLS; `--insecure` is plaintext everywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

import uvicorn

from cairn.common.auth.arguments import add_auth_arguments, auth_config_from
from cairn.common.logs import add_log_arguments, setup_logging
from cairn.common.telemetry import (
    METRICS_PORT_CONTROLLER,
    Telemetry,
    add_metrics_arguments,
    metrics_tls_dir,
)
from cairn.common.tls import add_transport_arguments, server_ssl_context
from cairn.common.tls_asgi import uvicorn_tls_options
from cairn.common.version import add_version_option
from cairn.controller import DISTRIBUTION
from cairn.controller.api import create_app
from cairn.controller.metrics import ControllerMetrics
from cairn.controller.model import default_spec
from cairn.controller.observer import DetectionSettings
from cairn.controller.planner import PlannerSettings
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.file_store import FileLeaderLock, FileStateStore
from cairn.controller.state.store import LeaderLock, StateStore

LISTENING = "cairn-controller listening on"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn-controller", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6650, help="admin/heartbeat HTTP; 0 = any")
    parser.add_argument("--state", choices=["file", "kubernetes"], default="file")
    parser.add_argument("--state-dir", type=Path, help="file store directory")
    parser.add_argument("--cluster", default="cairn", help="CairnCluster name (kubernetes)")
    parser.add_argument(
        "--kube-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="Kubernetes namespace of the CairnCluster and the Lease",
    )
    parser.add_argument("--identity", default=socket.gethostname(), help="Lease holder identity")
    parser.add_argument(
        "--pod-selector",
        default="app.kubernetes.io/component=storage",
        help="label selector of the storage pods (Kubernetes: pod events)",
    )
    parser.add_argument(
        "--statefulset",
        default=None,
        metavar="NAME",
        help="the storage StatefulSet whose replicas follow spec.storage.replicas "
        "(Kubernetes; default: the pod count is left to whoever starts the pods)",
    )
    first = parser.add_argument_group("first start (the stored spec wins afterwards)")
    first.add_argument("--shards", type=int, default=3, help="shards of the default namespace")
    first.add_argument("--replication-factor", type=int, default=3)
    first.add_argument("--storage-pods", type=int, default=3)
    timing = parser.add_argument_group("failure detection and damping")
    timing.add_argument("--heartbeat-timeout-ms", type=int, default=2_000)
    timing.add_argument("--status-interval-ms", type=int, default=1_000)
    timing.add_argument("--replace-after-ms", type=int, default=30_000)
    timing.add_argument("--rebalance-after-ms", type=int, default=10_000)
    timing.add_argument("--startup-grace-ms", type=int, default=3_000)
    add_transport_arguments(parser, "plaintext HTTP and pod calls (development only)")
    add_metrics_arguments(parser, METRICS_PORT_CONTROLLER)
    add_auth_arguments(parser)
    parser.add_argument("--log-level", default="INFO")
    add_log_arguments(parser)
    return parser


def _stores(args: argparse.Namespace) -> tuple[StateStore, LeaderLock, Any]:
    """The state store, the leader lock, and (on Kubernetes) the API client."""
    if args.state == "file":
        if args.state_dir is None:
            raise SystemExit("--state-dir is required with --state file")
        return FileStateStore(args.state_dir, args.cluster), FileLeaderLock(args.state_dir), None
    from kubernetes import client, config

    from cairn.controller.state.kube_store import KubernetesLeaderLock, KubernetesStateStore

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    store = KubernetesStateStore(api, args.kube_namespace, args.cluster)
    lock = KubernetesLeaderLock(
        api, args.kube_namespace, f"{args.cluster}-controller", args.identity
    )
    return store, lock, api


async def _serve(args: argparse.Namespace) -> None:
    store, lock, api = _stores(args)
    settings = RuntimeSettings(
        detection=DetectionSettings(
            heartbeat_timeout_ms=args.heartbeat_timeout_ms,
            status_interval_ms=args.status_interval_ms,
        ),
        planner=PlannerSettings(
            replace_after_ms=args.replace_after_ms, rebalance_after_ms=args.rebalance_after_ms
        ),
        startup_grace_ms=args.startup_grace_ms,
        tls_dir=args.tls_dir,
    )
    spec = default_spec(args.shards, args.replication_factor, args.storage_pods)
    pod_count = None
    if args.statefulset:
        if api is None:
            raise SystemExit("--statefulset needs --state kubernetes")
        from cairn.controller.kube_scale import StatefulSetScale

        pod_count = StatefulSetScale(api, args.kube_namespace, args.statefulset)
    controller = Controller(store, lock, spec, settings, pod_count=pod_count)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    ssl_context = server_ssl_context(args.tls_dir, require_client_cert=False)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(
                controller,
                auth_config_from(args, "cairn-controller"),
                require_identity=ssl_context is not None,
            ),
            log_level="warning",
            lifespan="off",
            # log_config None: uvicorn's loggers write through setup_logging's handler.
            log_config=None,
            **uvicorn_tls_options(ssl_context),
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    http = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if http.done():
            http.result()
        await asyncio.sleep(0.01)
    scheme = "https" if ssl_context is not None else "http"
    print(f"{LISTENING} {scheme}://{host}:{port}", flush=True)
    reload_tls = asyncio.create_task(ssl_context.keep_fresh()) if ssl_context is not None else None
    telemetry = Telemetry(
        "cairn-controller",
        args.identity,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        metrics_tls_dir=metrics_tls_dir(args),
        tls_dir=args.tls_dir,
    )
    ControllerMetrics(telemetry, controller, loop)
    metrics_address = telemetry.start()
    if metrics_address is not None:
        print(
            f"cairn-controller metrics on {telemetry.scheme}://{metrics_address}/metrics",
            flush=True,
        )
    pods = None
    if api is not None:
        from cairn.controller.kube_pods import PodWatcher

        pods = PodWatcher(api, args.kube_namespace, args.pod_selector, controller.observer.on_pod)
        pods.start(asyncio.get_running_loop())
    reconcile = asyncio.create_task(controller.run())
    stopped = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait({reconcile, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if reconcile in done and reconcile.exception() is not None:
            logging.getLogger(__name__).error("controller stopped", exc_info=reconcile.exception())
    finally:
        reconcile.cancel()
        await asyncio.gather(reconcile, return_exceptions=True)
        server.should_exit = True
        await http
        if pods is not None:
            pods.stop()
        await controller.close()
        stopped.cancel()
        if reload_tls is not None:
            reload_tls.cancel()
        telemetry.shutdown()


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    setup_logging("cairn-controller", args.log_level, args.log_format, node=args.identity)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
