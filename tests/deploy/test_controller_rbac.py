"""The controller, with only the rendered Role's permissions (the fake API server
enforces them, 403 otherwise), scales the storage StatefulSet out and in through
the CairnCluster: out at once, in only once the pod going away holds no shard.
Every rule of the Role is used (it grants nothing the controller does not do),
and taking one permission away makes the scale-out fail.

The test plays the StatefulSet controller and the kubelet: it starts a real
storage process, and adds its Pod object, for every ordinal below the
StatefulSet's replicas, and stops both beyond them; the sidecars' heartbeats are
fed to the controller's observer directly (the sidecar has its own tests)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest

from cairn.common.heartbeat import Heartbeat
from cairn.controller.api import create_app
from cairn.controller.kube_pods import PodWatcher
from cairn.controller.kube_scale import StatefulSetScale
from cairn.controller.model import default_spec
from cairn.controller.observer import DetectionSettings
from cairn.controller.planner import PlannerSettings
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.kube_store import KubernetesLeaderLock, KubernetesStateStore
from support.fake_kube import STATEFULSETS, FakeKubeServer, Object
from support.manifests import find, render
from support.processes import NodeProcess

GROUP, VERSION, PLURAL, NAME, NAMESPACE = "cairn.dev", "v1", "cairnclusters", "cairn", "default"
STATEFULSET = "cairn-storage"
LABELS = {"app.kubernetes.io/name": "cairn", "app.kubernetes.io/component": "storage"}
CONTROLLER_AGENT = "cairn-controller"


def rendered_role() -> Object:
    return find(render("production"), "Role", "cairn-controller")


def rendered_selector() -> str:
    """The --pod-selector the rendered controller Deployment passes."""
    deployment = find(render("production"), "Deployment", "cairn-controller")
    for arg in deployment["spec"]["template"]["spec"]["containers"][0]["args"]:
        if arg.startswith("--pod-selector="):
            return str(arg.split("=", 1)[1])
    raise AssertionError("the controller Deployment passes no --pod-selector")


def granted(role: Object) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def without(role: Object, group: str, resource: str, verb: str) -> Object:
    """The Role less one permission."""
    smaller = copy.deepcopy(role)
    for rule in smaller["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    smaller["rules"] = [rule for rule in smaller["rules"] if rule["verbs"]]
    assert granted(smaller) == granted(role) - {(group, resource, verb)}
    return smaller


def cluster_object(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CairnCluster",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "namespaces": [{"name": "default", "initialShardCount": 4, "replicationFactor": 2}],
            "storage": {"replicas": replicas},
        },
    }


def statefulset_replicas(fake: FakeKubeServer) -> int:
    return int(fake.get(STATEFULSETS, STATEFULSET)["spec"]["replicas"])


def _controller(api: kubernetes.client.ApiClient) -> tuple[Controller, PodWatcher]:
    settings = RuntimeSettings(
        detection=DetectionSettings(heartbeat_timeout_ms=1000, status_interval_ms=300),
        planner=PlannerSettings(rebalance_after_ms=500, replace_after_ms=60_000),
        startup_grace_ms=500,
        pod_count_interval_ms=300,
    )
    controller = Controller(
        KubernetesStateStore(api, NAMESPACE, NAME),
        KubernetesLeaderLock(api, NAMESPACE, f"{NAME}-controller", "controller-0"),
        default_spec(),
        settings,
        pod_count=StatefulSetScale(api, NAMESPACE, STATEFULSET),
    )
    pods = PodWatcher(api, NAMESPACE, rendered_selector(), controller.observer.on_pod)
    return controller, pods


class Kubelet:
    """The StatefulSet controller and kubelet, played by the test: pods follow
    the StatefulSet's replicas. On each removal it records the shards' voters as
    the CairnCluster's status had them at that moment."""

    def __init__(self, fake: FakeKubeServer, tmp_path: Path) -> None:
        self.fake = fake
        self.tmp_path = tmp_path
        self.nodes: dict[int, NodeProcess] = {}
        self.voters_at_removal: dict[str, set[str]] = {}

    def name(self, ordinal: int) -> str:
        return f"{STATEFULSET}-{ordinal}"

    async def follow(self, controller: Controller) -> None:
        while True:
            replicas = await asyncio.to_thread(statefulset_replicas, self.fake)
            for ordinal in range(replicas):
                if ordinal not in self.nodes:
                    node = NodeProcess(self.tmp_path / self.name(ordinal))
                    await asyncio.to_thread(node.start)
                    self.nodes[ordinal] = node
                    self.fake.add_pod(self.name(ordinal), labels=LABELS)
            for ordinal in sorted(self.nodes, reverse=True):
                if ordinal >= replicas:
                    cluster = self.fake.get(self.fake.cairn_clusters, NAME)
                    self.voters_at_removal[self.name(ordinal)] = {
                        voter
                        for shard in cluster["status"]["shards"]
                        for voter in [*shard["ensemble"], *shard.get("leaving", [])]
                    }
                    self.fake.delete_pod(self.name(ordinal))
                    await asyncio.to_thread(self.nodes.pop(ordinal).stop)
            for ordinal, node in self.nodes.items():
                controller.observer.on_heartbeat(
                    Heartbeat(self.name(ordinal), node.address, node.internal_address, True, 0)
                )
            await asyncio.sleep(0.2)

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill()


