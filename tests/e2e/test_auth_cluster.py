"""Auth in a whole local cluster (`cairn-local` with its secure default): the
controller's admin API refuses non-admins, the gateway's admin views work for
the admin through the gateway, and a session's owner survives its leader's
crash (the owner is replicated session state, not the old leader's memory)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from cairn.common.auth.tokens import token_digest
from cairn.controller.local.auth import ensure_local_auth
from cairn.gateway.tokens import SessionToken
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from gateway.helpers import LocalClusterProcess, problem, wait_until

pytestmark = pytest.mark.e2e

ALICE, BOB = "alice-cluster-token", "bob-cluster-token"


def test_the_generated_credentials_are_private_and_name_the_admin(tmp_path: Path) -> None:
    auth = ensure_local_auth(tmp_path / "auth")
    for path in (auth.config, auth.admin_token, auth.gateway_token, auth.session_key):
        assert path.stat().st_mode & 0o077 == 0, path
    document = json.loads(auth.config.read_text())
    admin = auth.admin_token.read_text().strip()
    # Only digests are stored.
    assert admin not in auth.config.read_text()
    assert {"sha256": token_digest(admin), "name": "admin"} in document["tokens"]
    # A second start keeps them.
    assert ensure_local_auth(tmp_path / "auth").admin_token.read_text().strip() == admin


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterProcess]:
    directory = tmp_path_factory.mktemp("auth-cluster") / "cluster"
    # The operator's edit of the generated file: two users besides the admin.
    auth = ensure_local_auth(directory / "auth")
    document = json.loads(auth.config.read_text())
    document["tokens"] += [
        {"sha256": token_digest(ALICE), "name": "alice"},
        {"sha256": token_digest(BOB), "name": "bob"},
    ]
    document["rules"].append(
        {"principals": ["alice", "bob"], "namespaces": ["default"], "access": "write"}
    )
    auth.config.write_text(json.dumps(document))
    launcher = LocalClusterProcess(directory, pods=3, shards=1, auth=True)
    try:
        launcher.start()
        yield launcher
    finally:
        launcher.stop(timeout_s=60)


def admin_token(cluster: LocalClusterProcess) -> str:
    return (cluster.directory / "auth" / "admin.token").read_text().strip()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_banner_says_how_to_connect(cluster: LocalClusterProcess) -> None:
    text = cluster.log_text()
    assert "auth:            on" in text
    assert str(cluster.directory / "auth" / "admin.token") in text


def test_the_admin_api_refuses_non_admins(cluster: LocalClusterProcess) -> None:
    url = cluster.banner.admin_url
    with httpx.Client(base_url=url, timeout=30) as anonymous:
        refused = anonymous.get("/v1/cluster")
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.get("/livez").status_code == 200
    with httpx.Client(base_url=url, timeout=30, headers=bearer(ALICE)) as alice:
        assert alice.get("/v1/cluster").status_code == 403
        before = alice.put("/v1/storage-pods", json={"replicas": 1})
        assert before.status_code == 403, before.text
        assert before.json()["status"] == 403
    with httpx.Client(base_url=url, timeout=30, headers=bearer("wrong")) as stranger:
        assert stranger.get("/v1/cluster").status_code == 401
    with httpx.Client(base_url=url, timeout=30, headers=bearer(admin_token(cluster))) as admin:
        cluster_view = admin.get("/v1/cluster")
        assert cluster_view.status_code == 200
        # Alice's refused action changed nothing.
        assert cluster_view.json()["spec"]["storage"]["replicas"] == 3
    # Through the gateway: the caller's identity reaches the controller.
    gateway = cluster.banner.gateway_url
    with httpx.Client(base_url=gateway, timeout=30, headers=bearer(ALICE)) as alice:
        problem(alice.get("/v1/admin/cluster"), 403, "forbidden")
    with httpx.Client(base_url=gateway, timeout=30, headers=bearer(admin_token(cluster))) as admin:
        assert admin.get("/v1/admin/cluster").status_code == 200


def _leader(cluster: LocalClusterProcess) -> tuple[str, int]:
    with httpx.Client(
        base_url=cluster.banner.admin_url, timeout=30, headers=bearer(admin_token(cluster))
    ) as admin:
        shards: list[dict[str, Any]] = admin.get("/v1/shards").json()
    shard = shards[0]
    return str(shard["leader"]), int(shard["term"])


def _public_address(cluster: LocalClusterProcess, pod: str) -> str:
    ports = json.loads((cluster.directory / "ports.json").read_text())
    return f"127.0.0.1:{ports['pods'][pod]['public']}"


def test_a_sessions_owner_survives_its_leaders_crash(cluster: LocalClusterProcess) -> None:
    gateway = cluster.banner.gateway_url
    session_key = (cluster.directory / "auth" / "session.key").read_text().strip().encode()
    with httpx.Client(base_url=gateway, timeout=30, headers=bearer(ALICE)) as alice:
        created = alice.post("/v1/namespaces/default/sessions", json={"timeoutMs": 20_000})
        assert created.status_code == 201, created.text
        token = created.json()["session"]
        lock = "/v1/namespaces/default/keys/locks/leader"
        assert alice.put(lock, params={"session": token}, content=b"a").status_code == 201
    session = SessionToken.decode(token, "default", session_key, "user:alice")
    shard, session_id = next(iter(session.session_ids.items()))
    leader, term = _leader(cluster)
    processes = cluster.processes()
    os.kill(processes["pods"][leader]["storage"], signal.SIGKILL)
    new_leader = wait_until(
        # Between leaders a shard shows the new term and no leader ("None").
        lambda: (lambda now: now[0] if now[0] not in (leader, "None") and now[1] > term else None)(
            _leader(cluster)
        ),
        timeout_s=60,
    )
    heartbeat = pb.SessionHeartbeat(shard=shard, session_id=session_id)
    close = pb.CloseSessionRequest(shard=shard, session_id=session_id)
    with grpc.insecure_channel(_public_address(cluster, new_leader)) as channel:
        stub = pb_grpc.OxiaClientStub(channel)

        def alice_keeps_it_alive() -> bool:
            try:
                stub.KeepAlive(heartbeat, metadata=[("authorization", f"Bearer {ALICE}")])
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.UNAVAILABLE:
                    return False  # the new leader is still taking over
                raise
            return True

        wait_until(alice_keeps_it_alive, timeout_s=30)
        for call in (stub.KeepAlive, stub.CloseSession):
            request = heartbeat if call is stub.KeepAlive else close
            with pytest.raises(grpc.RpcError) as caught:
                call(request, metadata=[("authorization", f"Bearer {BOB}")])
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with httpx.Client(base_url=gateway, timeout=30, headers=bearer(ALICE)) as alice:
        assert alice.get(lock).content == b"a"
        assert alice.delete(f"/v1/namespaces/default/sessions/{token}").status_code == 204
