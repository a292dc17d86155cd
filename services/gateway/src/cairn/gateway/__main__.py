"""`cairn-gateway`: Cairn's REST gateway.

    cairn-gateway --address 127.0.0.1:6648 --controller-url http://127.0.0.1:6650

Serves HTTP on --host/--port (8080; 0 picks a free port) and prints
`cairn-gateway: listening on http://HOST:PORT` once it does. With --workers N,
N processes serve the port, each on a socket of its own (see `_supervise`). With
--auth-config (the file the pods read) each caller's bearer token is checked
here and the caller is named to the pods, which apply the rules; --no-auth
passes every request on as the gateway's own. The older single token
(--token-file, or CAIRN_GATEWAY_TOKEN; with --no-auth only) makes every request
but /livez and /readyz need `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn

from cairn.client.options import ClientOptions
from cairn.common import tracing
from cairn.common.auth.arguments import add_auth_arguments, auth_config_from
from cairn.common.hashing import KeyHash
from cairn.common.logs import add_log_arguments, node_name, setup_logging
from cairn.common.startup_objects import freeze_startup_objects
from cairn.common.telemetry import (
    METRICS_PORT_GATEWAY,
    Telemetry,
    add_metrics_arguments,
    metrics_tls_dir,
)
from cairn.common.tls import TlsFiles, add_transport_arguments, server_ssl_context
from cairn.common.tls_asgi import uvicorn_tls_options
from cairn.common.version import add_version_option
from cairn.gateway import DISTRIBUTION, metrics
from cairn.gateway.app import Lifecycle, create_app
from cairn.gateway.fastpath import Front
from cairn.gateway.http_server import bounded_protocol
from cairn.gateway.settings import GatewaySettings

LISTENING = "cairn-gateway: listening on"
TOKEN_ENV = "CAIRN_GATEWAY_TOKEN"
DEFAULTS = GatewaySettings(storage_addresses=("-",))
# The identity recorded on ephemeral records written through a gateway: the same
# from every gateway process, as a REST session is used through any of them.
CLIENT_IDENTITY = "cairn-gateway"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn-gateway", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument(
        "--address",
        required=True,
        help="storage pods serving the shard map: host:port[,host:port...]",
    )
    parser.add_argument(
        "--controller-url", default=None, help="the controller's admin API (for /v1/admin)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port; 0 picks a free one")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (each with its own event loop and storage "
        "connections; sessions, cursors and event ids work through any of them)",
    )
    # A worker's inherited listening socket and readiness pipe (set by the supervisor).
    parser.add_argument("--worker-socket-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-life-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--namespace",
        default="default",
        help="the namespace to connect through first (any existing one)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"a file holding the one bearer token to require (else ${TOKEN_ENV}, else none; "
        "with --no-auth only: --auth-config checks each caller's own token)",
    )
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=DEFAULTS.client_options.request_timeout_s,
        help="storage calls (with their retries) fail with 503 after this long",
    )
    parser.add_argument(
        "--connect-timeout-s",
        type=float,
        default=DEFAULTS.client_options.connect_timeout_s,
        help="how long to wait for a namespace's shard map",
    )
    parser.add_argument(
        "--feed-keepalive-s",
        type=float,
        default=DEFAULTS.feed_keepalive_interval_s,
        help="a change feed without events sends a comment line this often",
    )
    parser.add_argument(
        "--max-open-feeds",
        type=int,
        default=DEFAULTS.max_open_feeds,
        help="change feed streams served at once (more get 503)",
    )
    parser.add_argument(
        "--key-hash",
        dest="key_hashes",
        action="append",
        default=[],
        metavar="NAMESPACE=xxh64",
        help="route a namespace's keys as the oxia 0.2.1 Python client does (xxh64) to reach "
        "the data it wrote; default xxh3, as the shard map says (repeatable)",
    )
    add_transport_arguments(
        parser, tls_dir_help=": HTTPS here, TLS to the storage pods and the controller"
    )
    parser.add_argument(
        "--storage-plaintext",
        action="store_true",
        help="dial the storage pods' client ports in plaintext (pods run --public-plaintext)",
    )
    add_auth_arguments(parser)
    parser.add_argument(
        "--pod-token-file",
        type=Path,
        default=None,
        help="the gateway's own token to the storage pods and the controller (role gateway "
        "in the auth configuration): it names each caller to them",
    )
    parser.add_argument(
        "--session-key-file",
        type=Path,
        default=None,
        help="the secret that seals session tokens (the same for every gateway of a cluster)",
    )
    add_metrics_arguments(parser, METRICS_PORT_GATEWAY)
    parser.add_argument(
        "--log-level", default="WARNING", help="(WARNING; the access log shows at INFO anyway)"
    )
    add_log_arguments(parser)
    return parser


def _key_hashes(values: list[str]) -> dict[str, KeyHash]:
    hashes = {}
    for value in values:
        namespace, sep, name = value.partition("=")
        try:
            if not sep or not namespace:
                raise ValueError
            hashes[namespace] = KeyHash(name)
        except ValueError:
            choices = ", ".join(h.value for h in KeyHash)
            raise SystemExit(
                f"cairn-gateway: --key-hash takes NAMESPACE=HASH with HASH one of {choices}, "
                f"not {value!r}"
            ) from None
    return hashes


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise SystemExit(f"cairn-gateway: {token_file} holds no token")
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None


def _secret(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise SystemExit(f"cairn-gateway: {what}: {error}") from None
    if not text:
        raise SystemExit(f"cairn-gateway: {path} holds no {what}")
    return text


def settings_from(args: argparse.Namespace) -> GatewaySettings:
    addresses = tuple(a.strip() for a in args.address.split(",") if a.strip())
    auth = auth_config_from(args, "cairn-gateway")
    session_key = _secret(args.session_key_file, "session key")
    try:
        return GatewaySettings(
            storage_addresses=addresses,
            controller_url=args.controller_url,
            token=_token(args.token_file),
            auth=auth,
            pod_token=_secret(args.pod_token_file, "token"),
            session_key=session_key.encode("utf-8") if session_key is not None else None,
            root_namespace=args.namespace,
            client_options=ClientOptions(
                request_timeout_s=args.request_timeout_s,
                connect_timeout_s=args.connect_timeout_s,
                client_identity=CLIENT_IDENTITY,
                tls=(
                    TlsFiles.in_directory(args.tls_dir)
                    if args.tls_dir is not None and not args.storage_plaintext
                    else None
                ),
                bearer_token=_secret(args.pod_token_file, "token"),
            ),
            key_hashes=_key_hashes(args.key_hashes),
            tls_dir=args.tls_dir,
            feed_keepalive_interval_s=args.feed_keepalive_s,
            max_open_feeds=args.max_open_feeds,
        )
    except ValueError as error:
        raise SystemExit(f"cairn-gateway: {error}") from None


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when a signal asks it to stop (before
    uvicorn waits for open connections to finish)."""

    def __init__(self, on_exit: Callable[[], object], config: uvicorn.Config) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def _url(host: str, port: int, scheme: str = "http") -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _listen(host: str, port: int, *, shared: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        # Only sockets of this user can join the port (Linux checks the owner).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _listen_per_worker(host: str, port: int, workers: int) -> list[socket.socket]:
    """One listening socket per worker, all on one port (SO_REUSEPORT): the kernel
    spreads new connections evenly over them. With one socket shared, the worker
    woken first accepted most of a burst of connections, such as a load
    generator's, and served it while the others idled."""
    first = _listen(host, port, shared=True)
    bound_port = first.getsockname()[1]
    return [first, *(_listen(host, bound_port, shared=True) for _ in range(workers - 1))]


async def _serve(settings: GatewaySettings, sock: socket.socket, args: argparse.Namespace) -> None:
    """Serve HTTP on `sock` until a signal says stop. A worker (of --workers)
    reports through its readiness pipe instead of printing the listening line."""
    host = args.host
    bound_port = sock.getsockname()[1]
    # Client certificates are verified when presented (CERT_OPTIONAL) and reach the
    # app as the ASGI TLS extension (identity.asgi_peer_principal); none is required.
    ssl_context = server_ssl_context(settings.tls_dir, require_client_cert=False)
    scheme = "https" if ssl_context is not None else "http"
    app = create_app(settings)
    tls_options = uvicorn_tls_options(ssl_context)
    protocol = bounded_protocol(settings.max_request_head_bytes, tls_options.pop("http", None))
    lifecycle: Lifecycle = app.state.lifecycle
    loop = asyncio.get_running_loop()
    server = _Server(
        lambda: loop.call_soon_threadsafe(lifecycle.begin_drain),
        uvicorn.Config(
            Front(app, settings, app.state.pool),
            # Logging is set up by setup_logging: uvicorn's loggers write through the
            # process's one handler (and format), and its access log shows at INFO.
            log_config=None,
            log_level=None,
            timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_s),
            http=protocol,
            # The gateway's own answer for every error: no server banner.
            server_header=False,
            **tls_options,
        ),
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    http = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if http.done():
            http.result()
            return
        await asyncio.sleep(0.01)
    if args.worker_ready_fd is None:
        print(f"{LISTENING} {_url(host, bound_port, scheme)}", flush=True)
    reload_tls = asyncio.create_task(ssl_context.keep_fresh()) if ssl_context else None
    telemetry = Telemetry(
        "cairn-gateway",
        _url(host, bound_port),
        metrics_host=args.metrics_host,
        # Each worker serves its own metrics: the port's successors (or free ones).
        metrics_port=(
            args.metrics_port + args.worker_index if args.metrics_port else args.metrics_port
        ),
        metrics_tls_dir=metrics_tls_dir(args),
        tls_dir=args.tls_dir,
    )
    metrics.register(telemetry)
    metrics_address = telemetry.start()
    if metrics_address is not None:
        print(
            f"cairn-gateway: metrics on {telemetry.scheme}://{metrics_address}/metrics",
            flush=True,
        )
    # Before it reports ready: the first collection scans everything startup made.
    freeze_startup_objects()
    if args.worker_ready_fd is not None:
        try:
            os.write(args.worker_ready_fd, b"1")
        except BrokenPipeError:
            stop.set()  # the supervisor is gone already
        os.close(args.worker_ready_fd)
    if args.worker_life_fd is not None:
        life_fd = args.worker_life_fd

        def orphaned() -> None:
            # End of file: the supervisor is gone (killed: it forwards no signal).
            loop.remove_reader(life_fd)
            stop.set()

        loop.add_reader(life_fd, orphaned)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({http, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lifecycle.begin_drain()
        server.should_exit = True
        await http
        stopped.cancel()
        if reload_tls is not None:
            reload_tls.cancel()
        telemetry.shutdown()
        tracing.shutdown()


def _supervise(args: argparse.Namespace, argv: list[str]) -> None:
    """--workers N: bind the port here, start N worker processes (this program
    again, each handed a listening socket of its own on that port) and print the
    listening line once every one serves. The kernel spreads connections over the
    workers' sockets.

    The workers share nothing but the socket: each has its own event loop,
    storage connections and controller client. That is safe because the gateway
    keeps no state between requests (session tokens, cursors and event ids carry
    it, sealed with the key every gateway shares); what is per process is a bound
    (--max-open-feeds, namespaces kept) and the metrics (each worker serves its
    own, on --metrics-port plus its index). A signal stops every worker; a worker
    that exits stops the others, and this process exits with its status, so that
    whatever runs the gateway restarts it whole."""
    sockets = _listen_per_worker(args.host, args.port, args.workers)
    scheme = "https" if args.tls_dir is not None else "http"
    workers: list[subprocess.Popen[bytes]] = []
    ready: list[int] = []
    # Held open here and never written: the workers read its end of file once
    # this process is gone, however it went.
    life_read, life_write = os.pipe()
    for index, sock in enumerate(sockets):
        read_end, write_end = os.pipe()
        command = [
            sys.executable, "-m", "cairn.gateway", *argv,
            "--workers", "1",  # the last --workers given wins
            "--worker-socket-fd", str(sock.fileno()),
            "--worker-ready-fd", str(write_end),
            "--worker-life-fd", str(life_read),
            "--worker-index", str(index),
        ]  # fmt: skip
        inherited = (sock.fileno(), write_end, life_read)
        workers.append(subprocess.Popen(command, pass_fds=inherited))
        os.close(write_end)
        ready.append(read_end)
    os.close(life_read)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    status = 0
    try:
        for worker, read_end in zip(workers, ready, strict=True):
            # One byte once it serves; none (end of file) if it exited first.
            if not os.read(read_end, 1):
                status = worker.wait() or 1
                return
            os.close(read_end)
        port = sockets[0].getsockname()[1]
        print(f"{LISTENING} {_url(args.host, port, scheme)}", flush=True)
        while not stop.wait(0.5):
            exited = next((w for w in workers if w.poll() is not None), None)
            if exited is not None:
                status = exited.returncode
                return
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait()
        os.close(life_write)
        for sock in sockets:
            sock.close()
        if status:
            raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(arguments)
    if args.workers < 1:
        raise SystemExit("cairn-gateway: --workers must be at least 1")
    node = node_name()
    setup_logging("cairn-gateway", args.log_level, args.log_format, node=node, access_log=True)
    if args.workers > 1:
        settings_from(args)  # refuses bad settings before any worker starts
        _supervise(args, arguments)
        return
    # With tracing on, FastAPI's own telemetry (it follows the global tracer provider
    # this sets) makes each request's SERVER span from its traceparent header; the
    # client library's spans are its children.
    tracing.configure("cairn-gateway", node)
    settings = settings_from(args)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    if args.worker_socket_fd is not None:
        sock = socket.socket(fileno=args.worker_socket_fd)
    else:
        sock = _listen(args.host, args.port)
    asyncio.run(_serve(settings, sock, args))


if __name__ == "__main__":
    main()
