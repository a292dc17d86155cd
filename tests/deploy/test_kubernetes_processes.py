"""The production overlay run for real, without Kubernetes: its StatefulSet's and
Deployments' containers as local processes (support/topology.py: a pod's
namespace is a loopback address, Services and pod DNS names map to the pods
behind them, volumes to temporary directories), against the fake API server
holding the rendered CairnCluster and StatefulSet, with only the rendered Role's
permissions for the controller. The test plays the kubelet: it starts a pod for
every ordinal the StatefulSet's replicas ask for (the controller scales it from
the count the StatefulSet is created with to the CairnCluster's), and asks every
probe as the kubelet would.

TLS: cert-manager cannot run here, so the test is its issuer. For every
certificate volume of a pod (a Secret that a rendered cert-manager Certificate
fills, or a cert-manager CSI driver volume) it issues, with a CA of its own
(cairn.common.certs), a certificate with exactly the SPIFFE URI the manifest
asks for (the CSI driver's ${POD_NAME} expanded) and its DNS names and
addresses, each also mapped as the topology maps names (a name of a namespace
becomes its loopback address, as clients dial it here). So a wrong URI, a
missing DNS name or a certificate mounted in the wrong container fails here:
peers, the controller and the sidecars check each other's identities. The
`oxia` client speaks no TLS; Cairn's own client writes and reads through the
client Service's port instead, with a user certificate of the same CA.

Auth: the operator creates the Secret cairn-auth before applying (see the auth
component); the test does as its comment says, with the same generator, and
puts the Secret's files in every container's mount of it (a container that
mounts no such volume gets none, and fails to start if its flags need them).
The test calls the API as the admin, whose token stays out of the Secret.

The controller Deployment's second replica is not started: a Service name maps
to one address here, and only the leader may get the sidecars' heartbeats (in a
cluster its readiness probe sees to that).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common.certs import CertificateAuthority
from cairn.common.identity import DEFAULT_TRUST_DOMAIN, principal_of_spiffe_id
from cairn.common.tls import TlsFiles
from cairn.controller.local.auth import ensure_local_auth
from support.fake_kube import STATEFULSETS, FakeKubeServer, Object
from support.manifests import container_env, expand, find, of_kind, render
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

NAMESPACE = "cairn"
CLIENT_AGENT = kubernetes.client.ApiClient().user_agent  # what the controller sends


def _kubeconfig(path: Path, server: str) -> Path:
    """What in-cluster credentials give a pod: the API server's address."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "controller", "user": {}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {
                            "cluster": "fake",
                            "user": "controller",
                            "namespace": NAMESPACE,
                        },
                    }
                ],
                "current-context": "fake",
            }
        ),
        encoding="utf-8",
    )
    return path


def _port(pod: Object, name_or_number: Any) -> int:
    if isinstance(name_or_number, int):
        return name_or_number
    for container in pod["containers"]:
        for port in container.get("ports", []):
            if port["name"] == name_or_number:
                return int(port["containerPort"])
    raise AssertionError(f"no port named {name_or_number}")


# The kubelet does not verify a probed HTTPS port's certificate.
KUBELET_TLS = ssl.create_default_context()
KUBELET_TLS.check_hostname = False
KUBELET_TLS.verify_mode = ssl.CERT_NONE
CSI_DRIVER = "csi.cert-manager.io"
AUTH_SECRET = "cairn-auth"


def _probe(pod: Object, probe: Object, address: str) -> bool:
    """One probe, as the kubelet asks it: 200-399 for HTTP, a connection for TCP."""
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            scheme = get.get("scheme", "HTTP").lower()
            url = f"{scheme}://{address}:{_port(pod, get['port'])}{get['path']}"
            context = KUBELET_TLS if scheme == "https" else None
            with urllib.request.urlopen(url, timeout=2, context=context) as answer:
                return 200 <= answer.status < 400
        if "tcpSocket" in probe:
            with socket.create_connection((address, _port(pod, probe["tcpSocket"]["port"])), 2):
                return True
    except OSError as error:
        released(error)
        return False
    raise AssertionError(f"unsupported probe {probe}")


