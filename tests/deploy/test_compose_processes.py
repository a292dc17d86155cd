"""docker-compose.yml run for real, without Docker: every service's command as a
local process (support/topology.py maps network namespaces to loopback addresses
and volumes to temporary directories). The topology must work as written: the
controller elects a leader for every shard, the `oxia` client writes and reads
through a storage pod's published address, the gateway serves its own, and
every service's health check passes as Docker would run it."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import oxia
import pytest
import yaml

from support.manifests import ROOT
from support.topology import Container, Mapper, Topology, gateway_round_trip, loopback_prefix

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
        volumes = {}
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            volumes[target] = tmp_path / "volumes" / source
        environment = service.get("environment") or {}
        containers[name] = Container(
            name,
            service["image"],
            list(service["command"]),
            addresses[name],
            env={str(key): str(value) for key, value in dict(environment).items()},
            volumes=volumes,
        )
    return containers, services, Mapper({name: addresses[name] for name in owners})


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _until(condition: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except OSError as error:  # not serving yet
            last = error
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: {last!r}")


def test_the_compose_topology_works_as_local_processes(tmp_path: Path) -> None:
    containers, services, mapper = _containers(tmp_path)
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
        controller_url = f"http://{controller.address}:6650"

        def led() -> bool:
            shards = _get_json(f"{controller_url}/v1/shards")
            return len(shards) == 3 and all(shard.get("leader") for shard in shards)

        _until(led, "a leader for every shard")
        # Every health check, as Docker runs it in the service's namespace.
        for name, service in services.items():
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
        with oxia.Client(address) as client:
            for index in range(10):
                client.put(f"/deploy/{index}", f"value-{index}".encode())
            for index in range(10):
                _, value, _ = client.get(f"/deploy/{index}")
                assert value == f"value-{index}".encode()
        gateway_round_trip(f"http://{containers['cairn-gateway'].address}:8080")
    except BaseException:
        print(topology.logs())
        raise
    finally:
        topology.stop()