async def _wait(
    fake: FakeKubeServer, condition: Callable[[Object], bool], what: str, timeout_s: float = 60
) -> Object:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        cluster = fake.get(fake.cairn_clusters, NAME)
        if condition(cluster):
            return cluster
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{what}: {cluster.get('status')}")
        await asyncio.sleep(0.1)


def _members(cluster: Object) -> set[str]:
    return {
        member
        for shard in (cluster.get("status") or {}).get("shards", [])
        for member in [*shard["ensemble"], *shard.get("leaving", [])]
    }


def _steady_on(cluster: Object, pods: set[str]) -> bool:
    status = cluster.get("status") or {}
    shards = status.get("shards", [])
    return (
        len(shards) == 4
        and all(s["state"] == "steady" and len(s["ensemble"]) == 2 for s in shards)
        and all(not s.get("leaving") for s in shards)
        and _members(cluster) <= pods
        and status.get("observedGeneration") == cluster["metadata"]["generation"]
    )


@pytest.mark.e2e
def test_with_only_the_role_s_permissions_the_controller_scales_out_and_in(
    tmp_path: Path,
) -> None:
    role = rendered_role()
    with FakeKubeServer() as fake:
        fake.enforce_role(role, user_agent=CONTROLLER_AGENT, namespace=NAMESPACE)
        objects = kubernetes.client.CustomObjectsApi(fake.api_client("admin"))
        objects.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, cluster_object(replicas=2)
        )
        fake.add_statefulset(STATEFULSET, replicas=2, labels=LABELS)
        kubelet = Kubelet(fake, tmp_path)
        try:
            asyncio.run(_scale_out_and_in(fake, objects, kubelet))
        finally:
            kubelet.kill_all()
        assert fake.forbidden() == []
        assert fake.internal_errors == []
        # Exactly: every permission granted was used.
        assert fake.authorized(CONTROLLER_AGENT) == granted(role)


