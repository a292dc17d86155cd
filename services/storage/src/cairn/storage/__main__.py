"""`cairn-storage`: run a storage pod.

cairn-storage standalone --port 6648 --shards 3 --data-dir ./data --tls-dir ./certs
cairn-storage standalone --data-dir ./data --insecure \
    --namespace-spec default:3 --namespace-spec pulsar:8:natural:notifications=off
cairn-storage node --port 6648 --internal-port 6649 --data-dir ./data --tls-dir ./certs
cairn-storage node ... --tls-dir ./certs --public-plaintext   (for plaintext-only clients)

Transport security is chosen explicitly: `--tls-dir` (a directory in
cert-manager's layout: tls.crt, tls.key, ca.crt) or `--insecure` (plaintext on
every port). With `--tls-dir`, a node's internal port is mutual TLS and only
the controller may coordinate, only pods may replicate.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path

import uvloop

from cairn.common import tracing
from cairn.common.auth.arguments import add_auth_arguments, auth_config_from
from cairn.common.keyorder import KeyOrder
from cairn.common.logs import add_log_arguments, node_name, setup_logging
from cairn.common.startup_objects import freeze_startup_objects
from cairn.common.telemetry import (
    METRICS_PORT_STORAGE,
    Telemetry,
    add_metrics_arguments,
    metrics_tls_dir,
)
from cairn.common.tls import add_transport_arguments
from cairn.common.version import add_version_option
from cairn.storage import DISTRIBUTION
from cairn.storage.config import (
    DEFAULT_NAMESPACE,
    DEFAULT_WAL_RETENTION_BYTES,
    DEFAULT_WAL_RETENTION_MS,
    DEFAULT_WAL_SEGMENT_BYTES,
    DEFAULT_WAL_SPARE_SEGMENTS,
    DEFAULT_WAL_ZERO_FILL_BYTES,
    Limits,
    NamespaceConfig,
    NodeConfig,
    StandaloneConfig,
)
from cairn.storage.core.retention import WalRetention
from cairn.storage.metrics import StorageMetrics
from cairn.storage.node import NodeServer
from cairn.storage.standalone import LayoutMismatch, StandaloneServer

log = logging.getLogger("cairn.storage")
_DEFAULT_LIMITS = Limits()


# Per-principal and per-pod caps (Limits), each a flag of the same name.
_CAPS = (
    "max_sessions_per_principal",
    "max_sessions_per_pod",
    "max_notification_streams_per_principal",
    "max_notification_streams_per_pod",
    "max_sequence_streams_per_principal",
    "max_sequence_streams_per_pod",
)
_NOTIFICATIONS_OPTION = "notifications="
_SWITCH_VALUES = {"on": True, "off": False}


def parse_namespace_spec(spec: str) -> NamespaceConfig:
    """`NAME:SHARDS[:ORDER][:notifications=on|off]` -> NamespaceConfig."""
    name, _, rest = spec.partition(":")
    if not rest:
        raise argparse.ArgumentTypeError(
            f"{spec!r} is not NAME:SHARDS[:ORDER][:notifications=on|off]"
        )
    count_text, *options = rest.split(":")
    if len(options) > 2:
        raise argparse.ArgumentTypeError(
            f"{spec!r} has too many parts for NAME:SHARDS[:ORDER][:notifications=on|off]"
        )
    try:
        shard_count = int(count_text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{spec!r}: shard count {count_text!r} is not a number"
        ) from None
    key_order = KeyOrder.HIERARCHICAL
    notifications_enabled = True
    seen: set[str] = set()
    for option in options:
        kind = "notifications" if option.startswith(_NOTIFICATIONS_OPTION) else "order"
        if kind in seen:
            raise argparse.ArgumentTypeError(f"{spec!r}: {kind} given twice")
        seen.add(kind)
        if kind == "notifications":
            switch = option[len(_NOTIFICATIONS_OPTION) :]
            if switch not in _SWITCH_VALUES:
                raise argparse.ArgumentTypeError(f"{spec!r}: notifications must be on or off")
            notifications_enabled = _SWITCH_VALUES[switch]
        else:
            try:
                key_order = KeyOrder(option)
            except ValueError:
                orders = ", ".join(o.value for o in KeyOrder)
                raise argparse.ArgumentTypeError(
                    f"{spec!r}: unknown key order {option!r} (one of {orders})"
                ) from None
    try:
        return NamespaceConfig(name, shard_count, key_order, notifications_enabled)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{spec!r}: {error}") from None


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The program's parser and its `standalone` subparser (whose usage errors show)."""
    parser = argparse.ArgumentParser(prog="cairn-storage", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser(
        "standalone",
        help="serve every shard of every namespace from this process (replication factor 1)",
    )
    standalone.add_argument("--data-dir", type=Path, required=True, help="where WAL and KV live")
    standalone.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"
    )
    standalone.add_argument(
        "--port", type=int, default=6648, help="client port; 0 picks a free one"
    )
    # One namespace (None = not given, so a clash with --namespace-spec can be told).
    standalone.add_argument(
        "--shards", type=int, default=None, help="shard count, fixed at creation (default 1)"
    )
    standalone.add_argument(
        "--namespace", default=None, help=f"namespace name (default {DEFAULT_NAMESPACE!r})"
    )
    standalone.add_argument(
        "--key-order",
        choices=[o.value for o in KeyOrder],
        default=None,
        help=f"key order (default {KeyOrder.HIERARCHICAL.value})",
    )
    # Several namespaces.
    standalone.add_argument(
        "--namespace-spec",
        dest="namespace_specs",
        action="append",
        type=parse_namespace_spec,
        default=[],
        metavar="NAME:SHARDS[:ORDER][:notifications=on|off]",
        help="a namespace to serve (repeatable; instead of --shards/--namespace/--key-order), "
        "e.g. --namespace-spec default:3 --namespace-spec pulsar:8:natural:notifications=off. "
        "Shard count and key order are fixed at creation; a later start may add namespaces",
    )
    standalone.add_argument(
        "--advertise", default=None, help="host:port clients should dial (default: bound address)"
    )
    node = commands.add_parser(
        "node",
        help="a storage pod in a cluster: serves the shard replicas the controller assigns",
    )
    node.add_argument("--data-dir", type=Path, required=True, help="where WAL and KV live")
    node.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    node.add_argument("--port", type=int, default=6648, help="client port; 0 picks a free one")
    node.add_argument(
        "--internal-port",
        type=int,
        default=6649,
        help="coordination and replication port; 0 picks a free one",
    )
    node.add_argument("--advertise", default=None, help="host:port clients should dial")
    node.add_argument(
        "--internal-advertise", default=None, help="host:port other pods and the controller dial"
    )
    node.add_argument(
        "--public-plaintext",
        action="store_true",
        help="serve the client port without TLS (released Oxia clients speak only plaintext);"
        " the internal port stays mutual TLS",
    )
    for command in (standalone, node):
        add_transport_arguments(
            command, "plaintext on every port, no caller identities (development only)"
        )
        command.add_argument(
            "--wal-segment-bytes",
            type=int,
            default=DEFAULT_WAL_SEGMENT_BYTES,
            help="size at which a shard's WAL starts a new segment file",
        )
        command.add_argument(
            "--wal-zero-fill-bytes",
            type=int,
            default=DEFAULT_WAL_ZERO_FILL_BYTES,
            help="zero-filled room kept ahead of each WAL's write position, so that syncs"
            " commit no file growth (0: plain appends)",
        )
        command.add_argument(
            "--wal-spare-segments",
            type=int,
            default=DEFAULT_WAL_SPARE_SEGMENTS,
            help="trimmed WAL segment files kept per shard for later rollovers to reuse"
            " (deleting files stalls every sync on some disks; 0: delete them)",
        )
        command.add_argument(
            "--wal-retention-bytes",
            type=int,
            default=DEFAULT_WAL_RETENTION_BYTES,
            help="WAL size above which segments the KV durably holds are deleted",
        )
        command.add_argument(
            "--wal-retention-ms",
            type=int,
            default=DEFAULT_WAL_RETENTION_MS,
            help="WAL entries older than this (and applied) are deleted, a segment at a time",
        )
        command.add_argument(
            "--fold-after-uncommitted-entries",
            type=int,
            default=_DEFAULT_LIMITS.fold_writes_after_uncommitted_entries,
            help="a leader folds plain writes into one log entry while at least this many "
            "entries wait for their commit (a large number: never)",
        )
        command.add_argument(
            "--read-cache-bytes",
            type=int,
            default=_DEFAULT_LIMITS.max_read_cache_bytes_per_shard,
            help="bytes of answers to exact-key gets a shard's leader keeps in memory (0: none)",
        )
        for cap in _CAPS:
            command.add_argument(
                f"--{cap.replace('_', '-')}",
                type=int,
                default=getattr(_DEFAULT_LIMITS, cap),
                help="open at once on this pod (a client past it gets RESOURCE_EXHAUSTED)",
            )
        add_auth_arguments(command)
        add_metrics_arguments(command, METRICS_PORT_STORAGE)
        command.add_argument("--log-level", default="INFO")
        add_log_arguments(command)
    return parser, standalone


