"""The gateway in a whole local cluster (`cairn-local`, real processes): the
launcher runs and restarts it, the admin views are the controller's, and the
admin actions (move a leader, change a replication factor, scale the storage
pods, drain) go through the controller and happen. Each action is undone
before the test ends (the cluster is shared with the schemathesis run)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.helpers import LocalClusterProcess, problem, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def gw(cluster: LocalClusterProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster.banner.gateway_url, timeout=60.0) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, 60)
        wait_until(lambda: steady(client), 60)
        yield client


@pytest.fixture
def controller(cluster: LocalClusterProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster.banner.admin_url, timeout=30.0) as client:
        yield client


def steady(client: httpx.Client) -> bool:
    shards = client.get("/v1/admin/shards").json()
    return all(s["state"] == "steady" and s["leader"] for s in shards)


def shards(client: httpx.Client) -> list[dict[str, Any]]:
    answer = client.get("/v1/admin/shards")
    assert answer.status_code == 200, answer.text
    result: list[dict[str, Any]] = answer.json()
    return result


def test_the_launcher_runs_and_restarts_the_gateway(
    cluster: LocalClusterProcess, gw: httpx.Client
) -> None:
    banner = cluster.banner
    assert banner.gateway_url.startswith("http://127.0.0.1:")
    ports = (cluster.directory / "ports.json").read_text()
    assert f'"gateway": {banner.gateway_url.rsplit(":", 1)[1]}' in ports
    assert gw.put("/v1/namespaces/default/keys//launcher/k", content=b"v").status_code in (200, 201)
    pid = cluster.processes()["gateway"]
    os.kill(pid, signal.SIGKILL)
    # Restarted by the launcher, on the same port.
    wait_until(lambda: cluster.processes()["gateway"] != pid, 30)
    wait_until(lambda: _answers(gw, "/v1/namespaces/default/keys//launcher/k"), 30)
    assert gw.get("/v1/namespaces/default/keys//launcher/k").content == b"v"


def _answers(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def test_views_are_the_controllers(gw: httpx.Client, controller: httpx.Client) -> None:
    cluster_view = gw.get("/v1/admin/cluster").json()
    assert cluster_view["spec"]["storage"] == {"replicas": 3}
    assert cluster_view["shards"] == 3 and cluster_view["nodes"] == 3
    assert "placement" not in cluster_view["spec"]  # left out by the controller: not null
    namespaces = gw.get("/v1/admin/namespaces").json()
    assert [ns["name"] for ns in namespaces] == ["default"]
    assert sorted(namespaces[0]["shards"]) == [s["id"] for s in shards(gw)]
    for shard in shards(gw):
        assert shard["leader"] in shard["ensemble"] and len(shard["ensemble"]) == 3
        assert {f["node"] for f in shard["followers"]} <= set(shard["ensemble"])
        assert all(f["lag"] >= 0 for f in shard["followers"])
    nodes = gw.get("/v1/admin/nodes").json()
    assert sorted(n["name"] for n in nodes) == ["storage-0", "storage-1", "storage-2"]
    assert all(n["alive"] and n["wanted"] and not n["draining"] for n in nodes)
    assert sum(n["leaders"] for n in nodes) == 3
    elections = gw.get("/v1/admin/elections").json()
    assert {e["shard"] for e in elections} >= {0, 1, 2}
    # The same documents as the controller's own API (the views are passed on).
    for path in ("cluster", "namespaces", "nodes", "elections"):
        assert gw.get(f"/v1/admin/{path}").json() == controller.get(f"/v1/{path}").json(), path


def test_move_a_leader(gw: httpx.Client) -> None:
    shard = shards(gw)[0]
    target = next(name for name in shard["ensemble"] if name != shard["leader"])
    answer = gw.post(f"/v1/admin/shards/{shard['id']}/leader", json={"node": target})
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"shard": shard["id"], "node": target, "accepted": True}
    wait_until(lambda: shards(gw)[0]["leader"] == target and steady(gw), 60)
    elections = gw.get("/v1/admin/elections").json()
    assert any(e["shard"] == shard["id"] and e["leader"] == target for e in elections)
    # Writes through the gateway follow the leader.
    assert gw.put("/v1/namespaces/default/keys//moved/k", content=b"v").status_code in (200, 201)


def test_change_a_replication_factor(gw: httpx.Client) -> None:
    answer = gw.put(
        "/v1/admin/namespaces/default/replication-factor", json={"replicationFactor": 2}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["spec"]["namespaces"][0]["replicationFactor"] == 2
    try:
        wait_until(lambda: all(_fully_replicated(s, 2) for s in shards(gw)), 90)
    finally:
        restored = gw.put(
            "/v1/admin/namespaces/default/replication-factor", json={"replicationFactor": 3}
        )
        assert restored.status_code == 200
    # Back to three voting members, each followed by the leader.
    wait_until(lambda: all(_fully_replicated(s, 3) for s in shards(gw)) and steady(gw), 90)


def _fully_replicated(shard: dict[str, Any], members: int) -> bool:
    followers = shard["followers"]
    return (
        len(shard["ensemble"]) == members
        and not shard["leaving"]
        and len(followers) == members - 1
        and all(f["voting"] for f in followers)
    )


def test_scale_the_storage_pods(gw: httpx.Client, cluster: LocalClusterProcess) -> None:
    answer = gw.put("/v1/admin/storage-pods", json={"replicas": 4})
    assert answer.status_code == 200, answer.text
    assert answer.json()["spec"]["storage"] == {"replicas": 4}
    try:
        wait_until(
            lambda: any(
                n["name"] == "storage-3" and n["alive"] for n in gw.get("/v1/admin/nodes").json()
            ),
            60,
        )
    finally:
        assert gw.put("/v1/admin/storage-pods", json={"replicas": 3}).status_code == 200
    # The launcher releases the pod once the controller has moved its shards away.
    wait_until(lambda: "storage-3" not in cluster.processes()["pods"], 120)
    wait_until(lambda: steady(gw), 60)


def test_drain_and_undrain(gw: httpx.Client) -> None:
    drained = gw.put("/v1/admin/nodes/storage-2/drain")
    assert drained.status_code == 200, drained.text
    try:
        assert drained.json()["spec"]["drain"] == ["storage-2"]
        node = next(n for n in gw.get("/v1/admin/nodes").json() if n["name"] == "storage-2")
        assert node["draining"] and not node["wanted"]
    finally:
        undrained = gw.delete("/v1/admin/nodes/storage-2/drain")
        assert undrained.status_code == 200
    assert "drain" not in undrained.json()["spec"]
    node = next(n for n in gw.get("/v1/admin/nodes").json() if n["name"] == "storage-2")
    assert not node["draining"]
    wait_until(lambda: steady(gw), 60)


def test_admin_errors(gw: httpx.Client) -> None:
    problem(
        gw.put("/v1/admin/namespaces/nope/replication-factor", json={"replicationFactor": 2}),
        404,
        "namespace-not-found",
    )
    for body in (
        {"replicationFactor": 0},
        {"replicationFactor": 8},
        {},
        {"replicationFactor": "x"},
    ):
        problem(
            gw.put("/v1/admin/namespaces/default/replication-factor", json=body),
            400,
            "invalid-argument",
        )
    for body in ({"replicas": 0}, {"replicas": 1001}, {}):
        problem(gw.put("/v1/admin/storage-pods", json=body), 400, "invalid-argument")
    problem(
        gw.post("/v1/admin/shards/999/leader", json={"node": "storage-0"}), 404, "shard-not-found"
    )
    problem(gw.post("/v1/admin/shards/0/leader", json={"node": "storage-9"}), 409, "conflict")
    problem(gw.post("/v1/admin/shards/0/leader", json={}), 400, "invalid-argument")
    problem(
        gw.post("/v1/admin/shards/-1/leader", json={"node": "storage-0"}), 400, "invalid-argument"
    )
    problem(gw.put("/v1/admin/nodes/not_a_pod/drain"), 404, "node-not-found")
    problem(gw.delete("/v1/admin/nodes/not_a_pod/drain"), 404, "node-not-found")
    problem(gw.get("/v1/admin/nothing"), 404, "not-found")