def _until(condition: Any, what: str, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except OSError as error:
            last = released(error)
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: {last!r}")


class Cluster:
    """The rendered workloads on loopback addresses, and the kubelet's part."""

    def __init__(self, objects: list[Object], tmp_path: Path, kubeconfig: Path) -> None:
        self.objects = objects
        self.tmp_path = tmp_path
        self.kubeconfig = kubeconfig
        self.prefix = loopback_prefix()
        self.statefulset = find(objects, "StatefulSet", "cairn-storage")
        headless = self.statefulset["spec"]["serviceName"]
        # Addresses: controller .2, gateway .3, storage pod i at .(10 + i).
        self.addresses = {"controller": f"{self.prefix}2", "gateway": f"{self.prefix}3"}
        names = {
            "cairn-controller": self.addresses["controller"],
            "cairn-gateway": self.addresses["gateway"],
            # The client Service: pod 0 stands for "any ready pod".
            "cairn-storage": self.pod_address(0),
        }
        for ordinal in range(10):
            pod = f"cairn-storage-{ordinal}"
            names[f"{pod}.{headless}.{NAMESPACE}.svc"] = self.pod_address(ordinal)
        self.topology = Topology(Mapper(names))
        self.pods: dict[int, list[Container]] = {}
        self.authority = CertificateAuthority.create_or_load(tmp_path / "ca")
        self.ca_file = tmp_path / "ca" / "ca.crt"
        self.user_tls = tmp_path / "user"
        self.authority.issue_user("deploy-test", self.user_tls)
        # The Secret cairn-auth's files, made as the auth component says.
        self.auth = ensure_local_auth(tmp_path / AUTH_SECRET, tmp_path / "admin.token")
        self.admin_token = self.auth.admin_token.read_text(encoding="utf-8").strip()

    def _requested(self, volume: Object, pod_name: str) -> tuple[str, list[str]] | None:
        """The SPIFFE URI and the host names a certificate volume asks for; None
        for a volume that holds no certificate (a Secret no Certificate fills)."""
        if "secret" in volume:
            secret = volume["secret"]["secretName"]
            filling = [
                c for c in of_kind(self.objects, "Certificate") if c["spec"]["secretName"] == secret
            ]
            if not filling:
                return None
            (certificate,) = filling
            spec = certificate["spec"]
            assert certificate["spec"]["issuerRef"]["name"] in {
                i["metadata"]["name"] for i in of_kind(self.objects, "Issuer")
            }
            (uri,) = spec["uris"]
            return uri, [*spec.get("dnsNames", []), *spec.get("ipAddresses", [])]
        csi = volume["csi"]
        assert csi["driver"] == CSI_DRIVER, volume
        attributes = {
            key.removeprefix(f"{CSI_DRIVER}/"): value.replace("${POD_NAME}", pod_name).replace(
                "${POD_NAMESPACE}", NAMESPACE
            )
            for key, value in csi["volumeAttributes"].items()
        }
        assert attributes["issuer-name"] in {
            i["metadata"]["name"] for i in of_kind(self.objects, "Issuer")
        }
        hosts = [
            *attributes.get("dns-names", "").split(","),
            *attributes.get("ip-sans", "").split(","),
        ]
        (uri,) = attributes["uri-sans"].split(",")
        return uri, [host for host in hosts if host]

    def mount_auth_secret(self, pod: Object, spec: Object, container: Container) -> None:
        """The Secret cairn-auth's files where the container mounts it."""
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        for mount in spec.get("volumeMounts", []):
            secret = volumes.get(mount["name"], {}).get("secret", {})
            if secret.get("secretName") == AUTH_SECRET:
                shutil.copytree(
                    self.auth.directory, container.volumes[mount["mountPath"]], dirs_exist_ok=True
                )

    def issue_certificates(self, pod: Object, spec: Object, container: Container) -> None:
        """What cert-manager would put in the container's certificate volumes."""
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        for mount in spec.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            if "csi" not in volume and "secret" not in volume:
                continue
            requested = self._requested(volume, container.name.split("/")[0])
            if requested is None:
                continue
            uri, hosts = requested
            principal = principal_of_spiffe_id(uri, DEFAULT_TRUST_DOMAIN)
            assert principal is not None and principal.spiffe_id() == uri, uri
            # Each name also as this machine reaches it (see the module doc).
            mapped = [
                self.topology.mapper.text(f"{host}:1", container).rsplit(":", 1)[0]
                for host in hosts
            ]
            self.authority.issue_component(
                principal, container.volumes[mount["mountPath"]], [*hosts, *mapped]
            )

    def pod_address(self, ordinal: int) -> str:
        return f"{self.prefix}{10 + ordinal}"

    def containers_of(self, workload: Object, pod_name: str, address: str) -> list[Container]:
        pod = workload["spec"]["template"]["spec"]
        fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}
        result = []
        for spec in pod["containers"]:
            env = container_env(spec, fields)
            args = [expand(arg, env) for arg in spec["args"]]
            volumes = {
                mount["mountPath"]: self.tmp_path / pod_name / mount["name"]
                for mount in spec.get("volumeMounts", [])
            }
            platform = {}
            if spec["name"] == "controller":
                # In a cluster, the service account's in-cluster credentials. And
                # bytecode written, should the environment forbid it: the image has
                # the kubernetes client compiled, which is slow to do at every start.
                platform = {"KUBECONFIG": str(self.kubeconfig), "PYTHONDONTWRITEBYTECODE": ""}
            name = f"{pod_name}/{spec['name']}"
            container = Container(name, spec["image"], args, address, env, volumes, platform)
            self.issue_certificates(pod, spec, container)
            self.mount_auth_secret(pod, spec, container)
            result.append(container)
        return result

    def start_workload(self, kind: str, name: str, address: str) -> list[Container]:
        workload = find(self.objects, kind, name)
        containers = self.containers_of(workload, f"{name}-0", address)
        for container in containers:
            self.topology.start(container)
        return containers

    def follow_statefulset(self, fake: FakeKubeServer) -> None:
        """Start the pods the StatefulSet's replicas ask for (never stops any here)."""
        replicas = fake.get(STATEFULSETS, "cairn-storage", NAMESPACE)["spec"].get("replicas", 1)
        for ordinal in range(replicas):
            if ordinal in self.pods:
                continue
            name = f"cairn-storage-{ordinal}"
            containers = self.containers_of(self.statefulset, name, self.pod_address(ordinal))
            for container in containers:
                self.topology.start(container)
            self.pods[ordinal] = containers
            labels = self.statefulset["spec"]["template"]["metadata"]["labels"]
            fake.add_pod(name, NAMESPACE, labels=labels, pod_ip=self.pod_address(ordinal))

    def probe_all(self, kind: str, name: str, address: str) -> None:
        pod = find(self.objects, kind, name)["spec"]["template"]["spec"]
        for container in pod["containers"]:
            for kind_of_probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = container.get(kind_of_probe)
                if probe is not None:
                    _until(
                        lambda p=probe: _probe(pod, p, address),
                        f"{name}/{container['name']} {kind_of_probe}",
                    )


