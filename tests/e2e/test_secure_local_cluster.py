"""The embedded default is secure (issue 39): `cairn-local` makes a local CA and a
certificate per process, runs internal traffic over mutual TLS and every other
port over TLS, and reuses its certificates after a restart. The controller takes
heartbeats only from the pod's own sidecar."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from cryptography import x509

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common.certs import CertificateAuthority
from cairn.common.identity import Principal, Role
from cairn.common.tls import TlsFiles
from cairn.controller.local.launcher import LOCAL_USER, LocalCluster
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from support.tls import credentials

pytestmark = pytest.mark.e2e

POD = "storage-0"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster",
        pods=1,
        shards=1,
        replication_factor=1,
        preferred_ports=False,
        gateway=False,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _https(
    cluster: LocalCluster, directory: Path | None = None, token: bool = True
) -> httpx.Client:
    """A client of the controller checking it by the local CA; with a certificate
    directory, presenting that certificate; without `token`, sending none."""
    context = ssl.create_default_context(cafile=str(cluster.tls_dir / "ca" / "ca.crt"))
    if directory is not None:
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    # The cluster's auth is on too (the default): the admin API's views need the token.
    headers = (
        {"Authorization": f"Bearer {cluster.auth.admin_token.read_text().strip()}"}
        if cluster.auth is not None and token
        else {}
    )
    return httpx.Client(
        base_url=cluster.controller_url, verify=context, timeout=10, headers=headers
    )


def _wait_alive(cluster: LocalCluster, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with _https(cluster) as http:
        while True:
            nodes = {node["name"]: node for node in http.get("/v1/nodes").json()}
            if nodes.get(POD, {}).get("alive"):
                return nodes[POD]
            assert time.monotonic() < deadline, f"{POD} not alive: {nodes}"
            time.sleep(0.1)


def _forged_heartbeat(node: dict[str, Any]) -> dict[str, Any]:
    """A heartbeat saying the pod's storage is unreachable (it would be failed over)."""
    return {
        "node": POD,
        "publicAddress": node["publicAddress"],
        "internalAddress": node["internalAddress"],
        "storageReachable": False,
        "sentAtMs": int(time.time() * 1000),
    }


def test_every_process_has_a_certificate_and_the_cluster_runs_on_them(
    cluster: LocalCluster,
) -> None:
    tls = cluster.tls_dir
    for process in ("controller", POD, f"{POD}-health", "client"):
        assert (tls / process / "tls.crt").exists(), process
    assert cluster.controller_url.startswith("https://")
    # Sidecar heartbeats went through mutual TLS to the controller.
    _wait_alive(cluster)
    # Auth guards the admin API but not its description: /docs (served from the
    # process, issue 47) and the OpenAPI document answer a caller without a token.
    with _https(cluster, token=False) as anonymous:
        assert anonymous.get("/v1/nodes").status_code == 401
        assert anonymous.get("/docs").status_code == 200
        assert anonymous.get("/openapi.json").status_code == 200
        assert anonymous.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
    # A client with the printed directory writes and reads over TLS.
    address = cluster.public_address(POD)
    # The pods' client port asks for no client certificate (gRPC Python cannot ask
    # without requiring one): the admin token authenticates the client there.
    assert cluster.auth is not None
    options = ClientOptions(
        tls=TlsFiles.in_directory(tls / "client"),
        connect_timeout_s=30,
        bearer_token=cluster.auth.admin_token.read_text().strip(),
    )

    async def round_trip() -> bytes | None:
        async with await AsyncClient.connect(address, options=options) as client:
            await client.put("/secure", b"yes")
            return (await client.get("/secure")).value

    assert asyncio.run(round_trip()) == b"yes"
    # The user certificate it holds may not coordinate.
    with (
        grpc.secure_channel(
            f"{cluster.host}:{cluster.ports.pods[POD].internal}", credentials(tls / "client")
        ) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        rpb_grpc.CoordinationStub(channel).NewTerm(
            rpb.NewTermRequest(shard=0, term=1000, controller_epoch=1000), timeout=5
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    log = (cluster.logs_dir / f"{POD}.log").read_text()
    assert f"from user:{LOCAL_USER}" in log


def test_certificates_are_reused_after_a_restart(cluster: LocalCluster) -> None:
    def serials() -> dict[str, int]:
        return {
            path.parent.name: x509.load_pem_x509_certificate(path.read_bytes()).serial_number
            for path in sorted(cluster.tls_dir.glob("*/tls.crt"))
        }

    before = serials()
    cluster.stop()
    cluster.start()
    assert serials() == before
    _wait_alive(cluster)


def test_heartbeats_only_from_the_pods_own_sidecar(cluster: LocalCluster) -> None:
    node = _wait_alive(cluster)
    forged = _forged_heartbeat(node)
    with _https(cluster) as anonymous:
        answer = anonymous.post("/v1/heartbeats", json=forged)
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/problem+json"
    # The pod's own certificate, and another pod's sidecar's, are not its sidecar's.
    pod_dir = cluster.tls_dir / POD
    other_sidecar = cluster.tls_dir / "other-sidecar"
    authority_dir = cluster.tls_dir / "ca"
    CertificateAuthority.create_or_load(authority_dir).issue_component(
        Principal(Role.SIDECAR, "storage-1"), other_sidecar
    )
    for directory in (pod_dir, other_sidecar):
        with _https(cluster, directory) as impostor:
            answer = impostor.post("/v1/heartbeats", json=forged)
            assert answer.status_code == 403, directory.name
    # Refused heartbeats changed nothing: the pod is still alive.
    assert _wait_alive(cluster)["alive"]
    log = (cluster.logs_dir / "controller.log").read_text()
    assert "refused a heartbeat for storage-0 from sidecar:storage-1" in log
