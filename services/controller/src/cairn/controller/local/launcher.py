"""A whole Cairn cluster as plain processes on this machine: the controller
(file store), storage pods each with its health sidecar, and the REST gateway.
The embedded default: no Kubernetes, no containers.

Everything lives under one directory:

    <dir>/ports.json            ports chosen on the first start (metrics ports too), reused after
    <dir>/state/cluster.json    the cluster state (spec + status)
    <dir>/pods/storage-N/       each storage pod's data
    <dir>/logs/*.log            one log per process
    <dir>/processes.json        the running processes' pids (for tooling/tests)
    <dir>/tls/ca/               the local certificate authority (ca.crt, ca.key)
    <dir>/tls/<process>/        each process's certificate (tls.crt, tls.key, ca.crt)
    <dir>/tls/client/           a user certificate for clients (CN local-admin)

Secure by default: the launcher makes a local CA on the first start (kept and
reused afterwards) and a certificate for every process, naming it by a SPIFFE
id (`spiffe://cairn/storage/storage-0`, `.../sidecar/storage-0`,
`.../controller/controller`, `.../gateway/gateway`). Internal traffic is mutual
TLS, the pods' client ports, the controller, the gateway, the sidecars and the
metrics endpoints serve TLS. `public_plaintext` serves the pods' client ports in
plaintext (for clients that speak nothing else); `tls=False` is plaintext
everywhere (tests and benchmarks that choose it).

The launcher plays the part Kubernetes plays in production: it keeps
`spec.storage.replicas` pods running (a StatefulSet), restarts a process that
exits with a growing delay (CrashLoopBackOff), and releases a pod beyond the
pod count only once the controller has moved every shard off it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cairn.common.certs import LOCAL_HOSTS, CertificateAuthority, has_certificate
from cairn.common.files import write_atomically
from cairn.common.identity import Principal, Role
from cairn.common.ports import can_bind, unused_port
from cairn.common.telemetry import (
    METRICS_PORT_CONTROLLER,
    METRICS_PORT_GATEWAY,
    METRICS_PORT_HEALTH,
    METRICS_PORT_STORAGE,
)
from cairn.controller.local.auth import LocalAuth, ensure_local_auth
from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    node_ordinal,
)
from cairn.controller.state.file_store import FileStateStore
from cairn.controller.state.store import CorruptState, StateNotFound

log = logging.getLogger(__name__)
POD_PREFIX = "storage"
# The common name of the user certificate made for clients (<dir>/tls/client).
LOCAL_USER = "local-admin"
RESTART_DELAY_MIN_S = 0.5
RESTART_DELAY_MAX_S = 30.0
# A process up this long has its restart delay reset.
STABLE_AFTER_S = 30.0
STOP_GRACE_S = 10.0
START_TIMEOUT_S = 60.0
# Starts of a process whose ports were picked just before: free_port cannot keep a
# port it found free, so another process may bind it first (seen in CI).
FRESH_PORT_ATTEMPTS = 3
SUPERVISE_INTERVAL_S = 0.25


# The conventional ports (storage 6648/6649, controller 6650, sidecar 8081),
# shifted by 100 per pod, are used when free: the first pod then serves clients
# on 6648 like a lone Oxia server would. The gateway's is 8080.
CONTROLLER_PORT = 6650
GATEWAY_PORT = 8080
POD_PORTS = (6648, 6649, 8081)
POD_PORT_STRIDE = 100
# Picks of a port another of the cluster's processes has, before giving up.
PORT_PICK_ATTEMPTS = 50
# Each process's /metrics: the components' defaults (storage 9090, controller 9091,
# gateway 9092, sidecar 9093), a pod's and its sidecar's shifted by 100 per pod.
POD_METRICS_PORTS = (METRICS_PORT_STORAGE, METRICS_PORT_HEALTH)


def free_port(host: str, preferred: int = 0) -> int:
    """`preferred` if it can be bound now, else a port no outgoing connection
    will take first (`unused_port`)."""
    if preferred and can_bind(host, preferred):
        return preferred
    return unused_port(host)


def _conventional_pod_ports(name: str) -> tuple[int, int, int]:
    """A pod's usual (public, internal, health) ports: POD_PORTS shifted by its ordinal."""
    shift = POD_PORT_STRIDE * node_ordinal(name)
    public, internal, health = (port + shift for port in POD_PORTS)
    return public, internal, health


