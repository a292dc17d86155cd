"""`cairn-local`: run a whole Cairn cluster as plain processes.

    cairn-local --dir .cairn            controller + 3 storage pods with sidecars + gateway
    cairn-local --dir .cairn --pods 5 --shards 8
    cairn-local --dir .cairn --public-plaintext   clients' port in plaintext (Oxia clients)
    cairn-local --dir .cairn --insecure           no TLS anywhere (development only)

Stops cleanly on Ctrl-C; run it again on the same directory to resume with the
data (the ports chosen on the first run are kept in <dir>/ports.json).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from cairn.common.logs import add_log_arguments, setup_logging
from cairn.common.version import add_version_option
from cairn.controller import DISTRIBUTION
from cairn.controller.local.launcher import LOCAL_USER, LocalCluster


def _connecting(cluster: LocalCluster) -> list[str]:
    """How a client connects: which ports speak TLS, and with what files."""
    client = cluster.client_tls_dir
    if client is None:
        return ["  security:        none (--insecure): plaintext everywhere"]
    ca = client / "ca.crt"
    address = cluster.public_address(sorted(cluster.pods)[0])
    public = "plaintext (--public-plaintext)" if cluster.public_plaintext else "TLS"
    lines = [
        f"  security:        local CA {ca}; internal traffic mutual TLS; client ports {public}",
        f"  client TLS:      {client}  (ca.crt, and tls.crt/tls.key of user {LOCAL_USER})",
    ]
    if cluster.public_plaintext:
        lines.append(f"    e.g.  ./dev cairn --address {address} ...  (plaintext)")
    else:
        lines.append(f"    e.g.  ./dev cairn --address {address} --tls-dir {client} ...")
    lines.append(f"    e.g.  curl --cacert {ca} {cluster.controller_url}/v1/cluster")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cairn-local", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--dir", type=Path, default=Path(".cairn"), help="state, data and logs")
    parser.add_argument("--host", default="127.0.0.1")
    first = parser.add_argument_group("first start (the stored spec wins afterwards)")
    first.add_argument("--pods", type=int, default=3, help="storage pods")
    first.add_argument("--shards", type=int, default=3, help="shards of the default namespace")
    first.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument(
        "--controller-arg", action="append", default=[], help="extra cairn-controller argument"
    )
    parser.add_argument(
        "--pod-arg", action="append", default=[], help="extra cairn-storage node argument"
    )
    parser.add_argument(
        "--sidecar-arg", action="append", default=[], help="extra cairn-health argument"
    )
    parser.add_argument(
        "--gateway-arg", action="append", default=[], help="extra cairn-gateway argument"
    )
    parser.add_argument("--no-gateway", action="store_true", help="do not run the REST gateway")
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="pick free ports instead of the conventional ones (first start only; for "
        "several clusters on one machine, and tests)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="run every process without authentication (plaintext clients such as the "
        "oxia 0.2.1 package need no token then); the default makes tokens and rules "
        "in <dir>/auth",
    )
    security = parser.add_mutually_exclusive_group()
    security.add_argument(
        "--public-plaintext",
        action="store_true",
        help="serve the pods' client ports without TLS (released Oxia clients speak only "
        "plaintext); everything else stays TLS, internal traffic mutual TLS",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        help="no TLS anywhere, no local CA (development only)",
    )
    parser.add_argument("--log-level", default="INFO")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging(
        "cairn-local",
        args.log_level,
        args.log_format,
        text_format="%(asctime)s %(levelname)s %(message)s",
    )
    # Every process of the cluster logs in the launcher's format (an explicit
    # --*-arg --log-format, coming later, wins).
    chosen = ["--log-format", args.log_format] if args.log_format != "text" else []
    cluster = LocalCluster(
        args.dir,
        pods=args.pods,
        shards=args.shards,
        replication_factor=args.replication_factor,
        host=args.host,
        controller_args=[*chosen, *args.controller_arg],
        pod_args=[*chosen, *args.pod_arg],
        sidecar_args=[*chosen, *args.sidecar_arg],
        preferred_ports=not args.free_ports,
        gateway=not args.no_gateway,
        gateway_args=[*chosen, *args.gateway_arg],
        tls=not args.insecure,
        public_plaintext=args.public_plaintext,
        auth=not args.no_auth,
    )

    def on_signal(signum: int, _: FrameType | None) -> None:
        cluster.request_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.start()
        addresses = ", ".join(cluster.public_address(name) for name in sorted(cluster.pods))
        lines = [
            f"cairn-local: {len(cluster.pods)} storage pods running",
            f"  client address:  {cluster.public_address(sorted(cluster.pods)[0])}"
            f"  (any pod serves the shard map: {addresses})",
            f"  admin API:       {cluster.controller_url}  (docs: {cluster.controller_url}/docs)",
        ]
        if cluster.gateway is not None:
            url = cluster.gateway_url
            lines.append(f"  gateway:         {url}  (docs: {url}/docs)")
        metrics = cluster.metrics_addresses()
        if metrics:
            lines.append("  metrics:         (Prometheus, one endpoint per process)")
            lines += [
                f"    {name:<18} {cluster.scheme}://{address}/metrics"
                for name, address in metrics.items()
            ]
        lines += _connecting(cluster)
        if cluster.auth is not None:
            auth = cluster.auth
            lines += [
                f"  auth:            on; rules and token hashes in {auth.config}",
                f"    admin token:   {auth.admin_token}",
                "    connect with:  ./dev cairn --token-file <admin token> ...  or the header",
                "                   Authorization: Bearer <token> (gRPC metadata or HTTP)",
                "                   (with the client TLS options above: both are needed)",
            ]
        else:
            lines.append("  auth:            OFF (--no-auth): any client may do anything")
        lines += [
            f"  cluster state:   {cluster.state_dir / 'cluster.json'}",
            f"  logs:            {cluster.logs_dir}",
            "Ctrl-C stops it; running it again resumes with the data.",
        ]
        print("\n".join(lines), flush=True)
        cluster.run_until_stopped()
    finally:
        cluster.stop()
        print("cairn-local: stopped", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
