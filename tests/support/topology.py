"""Deployment topologies run as local processes: each container's command line,
arguments and environment as written in a manifest, with what only a container
platform provides mapped onto this machine.

- A network namespace (a pod, or a compose service with the services that join it
  through `network_mode: service:...`) becomes one loopback address of its own
  (127.X.Y.Z, X and Y random per run): its processes bind it where the manifest
  binds 0.0.0.0 or 127.0.0.1, and reach each other on it, as in one namespace;
  the ports stay the manifest's own.
- A DNS name of another namespace (`name:port`) becomes that namespace's address.
- A volume's mount path becomes a temporary directory.
- The image's entrypoint is its console script in this virtual environment.

So a wrong flag, port, address or probe path in a manifest fails here as it
would in a cluster. TLS flags point into certificate volumes, mapped like any
volume; the tests put certificates there as the platform would (cert-manager,
or compose's one-shot certs service), naming each host also by its mapped address.
Auth flags point into the auth volume, filled as the operator (Kubernetes'
Secret) or compose's one-shot auth service would.
"""

from __future__ import annotations

import random
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support.processes import PipedProcess
from support.programs import image_name

# image -> (console script, the line it prints once it serves)
PROGRAMS = {
    "cairn/storage": ("cairn-storage", "cairn-storage listening on "),
    "cairn/controller": ("cairn-controller", "cairn-controller listening on "),
    "cairn/gateway": ("cairn-gateway", "cairn-gateway: listening on "),
    "cairn/health": ("cairn-health", "cairn-health listening on "),
}
# Generous: a first import of the kubernetes client compiles a thousand modules
# (the images ship them compiled).
START_TIMEOUT_S = 180.0


def loopback_prefix() -> str:
    """127.X.Y. with X, Y random: concurrent runs do not meet."""
    return f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}."


@dataclass
class Container:
    """One container of a manifest, and the namespace (address) it runs in."""

    name: str
    image: str
    args: list[str]
    address: str
    env: dict[str, str] = field(default_factory=dict)
    # mount path -> host directory
    volumes: dict[str, Path] = field(default_factory=dict)
    # What the platform gives the process beyond the manifest (e.g. where the API
    # server is), passed as is.
    platform_env: dict[str, str] = field(default_factory=dict)


class Mapper:
    """Rewrites a manifest's strings for the local machine (see the module doc)."""

    def __init__(self, names: Mapping[str, str]) -> None:
        # Longest first: `a-0` must not match inside `a-0-health`.
        self.names = dict(sorted(names.items(), key=lambda item: -len(item[0])))

    def text(self, value: str, container: Container) -> str:
        value = value.replace("0.0.0.0", container.address)
        value = value.replace("127.0.0.1", container.address)
        value = value.replace("localhost", container.address)
        for name, address in self.names.items():
            value = re.sub(rf"(?<![\w.-]){re.escape(name)}(?=:\d)", address, value)
        if container.volumes:
            # One pass, longest first: a mapped directory (under /tmp) must not be
            # mapped again by a shorter mount path (/tmp).
            mounts = sorted(container.volumes, key=len, reverse=True)
            pattern = "|".join(re.escape(mount) for mount in mounts)
            value = re.sub(
                rf"(?<![\w/])({pattern})(?=/|$)",
                lambda match: str(container.volumes[match.group(1)]),
                value,
            )
        return value

    def command(self, container: Container) -> list[str]:
        script, _ = PROGRAMS[image_name(container.image)]
        executable = str(Path(sys.executable).parent / script)
        return [executable, *(self.text(arg, container) for arg in container.args)]


class Topology:
    """Starts containers as processes, in order, each once it has said it serves."""

    def __init__(self, mapper: Mapper) -> None:
        self.mapper = mapper
        self.processes: dict[str, PipedProcess] = {}

    def start(self, container: Container) -> None:
        for directory in container.volumes.values():
            directory.mkdir(parents=True, exist_ok=True)
        process = PipedProcess()
        env = {key: self.mapper.text(value, container) for key, value in container.env.items()}
        env.update(container.platform_env)
        process.spawn(self.mapper.command(container), env=env)
        self.processes[container.name] = process
        _, ready_line = PROGRAMS[image_name(container.image)]
        try:
            process.wait_for(lambda line: line.startswith(ready_line), START_TIMEOUT_S)
        except (TimeoutError, RuntimeError) as error:
            raise AssertionError(f"{container.name} did not start: {error}") from None

    def run_check(self, command: Sequence[str], container: Container) -> bool:
        """A health check command (compose's CMD form) in the container's
        namespace; `python` is this interpreter (the image's)."""
        argv = [sys.executable if part == "python" else part for part in command]
        argv = [self.mapper.text(part, container) for part in argv]
        result = subprocess.run(argv, capture_output=True, timeout=30, check=False)
        return result.returncode == 0

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{process.log_text()[-3000:]}" for name, process in self.processes.items()
        )

    def stop(self) -> None:
        # The gateway and the controller first (clients of the rest), as the
        # launcher stops them.
        first = sorted(self.processes, key=lambda n: ("gateway" not in n, "controller" not in n))
        for name in first:
            self.processes[name].kill()


def released(error: OSError) -> OSError:
    """`error`, with the connection of an HTTP error answer closed: urllib's
    HTTPError holds it open until the error is collected, and a TLS socket
    collected later fails whatever test runs then with a ResourceWarning."""
    if isinstance(error, urllib.error.HTTPError):
        error.close()
    return error


def bearer(token: str | None) -> dict[str, str]:
    """The HTTP header a token goes in; none without a token."""
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def gateway_round_trip(
    base_url: str, context: ssl.SSLContext | None = None, token: str | None = None
) -> None:
    """A put and a get through the gateway (as the token's holder, with auth on).
    Its own key: the `oxia` client 0.2.1 routes keys by another hash than Cairn's
    clients (see ARCHITECTURE.md), so a key it wrote may sit in a shard the
    gateway does not look in."""
    url = f"{base_url}/v1/namespaces/default/keys//deploy/gateway"
    put = urllib.request.Request(
        url, data=b"through the gateway", method="PUT", headers=bearer(token)
    )
    with urllib.request.urlopen(put, timeout=10, context=context) as answer:
        assert 200 <= answer.status < 300
    get = urllib.request.Request(url, headers=bearer(token))
    with urllib.request.urlopen(get, timeout=10, context=context) as answer:
        assert answer.read() == b"through the gateway"