@dataclass
class PodPorts:
    public: int
    internal: int
    health: int


@dataclass
class Ports:
    controller: int
    pods: dict[str, PodPorts] = field(default_factory=dict)
    # None until the gateway first starts (ports.json of earlier runs has none).
    gateway: int | None = None
    # Each process's metrics port, by process name (controller, gateway, storage-N,
    # storage-N-health); picked when the process first starts.
    metrics: dict[str, int] = field(default_factory=dict)

    def assigned(self) -> set[int]:
        """Every port of the cluster's processes."""
        ports = {self.controller, *self.metrics.values()}
        if self.gateway is not None:
            ports.add(self.gateway)
        for pod in self.pods.values():
            ports.update((pod.public, pod.internal, pod.health))
        ports.discard(0)
        return ports

    @classmethod
    def load(cls, path: Path) -> Ports | None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        gateway = document.get("gateway")
        return cls(
            int(document["controller"]),
            {name: PodPorts(**ports) for name, ports in document["pods"].items()},
            int(gateway) if gateway is not None else None,
            {name: int(port) for name, port in document.get("metrics", {}).items()},
        )

    def save(self, path: Path) -> None:
        document: dict[str, object] = {
            "controller": self.controller,
            "pods": {name: vars(ports) for name, ports in sorted(self.pods.items())},
        }
        if self.gateway is not None:
            document["gateway"] = self.gateway
        if self.metrics:
            document["metrics"] = dict(sorted(self.metrics.items()))
        write_atomically(path, json.dumps(document, indent=2) + "\n")


