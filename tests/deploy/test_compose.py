"""docker-compose.yml: valid under the Compose specification's JSON schema, the
same topology as `./dev run` (a controller, three storage pods each with its
health sidecar in the pod's network namespace, the gateway), secure as `./dev
run` is (TLS, and auth with the configuration the one-shot `auth` service
makes), every command accepted by its program, and the addresses and ports the
services name of one another consistent."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.manifests import ROOT, tool
from support.programs import image_name, parse

COMPOSE = ROOT / "docker-compose.yml"
PODS = [f"cairn-storage-{i}" for i in range(3)]
# Services that run once to make credentials, then exit; the others are servers.
ONE_SHOTS = ("certs", "auth")
AUTH_DIR = "/etc/cairn/auth"


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def test_it_validates_against_the_compose_specification() -> None:
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_topology_is_that_of_dev_run() -> None:
    services = compose()["services"]
    images = {name: image_name(service["image"]) for name, service in services.items()}
    assert images == {
        "certs": "cairn/controller",
        "auth": "cairn/controller",
        "prometheus": "prom/prometheus",
        "grafana": "grafana/grafana",
        "cairn-controller": "cairn/controller",
        "cairn-gateway": "cairn/gateway",
        **{pod: "cairn/storage" for pod in PODS},
        **{f"{pod}-health": "cairn/health" for pod in PODS},
    }
    for pod in PODS:
        sidecar = services[f"{pod}-health"]
        assert sidecar["network_mode"] == f"service:{pod}"
        assert "ports" not in sidecar  # published by the namespace's owner
    controller_service = services["cairn-controller"]
    controller = parse(controller_service["image"], controller_service["command"])
    assert (controller.storage_pods, controller.shards, controller.replication_factor) == (3, 3, 3)


@pytest.mark.parametrize("name", sorted(yaml.safe_load(COMPOSE.read_text())["services"]))
def test_every_service_is_hardened_with_a_health_check(name: str) -> None:
    service = compose()["services"][name]
    if image_name(service["image"]).startswith("cairn/"):
        assert service["user"] == "10001:10001"
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert any(mount.startswith("/tmp") for mount in service["tmpfs"])
    assert service["healthcheck"]["test"][0] == "CMD"
    if image_name(service["image"]) in ("cairn/storage", "cairn/controller"):
        # State lives in a named volume, at the image's own mount point.
        (volume,) = [v for v in service["volumes"] if isinstance(v, str)]
        source, target = volume.split(":")
        assert target == "/var/lib/cairn" and source in compose()["volumes"]


def test_every_cairn_service_has_its_own_certificate_read_only() -> None:
    """TLS on (`--tls-dir`), from the certs volume's subdirectory named after the
    service, mounted read-only where --tls-dir points; and the certs service
    issues exactly those, each with the identity of what runs there."""
    services = compose()["services"]
    certs = services["certs"]
    requested = {}
    for argument in certs["command"][1:]:
        directory, _, identity = argument.partition("=")
        requested[directory] = identity.split("@")[0]
    expected = {"client": "user/cairn-user"}
    for name, service in services.items():
        if name in ONE_SHOTS or not image_name(service["image"]).startswith("cairn/"):
            continue
        assert "--tls-dir=/var/run/cairn/tls" in service["command"], name
        assert "--insecure" not in service["command"], name
        (mount,) = [v for v in service["volumes"] if isinstance(v, dict) and v["source"] == "certs"]
        assert mount["source"] == "certs" and mount["target"] == "/var/run/cairn/tls"
        assert mount["read_only"] is True and mount["volume"]["subpath"] == name
        assert service["depends_on"]["certs"]["condition"] == "service_completed_successfully"
        role = {"cairn/controller": "controller", "cairn/storage": "storage"}.get(
            image_name(service["image"]), "gateway"
        )
        if name.endswith("-health"):
            role, name_in_uri = "sidecar", name.removesuffix("-health")
        else:
            name_in_uri = name
        expected[name] = f"{role}/{name_in_uri}"
    assert requested == expected


def test_every_server_reads_the_auth_services_configuration() -> None:
    """Auth on (`--auth-config`, never --no-auth) in the controller, the storage
    pods and the gateway (its pod token and session key too), from the directory
    the auth service writes, mounted read-only where the flags point; the admin
    token apart, in no service's mount; the health sidecars take no auth flags
    and mount nothing of it."""
    services = compose()["services"]
    auth = services["auth"]
    assert auth["entrypoint"] == ["python", "-m", "cairn.controller.local.auth"]
    (state,) = auth["volumes"]
    source, target = state.split(":")
    assert source == "auth" and target == "/var/lib/cairn"
    flags = dict(argument.split("=", 1) for argument in auth["command"])
    written = Path(flags["--dir"]).relative_to(target)
    admin_token = Path(flags["--admin-token-file"]).relative_to(target)
    assert written not in admin_token.parents  # no service mounts the admin token
    servers = 0
    for name, service in services.items():
        if name in ONE_SHOTS or not image_name(service["image"]).startswith("cairn/"):
            continue
        mounts = [v for v in service["volumes"] if isinstance(v, dict) and v["source"] == "auth"]
        parsed = parse(service["image"], service["command"])
        if name.endswith("-health"):
            assert mounts == [], name
            assert not hasattr(parsed, "auth_config"), name
            continue
        servers += 1
        assert parsed.auth_config == Path(AUTH_DIR, "auth.json") and not parsed.no_auth, name
        (mount,) = mounts
        assert mount["target"] == AUTH_DIR and mount["read_only"] is True, name
        assert Path(mount["volume"]["subpath"]) == written, name
        assert service["depends_on"]["auth"]["condition"] == "service_completed_successfully"
        if image_name(service["image"]) == "cairn/gateway":
            assert parsed.pod_token_file == Path(AUTH_DIR, "gateway.token")
            assert parsed.session_key_file == Path(AUTH_DIR, "session.key")
    assert servers == len(PODS) + 2  # the pods, the controller, the gateway


def test_the_services_addresses_and_ports_agree() -> None:
    services = compose()["services"]
    parsed = {
        name: parse(svc["image"], svc["command"])
        for name, svc in services.items()
        if image_name(svc["image"]).startswith("cairn/") and name not in ONE_SHOTS
    }
    controller = parsed["cairn-controller"]
    controller_url = f"https://cairn-controller:{controller.port}"
    assert f"{controller.port}:{controller.port}" in services["cairn-controller"]["ports"]
    advertised = []
    for pod in PODS:
        storage, sidecar = parsed[pod], parsed[f"{pod}-health"]
        # Clients dial the advertised name and port, published as is on the host.
        assert storage.advertise == f"{pod}:{storage.port}"
        assert storage.internal_advertise == f"{pod}:{storage.internal_port}"
        assert f"{storage.port}:{storage.port}" in services[pod]["ports"]
        assert any(p.endswith(f":{sidecar.port}") for p in services[pod]["ports"])
        advertised.append(storage.advertise)
        assert sidecar.node_name == pod
        assert sidecar.storage_internal == f"127.0.0.1:{storage.internal_port}"
        assert sidecar.controller_url == controller_url
        # Storage and sidecar share a network namespace: no port twice.
        ports = [storage.port, storage.internal_port, storage.metrics_port]
        ports += [sidecar.port, sidecar.metrics_port]
        assert len(set(ports)) == len(ports)
    gateway = parsed["cairn-gateway"]
    assert gateway.address.split(",") == advertised
    assert gateway.controller_url == controller_url
    assert f"{gateway.port}:{gateway.port}" in services["cairn-gateway"]["ports"]


def test_prometheus_scrapes_every_metrics_port_with_the_monitors_jobs(tmp_path: Path) -> None:
    """compose/prometheus.yml: valid for promtool (with the generated rules), one
    target per Cairn process's /metrics, where that process serves it in plain
    HTTP on all addresses, under the job names the kustomize PodMonitors give."""
    services = compose()["services"]
    prometheus = services["prometheus"]
    mounts = dict(reversed(v.split(":")[:2]) for v in prometheus["volumes"])
    config_path = ROOT / mounts["/etc/prometheus/prometheus.yml"]
    rules_dir = ROOT / mounts["/etc/prometheus/rules"]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    # promtool on this machine: the rule files where the container would see them.
    config["rule_files"] = [
        str(rules_dir / Path(rule).relative_to("/etc/prometheus/rules"))
        for rule in config["rule_files"]
    ]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run(
        [tool("promtool"), "check", "config", str(local)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    scraped = {}
    for job in config["scrape_configs"]:
        for group in job["static_configs"]:
            for target in group["targets"]:
                scraped[target] = job["job_name"]
    expected = {}
    for name, service in services.items():
        if not image_name(service["image"]).startswith("cairn/") or name in ONE_SHOTS:
            continue
        parsed = parse(service["image"], service["command"])
        assert parsed.metrics_host == "0.0.0.0" and parsed.metrics_plaintext, name
        host = service.get("network_mode", f"service:{name}").split(":", 1)[1]
        job = "cairn-health" if name.endswith("-health") else f"cairn-{name.split('-')[1]}"
        expected[f"{host}:{parsed.metrics_port}"] = job
    assert scraped == expected
    monitors = yaml.safe_load_all(
        (ROOT / "kustomize/components/monitoring/podmonitors.yaml").read_text(encoding="utf-8")
    )
    monitor_jobs = {
        relabel["replacement"]
        for monitor in monitors
        for endpoint in monitor["spec"]["podMetricsEndpoints"]
        for relabel in endpoint["relabelings"]
        if relabel.get("targetLabel") == "job"
    }
    assert set(expected.values()) == monitor_jobs
