"""docker-compose.yml run for real, without Docker: every service's command as a
local process (support/topology.py maps network namespaces to loopback addresses
and volumes to temporary directories). The topology must work as written: the
controller elects a leader for every shard, the `oxia` client writes and reads
through a storage pod's published address, the gateway serves its own, and
every service's health check passes as Docker would run it.

TLS: the one-shot `certs` service runs first, as written (`python -m
cairn.common.certs`, its volume a temporary directory), each certificate's hosts
also named by the address the topology maps them to (a service's 127.0.0.1 and
localhost are its namespace's address); the services then read their own
subdirectory of that volume, as compose mounts it. Prometheus and Grafana are
not Cairn programs and are not started here (their files are checked by
test_compose.py and the monitoring tests). The `oxia` client speaks no TLS:
Cairn's own client writes and reads through a storage pod's published address,
with the user certificate the certs service made.

Auth: the one-shot `auth` service runs as written too (`python -m
cairn.controller.local.auth`); the servers read what it wrote from their mount
of its volume, and the test calls them with the admin token it made, as an
operator would after `docker compose cp auth:...`."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common.tls import TlsFiles
from support.manifests import ROOT
from support.programs import image_name
from support.topology import (
    Container,
    Mapper,
    Topology,
    bearer,
    gateway_round_trip,
    loopback_prefix,
    released,
)

pytestmark = pytest.mark.e2e


def _containers(tmp_path: Path) -> tuple[dict[str, Container], dict[str, Any], Mapper]:
    services: dict[str, Any] = yaml.safe_load(
        (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    )["services"]
    prefix = loopback_prefix()
    owners = [name for name, svc in services.items() if "network_mode" not in svc]
    addresses = {name: f"{prefix}{index + 2}" for index, name in enumerate(owners)}
    for name, service in services.items():
        mode = service.get("network_mode")
        if mode is not None:
            assert mode.startswith("service:"), mode
            addresses[name] = addresses[mode.split(":", 1)[1]]
    containers = {}
    for name, service in services.items():
        if not image_name(service["image"]).startswith("cairn/"):
            continue  # Prometheus and Grafana (see the module doc)
        volumes = {}
        for volume in service.get("volumes", []):
            if isinstance(volume, dict):
                directory = tmp_path / "volumes" / volume["source"]
                subpath = volume.get("volume", {}).get("subpath")
                volumes[volume["target"]] = directory / subpath if subpath else directory
                continue
            source, target = volume.split(":")[:2]
            volumes[target] = tmp_path / "volumes" / source
        environment = service.get("environment") or {}
        containers[name] = Container(
            name,
            service["image"],
            [*service.get("entrypoint", [])[3:], *service["command"]],
            addresses[name],
            env={str(key): str(value) for key, value in dict(environment).items()},
            volumes=volumes,
        )
    return containers, services, Mapper({name: addresses[name] for name in owners})


def _issue_certificates(containers: dict[str, Container], mapper: Mapper) -> Path:
    """Run the one-shot certs service as written; its volume's directory."""
    certs = containers.pop("certs")
    arguments = []
    for argument in certs.args:
        if argument.startswith("--"):
            arguments.append(mapper.text(argument, certs))
            continue
        request, _, hosts = argument.partition("@")
        directory = request.split("=", 1)[0]
        names = [host for host in hosts.split(",") if host]
        if names:
            owner = containers[directory]  # the service that will hold it
            names += [mapper.text(f"{host}:1", owner).rsplit(":", 1)[0] for host in names]
        arguments.append(f"{request}@{','.join(names)}" if names else request)
    for directory in certs.volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "cairn.common.certs", *arguments], check=True, timeout=60)
    return certs.volumes["/var/lib/cairn"]


def _make_auth(containers: dict[str, Container], mapper: Mapper) -> str:
    """Run the one-shot auth service as written; the admin token it made."""
    auth = containers.pop("auth")
    arguments = [mapper.text(argument, auth) for argument in auth.args]
    for directory in auth.volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    module = ["-m", "cairn.controller.local.auth"]
    subprocess.run([sys.executable, *module, *arguments], check=True, timeout=60)
    (admin_token,) = [a.split("=", 1)[1] for a in arguments if a.startswith("--admin-token-")]
    return Path(admin_token).read_text(encoding="utf-8").strip()


CONTEXT: ssl.SSLContext | None = None


def _get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers=bearer(token))
    with urllib.request.urlopen(request, timeout=5, context=CONTEXT) as answer:
        return json.loads(answer.read())


def _until(condition: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except OSError as error:  # not serving yet
            last = released(error)
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: {last!r}")


def test_the_compose_topology_works_as_local_processes(tmp_path: Path) -> None:
    global CONTEXT
    containers, services, mapper = _containers(tmp_path)
    entrypoint = services["certs"]["entrypoint"]
    assert entrypoint[:3] == ["python", "-m", "cairn.common.certs"]
    certs = _issue_certificates(containers, mapper)
    assert services["auth"]["entrypoint"] == ["python", "-m", "cairn.controller.local.auth"]
    admin_token = _make_auth(containers, mapper)
    CONTEXT = ssl.create_default_context(cafile=str(certs / "client" / "ca.crt"))
    topology = Topology(mapper)
    order = sorted(
        containers,
        key=lambda n: (
            "controller" not in n,
            "health" in n or "gateway" in n,
            "gateway" in n,
            n,
        ),
    )
    try:
        for name in order:
            topology.start(containers[name])
        controller = containers["cairn-controller"]
        controller_url = f"https://{controller.address}:6650"

        def led() -> bool:
            shards = _get_json(f"{controller_url}/v1/shards", admin_token)
            return len(shards) == 3 and all(shard.get("leader") for shard in shards)

        _until(led, "a leader for every shard")
        # Auth is on: without the token, the admin API turns the caller away.
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get_json(f"{controller_url}/v1/shards", "not-a-token")
        assert released(refused.value).code == 401
        # Every health check, as Docker runs it in the service's namespace.
        for name, service in services.items():
            if name not in containers:
                continue  # the one-shots ran; Prometheus and Grafana do not here
            command = service["healthcheck"]["test"]
            assert command[0] == "CMD"
            _until(
                lambda c=command[1:], n=name: topology.run_check(c, containers[n]),
                f"the health check of {name}",
            )
        # The oxia client, through the first pod's advertised (published) address.
        pod = containers["cairn-storage-0"]
        address = mapper.text(
            next(a for a in pod.args if a.startswith("--advertise=")).split("=", 1)[1], pod
        )
        options = ClientOptions(
            tls=TlsFiles.in_directory(certs / "client"),
            bearer_token=admin_token,
            connect_timeout_s=30,
        )

        async def round_trip() -> None:
            async with await AsyncClient.connect(address, options=options) as client:
                for index in range(10):
                    await client.put(f"/deploy/{index}", f"value-{index}".encode())
                for index in range(10):
                    value = (await client.get(f"/deploy/{index}")).value
                    assert value == f"value-{index}".encode()

        asyncio.run(round_trip())
        gateway_url = f"https://{containers['cairn-gateway'].address}:8080"
        gateway_round_trip(gateway_url, CONTEXT, admin_token)
    except BaseException:
        print(topology.logs())
        raise
    finally:
        topology.stop()