@dataclass
class Child:
    """One supervised process."""

    name: str
    command: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_delay_s: float = RESTART_DELAY_MIN_S
    restart_at: float = 0.0
    restarts: int = 0
    _log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # POD_NAME: the process's name in its log lines and traces (logs.node_name).
            env={**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": self.name},
            start_new_session=True,  # Ctrl-C reaches the launcher, which stops us in order
        )
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exited(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def schedule_restart(self) -> None:
        if time.monotonic() - self.started_at >= STABLE_AFTER_S:
            self.restart_delay_s = RESTART_DELAY_MIN_S
        self.restart_at = time.monotonic() + self.restart_delay_s
        self.restart_delay_s = min(RESTART_DELAY_MAX_S, self.restart_delay_s * 2)
        self.process = None
        self._close_log()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        self.ask_to_stop()
        self.finish_stopping(grace_s)

    def ask_to_stop(self) -> None:
        """SIGTERM, without waiting (`finish_stopping` waits)."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            process.terminate()

    def finish_stopping(self, grace_s: float) -> None:
        """Wait up to `grace_s` for the process asked to stop, then kill it."""
        process = self.process
        if process is not None:
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _stop_together(children: Sequence[Child], grace_s: float = STOP_GRACE_S) -> None:
    """Ask every child to stop, then give them one shared grace period."""
    for child in children:
        child.ask_to_stop()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.finish_stopping(max(0.0, deadline - time.monotonic()))


class ExitedAtStart(RuntimeError):
    """A child exited before it printed that it was ready."""


def _wait_for_line(log_path: Path, prefix: str, child: Child, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log_path.exists():
            for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
        if child.exited() is not None:
            raise ExitedAtStart(f"{child.name} exited at start; see {log_path}")
        time.sleep(0.05)
    raise TimeoutError(f"{child.name} did not start within {timeout_s:.0f} s; see {log_path}")


class LocalCluster:
    def __init__(
        self,
        directory: Path,
        pods: int = 3,
        shards: int = 3,
        replication_factor: int = 3,
        host: str = "127.0.0.1",
        controller_args: Sequence[str] = (),
        pod_args: Sequence[str] = (),
        sidecar_args: Sequence[str] = (),
        restart: bool = True,
        preferred_ports: bool = True,
        gateway: bool = True,
        gateway_args: Sequence[str] = (),
        tls: bool = True,
        public_plaintext: bool = False,
        auth: bool = True,
    ) -> None:
        self.tls = tls
        self.public_plaintext = public_plaintext
        self.preferred_ports = preferred_ports
        # Every port this launcher handed out: a port found free is not held
        # until its process binds it, so the next pick could find it free again.
        self._picked: set[int] = set()
        self.directory = directory.resolve()
        self.initial_pods = pods
        self.shards = shards
        self.replication_factor = replication_factor
        self.host = host
        self.controller_args = list(controller_args)
        self.pod_args = list(pod_args)
        self.sidecar_args = list(sidecar_args)
        self.restart = restart
        self.with_gateway = gateway
        self.gateway_args = list(gateway_args)
        # The embedded default is secure: tokens and rules in <dir>/auth (auth.py).
        self.auth: LocalAuth | None = ensure_local_auth(self.directory / "auth") if auth else None
        self.ports = Ports(0)
        self.controller: Child | None = None
        self.gateway: Child | None = None
        self.pods: dict[str, tuple[Child, Child]] = {}
        self._stopping = False

    # -- layout ------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self.directory / "state"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def tls_dir(self) -> Path:
        return self.directory / "tls"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def controller_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.ports.controller}"

    @property
    def gateway_url(self) -> str | None:
        if self.ports.gateway is None:
            return None
        return f"{self.scheme}://{self.host}:{self.ports.gateway}"

    @property
    def client_tls_dir(self) -> Path | None:
        """What a client connects with (the CA, and a user certificate), if TLS."""
        return self.tls_dir / "client" if self.tls else None

    def _certificates(self, process: str, principal: Principal | None) -> list[str]:
        """`--tls-dir <dir>` with the process's certificate (issued on first use),
        or `--insecure` when the cluster runs without TLS."""
        if not self.tls:
            return ["--insecure"]
        directory = self.tls_dir / process
        if not has_certificate(directory):
            authority = CertificateAuthority.create_or_load(self.tls_dir / "ca")
            hosts = (*LOCAL_HOSTS, self.host)
            if principal is None:
                authority.issue_user(LOCAL_USER, directory)
            else:
                authority.issue_component(principal, directory, hosts)
        return ["--tls-dir", str(directory)]

    def public_address(self, name: str) -> str:
        return f"{self.host}:{self.ports.pods[name].public}"

    def _pod_ports(self, name: str) -> PodPorts:
        ports = self.ports.pods.get(name)
        if ports is None:
            public, internal, health = _conventional_pod_ports(name)
            ports = PodPorts(
                self._pick_port(public), self._pick_port(internal), self._pick_port(health)
            )
            self.ports.pods[name] = ports
            self.ports.save(self.directory / "ports.json")
        return ports

    def metrics_port(self, process: str, conventional: int) -> int:
        """The process's metrics port: kept in ports.json once picked."""
        port = self.ports.metrics.get(process)
        if port is None:
            port = self.ports.metrics[process] = self._pick_port(conventional)
            self.ports.save(self.directory / "ports.json")
        return port

    def metrics_addresses(self) -> dict[str, str]:
        """`host:port` of each running process's /metrics, by process name."""
        running = [name for name in ("controller", "gateway") if getattr(self, name)]
        for pod in sorted(self.pods):
            running += [pod, f"{pod}-health"]
        return {
            name: f"{self.host}:{self.ports.metrics[name]}"
            for name in running
            if name in self.ports.metrics
        }

    def _metrics_args(self, process: str, conventional: int) -> list[str]:
        return [
            "--metrics-host",
            self.host,
            "--metrics-port",
            str(self.metrics_port(process, conventional)),
        ]

    def _pod_metrics_port(self, name: str, index: int) -> int:
        ordinal = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 0
        return POD_METRICS_PORTS[index] + ordinal * POD_PORT_STRIDE

    def read_state(self) -> tuple[ClusterSpec, ClusterStatus] | None:
        try:
            state = FileStateStore(self.state_dir).read_now()
        except (StateNotFound, CorruptState):
            return None
        return state.spec, state.status

    # -- starting ----------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; if any part fails to start, stop what did and raise."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        if self.tls:
            # A user certificate for clients (the CLI's --tls-dir), made once.
            self._certificates("client", None)
        ports = Ports.load(self.directory / "ports.json")
        fresh = ports is None
        self.ports = Ports(0) if ports is None else ports
        if not fresh:
            self._reclaim_conventional_ports()

        def new_controller_port() -> None:
            self.ports.controller = self._pick_port(CONTROLLER_PORT)
            self.ports.save(self.directory / "ports.json")

        if fresh:
            new_controller_port()
        self.controller = self._start_child(
            self._controller_child,
            "cairn-controller listening on",
            new_controller_port if fresh else None,
        )
        state = self.read_state()
        count = state[0].storage_pods if state is not None else self.initial_pods
        for ordinal in range(count):
            self._start_pod(f"{POD_PREFIX}-{ordinal}")
        if self.with_gateway:
            self._start_gateway()
        self._write_processes()

    def _auth_args(self) -> list[str]:
        if self.auth is None:
            return ["--no-auth"]
        return ["--auth-config", str(self.auth.config)]

    def _pick_port(self, conventional: int) -> int:
        port = self._new_port(conventional if self.preferred_ports else 0)
        if self.preferred_ports and port != conventional:
            log.warning(
                "port %d is in use by another process: using %d instead "
                "(kept in ports.json until %d is free again)",
                conventional,
                port,
                conventional,
            )
        return port

    def _new_port(self, preferred: int) -> int:
        """A port free now that no process of this cluster has (from ports.json)
        or was handed (picked, perhaps not bound yet)."""
        taken = self._picked | self.ports.assigned()
        for _ in range(PORT_PICK_ATTEMPTS):
            port = free_port(self.host, preferred if preferred not in taken else 0)
            if port not in taken:
                self._picked.add(port)
                return port
        raise RuntimeError(f"no free port found in {PORT_PICK_ATTEMPTS} attempts")

    def _reclaim_conventional_ports(self) -> None:
        """Ports picked on an earlier run because the conventional one was busy
        give way to it once it is free, so the usual addresses work again."""
        if not self.preferred_ports:
            return

        def reclaim(current: int, conventional: int) -> int:
            if current == conventional or free_port(self.host, conventional) != conventional:
                return current
            log.info("port %d is free again: using it instead of %d", conventional, current)
            return conventional

        ports = self.ports
        ports.controller = reclaim(ports.controller, CONTROLLER_PORT)
        if ports.gateway is not None:
            ports.gateway = reclaim(ports.gateway, GATEWAY_PORT)
        for name, pod in ports.pods.items():
            public, internal, health = _conventional_pod_ports(name)
            pod.public = reclaim(pod.public, public)
            pod.internal = reclaim(pod.internal, internal)
            pod.health = reclaim(pod.health, health)
        for process, port in ports.metrics.items():
            ports.metrics[process] = reclaim(port, self._conventional_metrics_port(process))
        ports.save(self.directory / "ports.json")

    def _conventional_metrics_port(self, process: str) -> int:
        if process == "controller":
            return METRICS_PORT_CONTROLLER
        if process == "gateway":
            return METRICS_PORT_GATEWAY
        pod, health, _ = process.partition("-health")
        return self._pod_metrics_port(pod, 1 if health else 0)

    def _start_child(
        self,
        make_child: Callable[[], Child],
        ready_prefix: str,
        pick_new_ports: Callable[[], None] | None,
    ) -> Child:
        """Start a child (its log started afresh) and wait for its ready line.
        `pick_new_ports`: the child's ports were picked just now, so a start that
        fails may only mean another process bound one of them first: pick new ones
        and start again, a bounded number of times."""
        attempts = FRESH_PORT_ATTEMPTS if pick_new_ports is not None else 1
        for attempt in range(1, attempts + 1):
            child = make_child()
            self._truncate_log(child)
            child.start()
            try:
                _wait_for_line(child.log_path, ready_prefix, child, START_TIMEOUT_S)
                return child
            except ExitedAtStart:
                child.stop()
                if pick_new_ports is None or attempt == attempts:
                    raise
                log.warning("%s exited at start; starting it again on new ports", child.name)
                pick_new_ports()
        raise AssertionError("unreachable")

    def _controller_child(self) -> Child:
        return Child(
            "controller",
            [
                sys.executable,
                "-m",
                "cairn.controller",
                "--host",
                self.host,
                "--port",
                str(self.ports.controller),
                "--state-dir",
                str(self.state_dir),
                "--shards",
                str(self.shards),
                "--replication-factor",
                str(self.replication_factor),
                "--storage-pods",
                str(self.initial_pods),
                *self._metrics_args("controller", METRICS_PORT_CONTROLLER),
                *self._certificates("controller", Principal(Role.CONTROLLER, "controller")),
                *self._auth_args(),
                *self.controller_args,
            ],
            self.logs_dir / "controller.log",
        )

    def _truncate_log(self, child: Child) -> None:
        # Each run starts its logs afresh, keeping the previous run's beside them.
        if child.log_path.exists():
            child.log_path.replace(child.log_path.with_suffix(".previous.log"))

    def _start_pod(self, name: str) -> None:
        fresh = name not in self.ports.pods
        data_dir = self.directory / "pods" / name
        data_dir.mkdir(parents=True, exist_ok=True)

        def pod_child() -> Child:
            ports = self._pod_ports(name)
            return Child(
                name,
                [
                    sys.executable,
                    "-m",
                    "cairn.storage",
                    "node",
                    "--host",
                    self.host,
                    "--port",
                    str(ports.public),
                    "--internal-port",
                    str(ports.internal),
                    "--data-dir",
                    str(data_dir),
                    *self._metrics_args(name, self._pod_metrics_port(name, 0)),
                    *self._certificates(name, Principal(Role.STORAGE, name)),
                    *(["--public-plaintext"] if self.tls and self.public_plaintext else []),
                    *self._auth_args(),
                    *self.pod_args,
                ],
                self.logs_dir / f"{name}.log",
            )

        def new_pod_ports() -> None:
            # _pod_ports and metrics_port pick (and save) new ones.
            del self.ports.pods[name]
            self.ports.metrics.pop(name, None)

        pod = self._start_child(
            pod_child, "cairn-storage listening on", new_pod_ports if fresh else None
        )
        ports = self.ports.pods[name]
        sidecar = Child(
            f"{name}-health",
            [
                sys.executable,
                "-m",
                "cairn.health",
                "--node-name",
                name,
                "--storage-internal",
                f"{self.host}:{ports.internal}",
                "--controller",
                self.controller_url,
                "--host",
                self.host,
                "--port",
                str(ports.health),
                *self._metrics_args(f"{name}-health", self._pod_metrics_port(name, 1)),
                *self._certificates(f"{name}-health", Principal(Role.SIDECAR, name)),
                *self.sidecar_args,
            ],
            self.logs_dir / f"{name}-health.log",
        )
        self._truncate_log(sidecar)
        sidecar.start()
        self.pods[name] = (pod, sidecar)
        log.info("started %s (client %s)", name, self.public_address(name))

    def _start_gateway(self) -> None:
        """The REST gateway, after the pods: it reads the shard map from any of
        them (pods added later need not be listed) and asks the controller for
        the admin views."""
        fresh = self.ports.gateway is None

        def new_gateway_port() -> None:
            self.ports.gateway = self._pick_port(GATEWAY_PORT)
            self.ports.save(self.directory / "ports.json")

        if fresh:
            new_gateway_port()
        addresses = ",".join(self.public_address(name) for name in sorted(self.pods))

        def gateway_child() -> Child:
            return Child(
                "gateway",
                [
                    sys.executable,
                    "-m",
                    "cairn.gateway",
                    "--address",
                    addresses,
                    "--controller-url",
                    self.controller_url,
                    "--host",
                    self.host,
                    "--port",
                    str(self.ports.gateway),
                    *self._metrics_args("gateway", METRICS_PORT_GATEWAY),
                    *self._certificates("gateway", Principal(Role.GATEWAY, "gateway")),
                    *(["--storage-plaintext"] if self.tls and self.public_plaintext else []),
                    *self._gateway_auth_args(),
                    *self.gateway_args,
                ],
                self.logs_dir / "gateway.log",
            )

        self.gateway = self._start_child(
            gateway_child, "cairn-gateway: listening on", new_gateway_port if fresh else None
        )
        log.info("started the gateway (%s)", self.gateway_url)

    def _gateway_auth_args(self) -> list[str]:
        if self.auth is None:
            return ["--no-auth"]
        return [
            "--auth-config",
            str(self.auth.config),
            "--pod-token-file",
            str(self.auth.gateway_token),
            "--session-key-file",
            str(self.auth.session_key),
        ]

    def _write_processes(self) -> None:
        document = {
            "controller": self.controller.pid if self.controller else None,
            "gateway": self.gateway.pid if self.gateway else None,
            "pods": {
                name: {"storage": pod.pid, "health": sidecar.pid}
                for name, (pod, sidecar) in sorted(self.pods.items())
            },
        }
        write_atomically(self.directory / "processes.json", json.dumps(document, indent=2) + "\n")

    # -- supervising -------------------------------------------------------------------

    def supervise_once(self) -> None:
        """Restart what exited, start pods the spec added, release pods the spec
        removed once they hold no shards."""
        changed = False
        children = [self.controller] if self.controller else []
        children += [self.gateway] if self.gateway else []
        children += [child for pair in self.pods.values() for child in pair]
        now = time.monotonic()
        for child in children:
            code = child.exited()
            if child.process is not None and code is not None:
                log.warning("%s exited with %s; restarting", child.name, code)
                child.schedule_restart()
            if child.process is None and self.restart and now >= child.restart_at:
                child.start()
                child.restarts += 1
                changed = True
        state = self.read_state()
        if state is not None:
            spec, status = state
            for ordinal in range(spec.storage_pods):
                name = f"{POD_PREFIX}-{ordinal}"
                if name not in self.pods:
                    self._start_pod(name)
                    changed = True
            for name in list(self.pods):
                ordinal = int(name.rsplit("-", 1)[1])
                holds = any(name in record.voters for record in status.shards)
                if ordinal >= spec.storage_pods and not holds:
                    log.info("releasing %s: beyond the pod count and holding no shards", name)
                    pod, sidecar = self.pods.pop(name)
                    sidecar.stop()
                    pod.stop()
                    changed = True
        if changed:
            self._write_processes()

    def run_until_stopped(self) -> None:
        while not self._stopping:
            self.supervise_once()
            time.sleep(SUPERVISE_INTERVAL_S)

    def request_stop(self) -> None:
        self._stopping = True

    def stop(self) -> None:
        """The gateway first (a client of everything else), then the controller
        (it would take stopping pods for failures and elect), then the
        sidecars, then the pods."""
        self._stopping = True
        if self.gateway is not None:
            self.gateway.stop()
        if self.controller is not None:
            self.controller.stop()
        # Within a tier the processes shut down side by side: a pod's shutdown
        # (closing its streams, syncing its log) does not wait for another's.
        _stop_together([sidecar for _, sidecar in self.pods.values()])
        _stop_together([pod for pod, _ in self.pods.values()])
        (self.directory / "processes.json").unlink(missing_ok=True)