async def _scale_out_and_in(
    fake: FakeKubeServer, objects: kubernetes.client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    controller, pods = _controller(fake.api_client(CONTROLLER_AGENT))
    pods.start(asyncio.get_running_loop())
    run = asyncio.create_task(controller.run())
    follow = asyncio.create_task(kubelet.follow(controller))
    first_two = {kubelet.name(0), kubelet.name(1)}
    try:
        await _wait(fake, lambda c: _steady_on(c, first_two), "placed on two pods")
        # Scale out, as `kubectl patch cairncluster cairn` would: at once.
        await asyncio.to_thread(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            NAME,
            {"spec": {"storage": {"replicas": 3}}},
        )
        # "At once": on the spec change, not after any drain or placement (the
        # bound is generous for a loaded CI machine).
        for _ in range(150):
            if statefulset_replicas(fake) == 3:
                break
            await asyncio.sleep(0.1)
        assert statefulset_replicas(fake) == 3, "the StatefulSet did not grow within 15 s"
        third = kubelet.name(2)
        await _wait(
            fake,
            lambda c: third in _members(c) and _steady_on(c, {*first_two, third}),
            "the third pod given shards",
        )
        # Scale in through the admin API (it rewrites the CairnCluster's spec):
        # the StatefulSet keeps the third pod until it holds nothing.
        transport = httpx.ASGITransport(app=create_app(controller))
        async with httpx.AsyncClient(transport=transport, base_url="http://controller") as admin:
            answer = await admin.put("/v1/storage-pods", json={"replicas": 2})
            assert answer.status_code == 200, answer.text
        assert statefulset_replicas(fake) == 3
        await _wait(fake, lambda c: _steady_on(c, first_two), "drained off the third pod")
        for _ in range(100):
            if statefulset_replicas(fake) == 2 and third in kubelet.voters_at_removal:
                break
            await asyncio.sleep(0.1)
        assert statefulset_replicas(fake) == 2, "the StatefulSet did not shrink"
        assert third not in kubelet.voters_at_removal[third], "removed while holding shards"
        await _wait(fake, lambda c: _steady_on(c, first_two), "steady on two pods")
    finally:
        follow.cancel()
        run.cancel()
        await asyncio.gather(follow, run, return_exceptions=True)
        pods.stop()
        await controller.close()


@pytest.mark.parametrize(
    "missing",
    [
        ("apps", "statefulsets/scale", "patch"),
        ("coordination.k8s.io", "leases", "create"),
    ],
    ids=lambda permission: "-".join(permission),
)
def test_a_permission_missing_from_the_role_fails_the_scale_out(
    missing: tuple[str, str, str],
) -> None:
    with FakeKubeServer() as fake:
        fake.enforce_role(
            without(rendered_role(), *missing), user_agent=CONTROLLER_AGENT, namespace=NAMESPACE
        )
        objects = kubernetes.client.CustomObjectsApi(fake.api_client("admin"))
        objects.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, cluster_object(replicas=3)
        )
        fake.add_statefulset(STATEFULSET, replicas=1, labels=LABELS)
        asyncio.run(_run_for(fake, seconds=3.0))
        assert statefulset_replicas(fake) == 1
        assert missing in fake.forbidden(CONTROLLER_AGENT)
        assert fake.internal_errors == []


async def _run_for(fake: FakeKubeServer, seconds: float) -> None:
    controller, pods = _controller(fake.api_client(CONTROLLER_AGENT))
    pods.start(asyncio.get_running_loop())
    run = asyncio.create_task(controller.run())
    try:
        await asyncio.sleep(seconds)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        pods.stop()
        await controller.close()


def test_the_fake_enforces_a_role_for_its_client_only() -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": ["cairn.dev"], "resources": ["cairnclusters"], "verbs": ["get"]}],
    }
    with FakeKubeServer() as fake:
        fake.enforce_role(role, user_agent="reader")
        admin = kubernetes.client.CustomObjectsApi(fake.api_client("admin"))
        admin.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, cluster_object(replicas=1)
        )
        reader = kubernetes.client.CustomObjectsApi(fake.api_client("reader"))
        assert reader.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME)
        with pytest.raises(kubernetes.client.ApiException) as refused:
            reader.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert 'cannot list resource "cairnclusters" in API group "cairn.dev"' in message
        # The subresource is a resource of its own.
        with pytest.raises(kubernetes.client.ApiException) as status_refused:
            reader.get_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, NAME)
        assert status_refused.value.status == 403
        # Another namespace is beyond the binding's reach.
        with pytest.raises(kubernetes.client.ApiException) as elsewhere:
            reader.get_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, NAME)
        assert elsewhere.value.status == 403
        assert fake.forbidden("reader") == [
            ("cairn.dev", "cairnclusters", "list"),
            ("cairn.dev", "cairnclusters/status", "get"),
            ("cairn.dev", "cairnclusters", "get"),
        ]
        assert fake.authorized("reader") == {("cairn.dev", "cairnclusters", "get")}