def _limits(args: argparse.Namespace) -> Limits:
    caps = {cap: getattr(args, cap) for cap in _CAPS}
    if min(caps.values()) < 1:
        raise SystemExit("cairn-storage: session and stream caps must be at least 1")
    try:
        return replace(
            _DEFAULT_LIMITS,
            fold_writes_after_uncommitted_entries=args.fold_after_uncommitted_entries,
            max_read_cache_bytes_per_shard=args.read_cache_bytes,
            **caps,
        )
    except ValueError as error:
        raise SystemExit(f"cairn-storage: {error}") from None


def _wal_spare_segments(args: argparse.Namespace) -> int:
    if args.wal_spare_segments < 0:
        raise SystemExit("cairn-storage: --wal-spare-segments must be >= 0")
    spare_segments: int = args.wal_spare_segments
    return spare_segments


def _wal_retention(args: argparse.Namespace) -> WalRetention:
    if args.wal_retention_bytes < 0 or args.wal_retention_ms < 0:
        raise SystemExit("cairn-storage: WAL retention limits must be >= 0")
    return WalRetention(args.wal_retention_bytes, args.wal_retention_ms)


def _namespaces(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[NamespaceConfig, ...]:
    """The configured namespaces; exits with status 2 (via parser.error) on bad input."""
    specs: list[NamespaceConfig] = args.namespace_specs
    single = (args.shards, args.namespace, args.key_order)
    if specs:
        if any(option is not None for option in single):
            parser.error(
                "--namespace-spec cannot be combined with --shards, --namespace or --key-order"
            )
        names = [spec.name for spec in specs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            parser.error(f"--namespace-spec names a namespace twice: {', '.join(repeated)}")
        return tuple(specs)
    try:
        return (
            NamespaceConfig(
                args.namespace if args.namespace is not None else DEFAULT_NAMESPACE,
                args.shards if args.shards is not None else 1,
                KeyOrder(args.key_order or KeyOrder.HIERARCHICAL.value),
            ),
        )
    except ValueError as error:
        parser.error(str(error))


def _start_metrics(
    args: argparse.Namespace, instance: str, server: StandaloneServer | NodeServer
) -> Telemetry:
    telemetry = Telemetry(
        "cairn-storage",
        instance,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        metrics_tls_dir=metrics_tls_dir(args),
        tls_dir=args.tls_dir,
    )
    StorageMetrics(
        telemetry,
        server.directory,
        server.client_service,
        asyncio.get_running_loop(),
        server.config.data_dir,
    )
    address = telemetry.start()
    if address is not None:
        print(f"cairn-storage metrics on {telemetry.scheme}://{address}/metrics", flush=True)
    return telemetry


async def _run_standalone(config: StandaloneConfig, args: argparse.Namespace) -> int:
    # Handlers first: a SIGTERM right after "listening" must still shut down cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    server = StandaloneServer(config)
    try:
        address = await server.start()
    except LayoutMismatch as error:
        print(f"cairn-storage: {error}", file=sys.stderr)
        return 2
    print(f"cairn-storage listening on {address}", flush=True)
    transport = "plaintext" if config.tls_dir is None else "TLS"
    print(f"cairn-storage transport: client port {transport}", flush=True)
    print(f"cairn-storage data in {config.data_dir.resolve()}", flush=True)
    telemetry = _start_metrics(args, address, server)
    freeze_startup_objects()
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    telemetry.shutdown()
    tracing.shutdown()
    return 0


async def _run_node(config: NodeConfig, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    server = NodeServer(config)
    me = await server.start()
    print(f"cairn-storage listening on {me.public_address}", flush=True)
    print(f"cairn-storage internal on {me.internal_address}", flush=True)
    public = "plaintext" if config.tls_dir is None or config.public_plaintext else "TLS"
    internal = "plaintext" if config.tls_dir is None else "mutual TLS"
    print(f"cairn-storage transport: client port {public}, internal port {internal}", flush=True)
    print(f"cairn-storage data in {config.data_dir.resolve()}", flush=True)
    telemetry = _start_metrics(args, me.internal_address, server)
    freeze_startup_objects()
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    telemetry.shutdown()
    tracing.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, standalone = _parser()
    args = parser.parse_args(argv)
    node = node_name()
    setup_logging("cairn-storage", args.log_level, args.log_format, node=node)
    # Before the servers exist: they take the tracing interceptor only if it is on.
    tracing.configure("cairn-storage", node)
    if args.command == "node":
        node_config = NodeConfig(
            data_dir=args.data_dir,
            bind_host=args.host,
            port=args.port,
            internal_port=args.internal_port,
            advertised_address=args.advertise,
            internal_advertised_address=args.internal_advertise,
            wal_segment_size_bytes=args.wal_segment_bytes,
            wal_zero_fill_bytes=args.wal_zero_fill_bytes,
            wal_spare_segments=_wal_spare_segments(args),
            wal_retention=_wal_retention(args),
            limits=_limits(args),
            tls_dir=args.tls_dir,
            public_plaintext=args.public_plaintext,
            auth=auth_config_from(args, "cairn-storage"),
        )
        if args.public_plaintext and args.tls_dir is None:
            parser.error("--public-plaintext goes with --tls-dir (--insecure is plaintext already)")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_run_node(node_config, args))
    namespaces = _namespaces(args, standalone)
    config = StandaloneConfig(
        data_dir=args.data_dir,
        bind_host=args.host,
        port=args.port,
        advertised_address=args.advertise,
        namespaces=namespaces,
        wal_segment_size_bytes=args.wal_segment_bytes,
        wal_zero_fill_bytes=args.wal_zero_fill_bytes,
        wal_spare_segments=_wal_spare_segments(args),
        wal_retention=_wal_retention(args),
        limits=_limits(args),
        tls_dir=args.tls_dir,
        auth=auth_config_from(args, "cairn-storage"),
    )
    # uvloop: cheaper per-message event-loop work under grpc.aio (measurements:
    # docs/performance.md, "`cairn perf`").
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run_standalone(config, args))


if __name__ == "__main__":
    sys.exit(main())
