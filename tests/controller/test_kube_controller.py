"""The same controller (planner, executor, observer) with its state in a
`CairnCluster` custom resource on the fake Kubernetes API server, driving real
storage pods: spec changes made with the official client (as `kubectl edit`
would) are picked up through the watch; status writes race a client that keeps
changing the resource, and retry; a deleted pod is a failed node at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from cairn.common.heartbeat import Heartbeat
from cairn.controller.kube_pods import PodWatcher
from cairn.controller.model import ClusterSpec, ClusterState, ClusterStatus, default_spec
from cairn.controller.observer import DetectionSettings
from cairn.controller.planner import PlannerSettings
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.kube_store import KubernetesLeaderLock, KubernetesStateStore
from cairn.controller.state.store import StateConflict
from support.fake_kube import FakeKubeServer
from support.processes import NodeProcess

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL, NAME, NAMESPACE = "cairn.dev", "v1", "cairnclusters", "cairn", "default"
SELECTOR = "app.kubernetes.io/component=storage"


class ConflictCountingStore:
    """The Kubernetes store, counting the status writes refused for a stale
    resourceVersion (which the controller must retry)."""

    def __init__(self, inner: KubernetesStateStore) -> None:
        self.inner = inner
        self.conflicts = 0

    async def create(self, spec: ClusterSpec) -> ClusterState:
        return await self.inner.create(spec)

    async def read(self) -> ClusterState:
        return await self.inner.read()

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        try:
            return await self.inner.write_status(status, version)
        except StateConflict:
            self.conflicts += 1
            raise

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        return await self.inner.write_spec(spec, version)

    def changes(self) -> AsyncIterator[ClusterState]:
        return self.inner.changes()

    async def close(self) -> None:
        await self.inner.close()


def cluster_object(replication_factor: int, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CairnCluster",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "namespaces": [
                {"name": "default", "initialShardCount": 3, "replicationFactor": replication_factor}
            ],
            "storage": {"replicas": replicas},
        },
    }


def test_the_controller_on_kubernetes_follows_spec_edits_and_pod_events(tmp_path: Path) -> None:
    nodes = [NodeProcess(tmp_path / f"pod-{i}") for i in range(4)]
    names = [f"cairn-storage-{i}" for i in range(4)]
    with FakeKubeServer() as fake:
        api = fake.api_client()
        objects = kubernetes.client.CustomObjectsApi(api)
        objects.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, cluster_object(replication_factor=3, replicas=3)
        )
        try:
            for node, name in zip(nodes[:3], names, strict=False):
                node.start()
                fake.add_pod(name, labels={"app.kubernetes.io/component": "storage"})
            asyncio.run(_scenario(fake, api, objects, nodes, names))
        finally:
            for node in nodes:
                node.kill()


def _resource(objects: kubernetes.client.CustomObjectsApi) -> dict[str, Any]:
    resource: dict[str, Any] = objects.get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, NAME
    )
    return resource


async def _wait(
    objects: kubernetes.client.CustomObjectsApi,
    condition: Callable[[dict[str, Any]], bool],
    what: str,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Wait until the resource (as kubectl would show it) satisfies `condition`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        resource = await asyncio.to_thread(_resource, objects)
        if condition(resource):
            return resource
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{what}: {resource.get('status')}")
        await asyncio.sleep(0.1)


def _shards(resource: dict[str, Any]) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = (resource.get("status") or {}).get("shards", [])
    return shards


def _steady_with(resource: dict[str, Any], size: int) -> bool:
    shards = _shards(resource)
    status = resource.get("status") or {}
    return (
        len(shards) == 3
        and all(s["state"] == "steady" and len(s["ensemble"]) == size for s in shards)
        and all(not s["leaving"] for s in shards)
        and status.get("observedGeneration") == resource["metadata"]["generation"]
    )


async def _scenario(
    fake: FakeKubeServer,
    api: kubernetes.client.ApiClient,
    objects: kubernetes.client.CustomObjectsApi,
    nodes: list[NodeProcess],
    names: list[str],
) -> None:
    store = ConflictCountingStore(KubernetesStateStore(api, NAMESPACE, NAME))
    lock = KubernetesLeaderLock(api, NAMESPACE, "cairn-controller", "controller-a")
    settings = RuntimeSettings(
        detection=DetectionSettings(heartbeat_timeout_ms=1000, status_interval_ms=300),
        planner=PlannerSettings(rebalance_after_ms=500),
        startup_grace_ms=500,
    )
    controller = Controller(store, lock, default_spec(), settings)
    pods = PodWatcher(api, NAMESPACE, SELECTOR, controller.observer.on_pod)
    pods.start(asyncio.get_running_loop())
    started = [False] * len(nodes)

    async def heartbeats() -> None:
        # The sidecars' part (their own tests cover them): every started pod beats.
        while True:
            for index, (node, name) in enumerate(zip(nodes, names, strict=True)):
                if node.process is not None and not started[index]:
                    started[index] = True
                if started[index]:
                    controller.observer.on_heartbeat(
                        Heartbeat(name, node.address, node.internal_address, True, 0)
                    )
            await asyncio.sleep(0.2)

    churn_stop = threading.Event()

    def churn() -> None:
        # Another client keeps changing the resource's labels: every change moves
        # its resourceVersion, so the controller's status writes meet conflicts.
        churner = kubernetes.client.CustomObjectsApi(fake.api_client("churner"))
        count = 0
        while not churn_stop.is_set():
            count += 1
            patch = {"metadata": {"labels": {"churn": str(count)}}}
            churner.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, NAME, patch)
            churn_stop.wait(0.02)
        churner.api_client.close()

    run = asyncio.create_task(controller.run())
    beats = asyncio.create_task(heartbeats())
    churner = threading.Thread(target=churn, daemon=True)
    try:
        await _wait(objects, lambda r: _steady_with(r, 3), "first placement")
        churner.start()
        # kubectl patch: replication factor 3 -> 1.
        await asyncio.to_thread(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            NAME,
            {"spec": cluster_object(1, 3)["spec"]},
        )
        await _wait(objects, lambda r: _steady_with(r, 1), "replication factor 1")
        # A fourth pod and replication factor 3 again, in one edit.
        await asyncio.to_thread(nodes[3].start)
        fake.add_pod(names[3], labels={"app.kubernetes.io/component": "storage"})
        await asyncio.to_thread(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            NAME,
            {"spec": cluster_object(3, 4)["spec"]},
        )
        resource = await _wait(
            objects,
            lambda r: _steady_with(r, 3) and any(names[3] in s["ensemble"] for s in _shards(r)),
            "replication factor 3 over four pods",
        )
        churn_stop.set()
        # A pod deleted (evicted, say): its shards get other leaders at once, though
        # its process still runs and its heartbeats still come.
        victim = _shards(resource)[0]["leader"]
        fake.delete_pod(victim)
        await _wait(
            objects,
            lambda r: all(s["leader"] != victim and s["state"] == "steady" for s in _shards(r)),
            f"leaders moved off the deleted pod {victim}",
        )
        lease = kubernetes.client.CoordinationV1Api(api).read_namespaced_lease(
            "cairn-controller", NAMESPACE
        )
        assert lease.spec.holder_identity == "controller-a"
        assert store.conflicts > 0, "the churn never made a status write conflict"
        elections = (await asyncio.to_thread(_resource, objects))["status"]["elections"]
        assert any(victim in e["reason"] for e in elections), elections
    finally:
        churn_stop.set()
        if churner.is_alive():
            churner.join(timeout=10)
        beats.cancel()
        run.cancel()
        await asyncio.gather(beats, run, return_exceptions=True)
        pods.stop()
        await controller.close()
