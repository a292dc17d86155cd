"""Every kustomize overlay renders, validates strictly against a current
Kubernetes version's schemas, and says what issue 41 asks of it: CairnCluster
objects valid under the CRD's own schema and readable by the controller; every
container locked down and sized; every container's arguments accepted by its
program, with the ports and probes they name matching the manifests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.controller.model import parse_spec
from cairn.health.settings import parse_settings
from support.fake_kube import load_crd_schema, validate
from support.manifests import (
    OVERLAYS,
    Object,
    container_env,
    containers,
    expand,
    find,
    of_kind,
    render,
    rendered_text,
    tool,
)
from support.programs import image_name, parse

KUBERNETES_VERSION = "1.37.0"
# Kinds kubernetes-validate has no schema for, and why that is acceptable.
# CairnCluster: validated against its CRD below. cert-manager's and
# prometheus-operator's kinds: their CRD schemas are not available offline here;
# their fields are checked by what uses them instead (the Certificates' and CSI
# volumes' identities by test_kubernetes_processes, which issues the very
# certificates they ask for; the PodMonitors' ports and schemes below).
NOT_IN_KUBERNETES_SCHEMAS = {
    "CairnCluster": "cairn.dev CRD, validated against its own schema",
    "Certificate": "cert-manager.io CRD",
    "Issuer": "cert-manager.io CRD",
    "PodMonitor": "monitoring.coreos.com CRD (prometheus-operator)",
    "PrometheusRule": "monitoring.coreos.com CRD (prometheus-operator)",
}
FIELDS = {"metadata.name": "cairn-storage-0", "metadata.namespace": "cairn"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_overlay_validates_strictly(overlay: str, tmp_path: Path) -> None:
    manifest = tmp_path / f"{overlay}.yaml"
    manifest.write_text(rendered_text(overlay), encoding="utf-8")
    result = subprocess.run(
        [
            tool("kubernetes-validate"),
            "--strict",
            "--kubernetes-version",
            KUBERNETES_VERSION,
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "ERROR" not in report, report
    # Every built-in object was checked: only the custom resources have no schema
    # there (see NOT_IN_KUBERNETES_SCHEMAS), and no other kind was skipped.
    objects = render(overlay)
    unchecked = [o for o in objects if o["kind"] in NOT_IN_KUBERNETES_SCHEMAS]
    passed = report.count(" passed for resource ")
    assert passed == len(objects) - len(unchecked), report
    assert report.count("Couldn't find schema") == len(unchecked), report


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cairn_clusters_validate_against_the_crd(overlay: str, tmp_path: Path) -> None:
    objects = render(overlay)
    crd = tmp_path / "crd.yaml"
    # The CRD as rendered (what the API server would get), not the base's file.
    rendered_crd = find(objects, "CustomResourceDefinition", "cairnclusters.cairn.dev")
    crd.write_text(yaml.safe_dump(rendered_crd), encoding="utf-8")
    schema = load_crd_schema(crd)
    clusters = of_kind(objects, "CairnCluster")
    assert [c["metadata"]["name"] for c in clusters] == ["cairn"]
    for cluster in clusters:
        assert validate(schema, cluster) == []
        parse_spec(cluster["spec"])  # and the controller reads it


def test_development_is_one_pod_with_replication_factor_one() -> None:
    objects = render("development")
    spec = find(objects, "CairnCluster", "cairn")["spec"]
    assert spec["storage"]["replicas"] == 1
    assert {ns["replicationFactor"] for ns in spec["namespaces"]} == {1}
    assert find(objects, "Deployment", "cairn-controller")["spec"]["replicas"] == 1
    assert of_kind(objects, "PodDisruptionBudget") == []


def test_production_is_three_pods_replication_factor_three_spread_out() -> None:
    objects = render("production")
    spec = find(objects, "CairnCluster", "cairn")["spec"]
    assert spec["storage"]["replicas"] >= 3
    assert {ns["replicationFactor"] for ns in spec["namespaces"]} == {3}
    assert find(objects, "Deployment", "cairn-controller")["spec"]["replicas"] == 2
    pod = find(objects, "StatefulSet", "cairn-storage")["spec"]["template"]["spec"]
    zones = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
    assert zones == ["topology.kubernetes.io/zone"]
    hosts = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [term["topologyKey"] for term in hosts] == ["kubernetes.io/hostname"]
    budget = find(objects, "PodDisruptionBudget", "cairn-storage")
    assert budget["spec"]["maxUnavailable"] == 1
    # The security and observability components are in.
    assert of_kind(objects, "Certificate") and of_kind(objects, "PodMonitor")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down_and_sized(overlay: str) -> None:
    objects = render(overlay)
    for workload, container in containers(objects):
        where = f"{workload['metadata']['name']}/{container['name']}"
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] != 0, where
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, where
        assert context["readOnlyRootFilesystem"] is True, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        assert "add" not in context["capabilities"], where
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) >= {"cpu", "memory"}, where
        mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
        assert "/tmp" in mounts, where  # the only place a read-only root lets it write


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_controller_owns_the_storage_pod_count(overlay: str) -> None:
    objects = render(overlay)
    statefulset = find(objects, "StatefulSet", "cairn-storage")
    assert "replicas" not in statefulset["spec"]  # kubectl apply must not reset it
    controller = find(objects, "Deployment", "cairn-controller")
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--statefulset=cairn-storage" in args
    headless = find(objects, "Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_controller_and_peers_reach_the_internal_port(overlay: str) -> None:
    policy = find(render(overlay), "NetworkPolicy", "cairn-storage")
    for rule in policy["spec"]["ingress"]:
        ports = {port["port"] for port in rule["ports"]}
        if 6649 in ports:
            components = {
                peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                for peer in rule["from"]
            }
            assert components == {"controller", "storage"}
            assert all(set(peer) == {"podSelector"} for peer in rule["from"])


# -- every container's arguments, as its program reads them -------------------------


def _ports(container: Object) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_s_arguments_are_its_program_s(overlay: str) -> None:
    """Each container's args parse with its program's own parser (a misspelt or
    removed flag fails here), and the ports they set are the ports declared."""
    objects = render(overlay)
    for workload, container in containers(objects):
        env = container_env(container, FIELDS)
        args = [expand(arg, env) for arg in container["args"]]
        assert not any("$(" in arg for arg in args), (container["name"], args)
        parsed = parse(container["image"], args)
        declared = set(_ports(container).values())
        listening = {parsed.port, parsed.metrics_port}
        if image_name(container["image"]) == "cairn/storage":
            listening.add(parsed.internal_port)
        assert listening == declared, (workload["metadata"]["name"], container["name"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_storage_probes_ask_the_sidecar(overlay: str) -> None:
    statefulset = find(render(overlay), "StatefulSet", "cairn-storage")
    pod = statefulset["spec"]["template"]["spec"]
    by_name = {container["name"]: container for container in pod["containers"]}
    storage, health = by_name["storage"], by_name["health"]
    sidecar_port = parse_settings(
        [expand(arg, {"POD_NAME": "cairn-storage-0"}) for arg in health["args"]]
    ).port
    pod_ports: dict[str, Any] = {}
    for container in pod["containers"]:
        pod_ports.update(_ports(container))
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = storage[probe]["httpGet"]
        assert get["path"] == path
        assert pod_ports[get["port"]] == sidecar_port
    # Startup: the internal port listens once the logs are replayed.
    assert pod_ports[storage["startupProbe"]["tcpSocket"]["port"]] == 6649


def _flags(container: Object) -> list[str]:
    return [arg.split("=", 1)[0] for arg in container["args"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_chooses_its_transport_security(overlay: str) -> None:
    """Production: TLS on every container, from a certificate volume mounted where
    --tls-dir points; development: --insecure, said explicitly. And the kubelet's
    HTTP probes ask with the scheme the port serves."""
    objects = render(overlay)
    for workload, container in containers(objects):
        flags = _flags(container)
        name = (workload["metadata"]["name"], container["name"])
        if overlay == "production":
            assert "--tls-dir" in flags and "--insecure" not in flags, name
            (tls_dir,) = [
                a.split("=", 1)[1] for a in container["args"] if a.startswith("--tls-dir=")
            ]
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert mounts[tls_dir].get("readOnly") is True, name
        else:
            assert "--insecure" in flags and "--tls-dir" not in flags, name
    for workload in [*of_kind(objects, "Deployment"), *of_kind(objects, "StatefulSet")]:
        pod = workload["spec"]["template"]["spec"]
        serving_tls = {
            port["name"]: "--tls-dir" in _flags(container)
            for container in pod["containers"]
            for port in container.get("ports", [])
        }
        for container in pod["containers"]:
            for probe in ("livenessProbe", "readinessProbe"):
                get = container.get(probe, {}).get("httpGet")
                if get is not None:
                    scheme = "HTTPS" if serving_tls[get["port"]] else "HTTP"
                    assert get.get("scheme", "HTTP") == scheme, (container["name"], probe)


AUTH_FILES = {
    "--auth-config": "auth.json",
    "--pod-token-file": "gateway.token",
    "--session-key-file": "session.key",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_server_chooses_its_auth(overlay: str) -> None:
    """Production: every server reads auth.json from the Secret cairn-auth, required
    and mounted read-only where the flag points (the gateway its pod token and
    session key too, from the same Secret); development: --no-auth, said
    explicitly. The health sidecars take no auth flags and mount no credentials."""
    objects = render(overlay)
    for workload, container in containers(objects):
        name = (workload["metadata"]["name"], container["name"])
        args = dict(a.split("=", 1) if "=" in a else (a, "") for a in container["args"])
        parsed = parse(container["image"], list(container["args"]))
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        if image_name(container["image"]) == "cairn/health":
            assert not set(args) & {*AUTH_FILES, "--no-auth"}, name
            assert "auth" not in mounts, name
            continue
        gateway = image_name(container["image"]) == "cairn/gateway"
        if overlay == "development":
            assert parsed.no_auth and parsed.auth_config is None, name
            assert not set(args) & set(AUTH_FILES), name
            continue
        assert "--no-auth" not in args, name
        wanted = AUTH_FILES if gateway else {"--auth-config": "auth.json"}
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        for flag, file_name in wanted.items():
            path = Path(args[flag])
            assert path.name == file_name, (name, flag)
            (mount,) = [m for m in mounts.values() if Path(m["mountPath"]) == path.parent]
            assert mount.get("readOnly") is True, name
            secret = volumes[mount["name"]]["secret"]
            assert secret["secretName"] == "cairn-auth", name
            assert secret.get("optional", False) is False, name  # pods wait for it
        assert not set(args) & (set(AUTH_FILES) - set(wanted)), name


def test_the_pod_monitors_scrape_ports_the_pods_declare() -> None:
    """Each PodMonitor selects pods of a workload, names a port one of its
    containers declares, and scrapes it with the scheme it serves: http, as the
    tls component keeps /metrics plaintext (--metrics-plaintext)."""
    objects = render("production")
    monitors = of_kind(objects, "PodMonitor")
    assert monitors
    workloads = [*of_kind(objects, "Deployment"), *of_kind(objects, "StatefulSet")]
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        (workload,) = [
            w
            for w in workloads
            if wanted.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        by_port = {
            port["name"]: container
            for container in workload["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        }
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            container = by_port[endpoint["port"]]
            metrics_port = [
                p["containerPort"] for p in container["ports"] if p["name"] == endpoint["port"]
            ]
            assert f"--metrics-port={metrics_port[0]}" in container["args"]
            tls_metrics = "--tls-dir" in _flags(container) and (
                "--metrics-plaintext" not in _flags(container)
            )
            assert endpoint.get("scheme", "http") == ("https" if tls_metrics else "http")