def test_the_production_overlay_works_as_local_processes(tmp_path: Path) -> None:
    objects = render("production")
    with FakeKubeServer() as fake:
        fake.enforce_role(
            find(objects, "Role", "cairn-controller"), user_agent=CLIENT_AGENT, namespace=NAMESPACE
        )
        admin = fake.api_client("admin")
        cluster_object = find(objects, "CairnCluster", "cairn")
        kubernetes.client.CustomObjectsApi(admin).create_namespaced_custom_object(
            "cairn.dev", "v1", NAMESPACE, "cairnclusters", cluster_object
        )
        statefulset = find(objects, "StatefulSet", "cairn-storage")
        kubernetes.client.AppsV1Api(admin).create_namespaced_stateful_set(NAMESPACE, statefulset)
        cluster = Cluster(objects, tmp_path, _kubeconfig(tmp_path / "kubeconfig", fake.url))
        try:
            _run(fake, cluster, cluster_object)
        except BaseException:
            print(cluster.topology.logs())
            raise
        finally:
            cluster.topology.stop()
        assert fake.forbidden() == []
        assert fake.internal_errors == []


def _run(fake: FakeKubeServer, cluster: Cluster, cluster_object: Object) -> None:
    controller_address = cluster.addresses["controller"]
    cluster.start_workload("Deployment", "cairn-controller", controller_address)
    wanted = cluster_object["spec"]["storage"]["replicas"]

    # The controller scales the StatefulSet (created without replicas: 1) to the
    # CairnCluster's count; the kubelet starts what it asks for.
    def scaled() -> bool:
        statefulset = fake.get(STATEFULSETS, "cairn-storage", NAMESPACE)
        return bool(statefulset["spec"].get("replicas") == wanted)

    _until(scaled, "the StatefulSet scaled to the CairnCluster's count")
    cluster.follow_statefulset(fake)
    assert sorted(cluster.pods) == list(range(wanted))
    shards = sum(ns["initialShardCount"] for ns in cluster_object["spec"]["namespaces"])

    verified = ssl.create_default_context(cafile=str(cluster.ca_file))

    def shards_as(token: str) -> Any:
        url = f"https://{controller_address}:6650/v1/shards"
        request = urllib.request.Request(url, headers=bearer(token))
        with urllib.request.urlopen(request, timeout=5, context=verified) as answer:
            return json.loads(answer.read())

    def led() -> bool:
        listed = shards_as(cluster.admin_token)
        return len(listed) == shards and all(shard.get("leader") for shard in listed)

    _until(led, "a leader for every shard")
    # Auth is on: a caller without a valid token is turned away.
    with pytest.raises(urllib.error.HTTPError) as refused:
        shards_as("not-a-token")
    assert released(refused.value).code == 401
    gateway_address = cluster.addresses["gateway"]
    cluster.start_workload("Deployment", "cairn-gateway", gateway_address)
    # Every probe, as the kubelet asks it.
    cluster.probe_all("Deployment", "cairn-controller", controller_address)
    cluster.probe_all("Deployment", "cairn-gateway", gateway_address)
    for ordinal in cluster.pods:
        cluster.probe_all("StatefulSet", "cairn-storage", cluster.pod_address(ordinal))
    # A client through the client Service's port, over TLS with a user certificate.
    client_service = find(cluster.objects, "Service", "cairn-storage")
    port = client_service["spec"]["ports"][0]["port"]
    options = ClientOptions(
        tls=TlsFiles.in_directory(cluster.user_tls),
        bearer_token=cluster.admin_token,
        connect_timeout_s=30,
    )

    async def round_trip() -> None:
        address = f"{cluster.pod_address(0)}:{port}"
        async with await AsyncClient.connect(address, options=options) as client:
            for index in range(12):
                await client.put(f"/k8s/{index}", f"value-{index}".encode())
            for index in range(12):
                assert (await client.get(f"/k8s/{index}")).value == f"value-{index}".encode()

    asyncio.run(round_trip())
    gateway_port = find(cluster.objects, "Service", "cairn-gateway")["spec"]["ports"][0]["port"]
    gateway_url = f"https://{gateway_address}:{gateway_port}"
    gateway_round_trip(gateway_url, verified, cluster.admin_token)
