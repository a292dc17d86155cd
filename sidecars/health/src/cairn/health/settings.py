"""Command-line settings of the health sidecar."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cairn.common.logs import add_log_arguments
from cairn.common.telemetry import METRICS_PORT_HEALTH, add_metrics_arguments
from cairn.common.tls import add_transport_arguments
from cairn.common.version import add_version_option
from cairn.health import DISTRIBUTION

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class Settings:
    node_name: str
    # host:port of the pod's internal gRPC port (Coordination and Health).
    storage_internal: str
    # Base URL of the controller; None: send no heartbeats.
    controller_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    labels: Mapping[str, str] = field(default_factory=dict)
    probe_interval_ms: int = 250
    probe_timeout_ms: int = 1000
    heartbeat_interval_ms: int = 500
    heartbeat_timeout_ms: int = 1000
    liveness_failure_ms: int = 30_000
    ready_max_lag_entries: int = 1000
    log_level: str = "INFO"
    log_format: str = "text"
    # The Prometheus /metrics endpoint (None: none; the command line's default is
    # METRICS_PORT_HEALTH).
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    # The sidecar's certificate directory (cert-manager layout; its certificate
    # names `sidecar/<node name>`): HTTPS on its own port, mutual TLS to the
    # pod's internal port and to the controller. None: plaintext everywhere.
    tls_dir: Path | None = None
    metrics_plaintext: bool = False

    @property
    def heartbeat_url(self) -> str | None:
        if self.controller_url is None:
            return None
        return self.controller_url.rstrip("/") + "/v1/heartbeats"


def _label(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def _positive_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ms") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn-health",
        description="Health sidecar of a Cairn storage pod: probes the pod, serves "
        "/livez /readyz /status, and heartbeats to the controller.",
    )
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--node-name", required=True, help="the pod's name, e.g. storage-0")
    parser.add_argument(
        "--storage-internal",
        required=True,
        metavar="HOST:PORT",
        help="the pod's internal gRPC address (Coordination and Health)",
    )
    parser.add_argument(
        "--controller", default=None, metavar="URL", help="controller base URL (no heartbeats)"
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP bind host ({DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"HTTP port ({DEFAULT_PORT}); 0: any free"
    )
    parser.add_argument(
        "--label",
        dest="labels",
        action="append",
        type=_label,
        default=[],
        metavar="KEY=VALUE",
        help="a node label for anti-affinity (repeatable)",
    )
    parser.add_argument("--probe-interval-ms", type=_positive_ms, default=250)
    parser.add_argument("--probe-timeout-ms", type=_positive_ms, default=1000)
    parser.add_argument("--heartbeat-interval-ms", type=_positive_ms, default=500)
    parser.add_argument("--heartbeat-timeout-ms", type=_positive_ms, default=1000)
    parser.add_argument(
        "--liveness-failure-ms",
        type=_positive_ms,
        default=30_000,
        help="how long the pod may fail every probe before /livez fails (30000)",
    )
    parser.add_argument(
        "--ready-max-lag",
        type=_non_negative,
        default=1000,
        metavar="ENTRIES",
        help="most entries a leader's voting follower may lag its commit for /readyz (1000)",
    )
    add_transport_arguments(parser)
    add_metrics_arguments(parser, METRICS_PORT_HEALTH)
    parser.add_argument(
        "--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="(INFO)"
    )
    add_log_arguments(parser)
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """The settings from the command line; exits with status 2 on bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    labels: dict[str, str] = {}
    for key, value in args.labels:
        if key in labels:
            parser.error(f"--label {key} given twice")
        labels[key] = value
    if args.controller is not None:
        url = urlsplit(args.controller)
        if url.scheme not in ("http", "https") or not url.netloc:
            parser.error(f"--controller {args.controller!r} is not an http(s) URL")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port} is out of range")
    if not args.node_name:
        parser.error("--node-name must not be empty")
    return Settings(
        node_name=args.node_name,
        storage_internal=args.storage_internal,
        controller_url=args.controller,
        host=args.host,
        port=args.port,
        labels=labels,
        probe_interval_ms=args.probe_interval_ms,
        probe_timeout_ms=args.probe_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        heartbeat_timeout_ms=args.heartbeat_timeout_ms,
        liveness_failure_ms=args.liveness_failure_ms,
        ready_max_lag_entries=args.ready_max_lag,
        log_level=args.log_level,
        log_format=args.log_format,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        tls_dir=args.tls_dir,
        metrics_plaintext=args.metrics_plaintext,
    )
