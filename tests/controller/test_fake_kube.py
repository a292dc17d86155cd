"""The fake API server behaves like the real one for the official client: the
semantics the Kubernetes state store relies on, checked one by one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes import watch
from kubernetes.client import (
    AppsV1Api,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
    V1Scale,
    V1ScaleSpec,
)
from kubernetes.client.exceptions import ApiException

from cairn.controller.model import default_spec, spec_document
from support.fake_kube import FakeKubeServer

GROUP, VERSION, PLURAL = "cairn.dev", "v1", "cairnclusters"
NS = "cairn-system"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as fake:
        yield fake
    assert fake.internal_errors == []


@pytest.fixture
def objects(server: FakeKubeServer) -> CustomObjectsApi:
    return CustomObjectsApi(server.api_client())


def cluster(name: str = "cairn", **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cairn.dev/v1",
        "kind": "CairnCluster",
        "metadata": {"name": name},
        "spec": spec_document(default_spec()),
        **fields,
    }


def status_of(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    """The Status object the fake answered with, checked for its form."""
    body: dict[str, Any] = json.loads(error.value.body)
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == error.value.status
    return body


def create(objects: CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    return objects.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)


def get(objects: CustomObjectsApi, name: str = "cairn") -> dict[str, Any]:
    return objects.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)


def replace(objects: CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    return objects.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, body)


def replace_status(objects: CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    return objects.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name, body)


def raw(
    server: FakeKubeServer, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    """One plain HTTP request, for what the typed client cannot send or show."""
    response = server.api_client().rest_client.request(
        method, server.url + path, headers={"Content-Type": "application/json"}, body=body
    )
    data = response.read()
    response.response.release_conn()
    return response.status, json.loads(data)


# -- objects, versions and generations ---------------------------------------------


def test_create_sets_server_fields_applies_defaults_and_drops_status(
    objects: CustomObjectsApi,
) -> None:
    body = cluster(status={"nextShardId": 5})
    # As kubectl would write it: the optional fields left out.
    body["spec"]["namespaces"] = [{"name": "x", "initialShardCount": 1, "replicationFactor": 1}]
    created = create(objects, body)
    metadata = created["metadata"]
    assert metadata["namespace"] == NS
    assert metadata["generation"] == 1
    assert metadata["uid"]
    assert metadata["creationTimestamp"].endswith("Z")
    assert int(metadata["resourceVersion"]) > 0
    assert "status" not in created
    assert created["spec"]["namespaces"][0]["notificationsEnabled"] is True
    assert created["spec"]["namespaces"][0]["keySorting"] == "hierarchical"
    assert get(objects) == created


def test_create_twice_is_409_already_exists(objects: CustomObjectsApi) -> None:
    create(objects, cluster())
    with pytest.raises(ApiException) as error:
        create(objects, cluster())
    status = status_of(error)
    assert (status["code"], status["reason"]) == (409, "AlreadyExists")
    assert status["details"] == {"name": "cairn", "group": GROUP, "kind": PLURAL}


def test_a_missing_object_is_404_not_found(objects: CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as error:
        get(objects, "absent")
    status = status_of(error)
    assert (status["code"], status["reason"]) == (404, "NotFound")
    assert status["message"] == 'cairnclusters.cairn.dev "absent" not found'


def test_resource_versions_are_global_and_monotonic(
    server: FakeKubeServer, objects: CustomObjectsApi
) -> None:
    first = create(objects, cluster("a"))
    server.add_pod("storage-0", NS)
    second = create(objects, cluster("b"))
    assert (
        int(second["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 2
    )
    assert server.resource_version == int(second["metadata"]["resourceVersion"])


def test_a_stale_resource_version_is_409_conflict(objects: CustomObjectsApi) -> None:
    created = create(objects, cluster())
    stale = created["metadata"]["resourceVersion"]
    current = replace_status(objects, {**created, "status": {"nextShardId": 1}})
    assert current["metadata"]["resourceVersion"] != stale
    for write in (replace, replace_status):
        body = {**created, "status": {"nextShardId": 2}}
        body["spec"]["storage"] = {"replicas": 4}
        with pytest.raises(ApiException) as error:
            write(objects, body)
        status = status_of(error)
        assert (status["code"], status["reason"]) == (409, "Conflict")
        assert "the object has been modified" in status["message"]
    assert get(objects) == current


def test_a_custom_resource_cannot_be_replaced_without_a_resource_version(
    objects: CustomObjectsApi,
) -> None:
    create(objects, cluster())
    with pytest.raises(ApiException) as error:
        replace(objects, cluster())
    status = status_of(error)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_the_main_resource_ignores_status_and_the_status_subresource_the_rest(
    objects: CustomObjectsApi,
) -> None:
    created = create(objects, cluster())
    # Status changes sent to the main resource are dropped; the spec change is kept.
    body = {**created, "status": {"nextShardId": 9}}
    body["spec"]["storage"] = {"replicas": 5}
    main = replace(objects, body)
    assert main["spec"]["storage"] == {"replicas": 5}
    assert "status" not in main
    assert main["metadata"]["generation"] == 2
    # Spec and label changes sent to /status are dropped; the status is kept.
    body = {**main, "status": {"nextShardId": 9}}
    body["spec"]["storage"] = {"replicas": 7}
    body["metadata"]["labels"] = {"ignored": "yes"}
    status = replace_status(objects, body)
    assert status["status"] == {"nextShardId": 9}
    assert status["spec"]["storage"] == {"replicas": 5}
    assert "labels" not in status["metadata"]
    assert status["metadata"]["generation"] == 2


def test_the_generation_counts_spec_changes_and_a_no_op_keeps_the_version(
    objects: CustomObjectsApi,
) -> None:
    created = create(objects, cluster())
    same = replace(objects, created)
    assert same == created  # nothing changed: same version, no event
    relabelled = replace(objects, {**created, "metadata": {**created["metadata"], "labels": {}}})
    labelled = {**relabelled, "metadata": {**relabelled["metadata"], "labels": {"a": "b"}}}
    labelled = replace(objects, labelled)
    assert labelled["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert labelled["metadata"]["generation"] == 1
    labelled["spec"]["storage"] = {"replicas": 4}
    respecified = replace(objects, labelled)
    assert respecified["metadata"]["generation"] == 2
    status = replace_status(objects, {**respecified, "status": {"observedGeneration": 2}})
    assert status["metadata"]["generation"] == 2


def test_merge_and_json_patches(objects: CustomObjectsApi) -> None:
    created = create(objects, cluster())
    placed = objects.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "cairn", {"spec": {"placement": {"antiAffinityLabels": ["z"]}}}
    )
    assert placed["spec"]["placement"] == {"antiAffinityLabels": ["z"]}
    assert placed["spec"]["storage"] == created["spec"]["storage"]
    assert placed["metadata"]["generation"] == 2
    unplaced = objects.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "cairn", {"spec": {"placement": None}}
    )
    assert "placement" not in unplaced["spec"]
    # A resourceVersion in a patch is a precondition.
    with pytest.raises(ApiException) as error:
        objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "cairn",
            {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}},
        )
    assert status_of(error)["reason"] == "Conflict"
    patched = objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "cairn", {"status": {"nextShardId": 3}, "spec": None}
    )
    assert patched["status"] == {"nextShardId": 3}
    assert patched["spec"] == unplaced["spec"]
    operations = [
        {"op": "test", "path": "/spec/storage/replicas", "value": 3},
        {"op": "replace", "path": "/spec/storage/replicas", "value": 6},
    ]
    patched = objects.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "cairn", operations, _content_type="application/json-patch+json"
    )
    assert patched["spec"]["storage"] == {"replicas": 6}
    with pytest.raises(ApiException) as error:
        objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "cairn",
            operations,
            _content_type="application/json-patch+json",
        )
    assert status_of(error)["code"] == 422


def test_delete_with_preconditions(objects: CustomObjectsApi) -> None:
    created = create(objects, cluster())
    replace_status(objects, {**created, "status": {"nextShardId": 1}})
    with pytest.raises(ApiException) as error:
        objects.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "cairn",
            body={"preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}},
        )
    assert status_of(error)["reason"] == "Conflict"
    deleted = objects.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "cairn")
    assert deleted["status"] == "Success"
    with pytest.raises(ApiException) as error:
        get(objects)
    assert error.value.status == 404


# -- validation against the CRD's schema ---------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return mutate


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.pop(key)


def _duplicate_namespace(spec: dict[str, Any]) -> None:
    spec["namespaces"].append(dict(spec["namespaces"][0]))


@pytest.mark.parametrize(
    ("mutate", "field", "reason"),
    [
        (_set("storage.replicas", 0), "spec.storage.replicas", "FieldValueInvalid"),
        (_set("storage.replicas", 1001), "spec.storage.replicas", "FieldValueInvalid"),
        (_set("storage.replicas", "3"), "spec.storage.replicas", "FieldValueTypeInvalid"),
        (_set("storage.replicas", True), "spec.storage.replicas", "FieldValueTypeInvalid"),
        (
            _set("namespaces.0.replicationFactor", 8),
            "spec.namespaces[0].replicationFactor",
            "FieldValueInvalid",
        ),
        (
            _set("namespaces.0.initialShardCount", 1025),
            "spec.namespaces[0].initialShardCount",
            "FieldValueInvalid",
        ),
        (
            _set("namespaces.0.keySorting", "random"),
            "spec.namespaces[0].keySorting",
            "FieldValueNotSupported",
        ),
        (_set("namespaces.0.name", "Not_Valid"), "spec.namespaces[0].name", "FieldValueInvalid"),
        (_set("drain", ["no-ordinal"]), "spec.drain[0]", "FieldValueInvalid"),
        (_set("unknown", 1), "spec.unknown", "FieldValueForbidden"),
        (_set("storage.size", "1Gi"), "spec.storage.size", "FieldValueForbidden"),
        (_set("placement", None), "spec.placement", "FieldValueTypeInvalid"),
        (_drop("storage"), "spec.storage", "FieldValueRequired"),
        (_duplicate_namespace, "spec.namespaces[1]", "FieldValueDuplicate"),
    ],
)
def test_a_spec_against_the_schema_is_422_invalid(
    objects: CustomObjectsApi,
    mutate: Callable[[dict[str, Any]], None],
    field: str,
    reason: str,
) -> None:
    body = cluster()
    mutate(body["spec"])
    with pytest.raises(ApiException) as error:
        create(objects, body)
    status = status_of(error)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('CairnCluster.cairn.dev "cairn" is invalid: ')
    assert status["details"]["kind"] == "CairnCluster"
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [(field, reason)]


def test_a_status_against_the_schema_is_422_invalid(objects: CustomObjectsApi) -> None:
    created = create(objects, cluster())
    shard = {
        "namespace": "default",
        "id": 0,
        "hashRange": {"min": 0, "max": 2**32},
        "term": 0,
        "state": "leading",
        "ensemble": [],
    }
    with pytest.raises(ApiException) as error:
        replace_status(objects, {**created, "status": {"shards": [shard]}})
    causes = status_of(error)["details"]["causes"]
    assert sorted(cause["field"] for cause in causes) == [
        "status.shards[0].hashRange.max",
        "status.shards[0].state",
    ]


def test_a_body_without_its_kind_is_400(objects: CustomObjectsApi) -> None:
    body = cluster()
    del body["kind"]
    with pytest.raises(ApiException) as error:
        create(objects, body)
    assert status_of(error)["reason"] == "BadRequest"


# -- lists and watches ---------------------------------------------------------------


def test_lists_filter_by_field_and_label_selectors(objects: CustomObjectsApi) -> None:
    for name, tier in (("a", "gold"), ("b", "silver"), ("c", "gold")):
        body = cluster(name)
        body["metadata"]["labels"] = {"tier": tier}
        create(objects, body)

    def names(**selectors: str) -> list[str]:
        listing = objects.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, **selectors)
        assert listing["kind"] == "CairnClusterList"
        return [item["metadata"]["name"] for item in listing["items"]]

    assert names() == ["a", "b", "c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a", "c"]
    assert names(label_selector="tier=gold") == ["a", "c"]
    assert names(label_selector="tier in (silver, bronze)") == ["b"]
    assert names(label_selector="tier,tier notin (gold)") == ["b"]
    assert names(label_selector="!tier") == []
    with pytest.raises(ApiException) as error:
        names(field_selector="spec.storage.replicas=3")
    assert status_of(error)["message"] == "field label not supported: spec.storage.replicas"


def take(stream: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first `count` events of a watch (fewer if it times out first); closing
    the stream early keeps the tests from waiting out the watch's timeout."""
    events: list[dict[str, Any]] = []
    for event in stream:
        events.append(event)
        if len(events) == count:
            break
    return events


def test_a_watch_delivers_changes_after_its_resource_version(
    server: FakeKubeServer, objects: CustomObjectsApi
) -> None:
    created = create(objects, cluster())
    create(objects, cluster("other"))
    events: list[dict[str, Any]] = []
    stream = watch.Watch().stream(
        objects.list_namespaced_custom_object,
        GROUP,
        VERSION,
        NS,
        PLURAL,
        field_selector="metadata.name=cairn",
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )
    watcher = threading.Thread(target=lambda: events.extend(take(stream, 3)))
    watcher.start()
    replace(objects, created)  # a no-op: no event
    status = replace_status(objects, {**created, "status": {"nextShardId": 1}})
    objects.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "cairn")
    recreated = create(objects, cluster())
    watcher.join()
    assert [(e["type"], e["raw_object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("MODIFIED", status["metadata"]["resourceVersion"]),
        ("DELETED", str(int(status["metadata"]["resourceVersion"]) + 1)),
        ("ADDED", recreated["metadata"]["resourceVersion"]),
    ]
    assert events[0]["raw_object"]["status"] == {"nextShardId": 1}


def test_a_watch_without_a_version_starts_with_the_current_objects(
    objects: CustomObjectsApi,
) -> None:
    create(objects, cluster("a"))
    create(objects, cluster("b"))
    events = take(
        watch.Watch().stream(
            objects.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=1
        ),
        2,
    )
    assert [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_a_watch_ends_after_its_timeout(objects: CustomObjectsApi) -> None:
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            objects.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            PLURAL,
            resource_version="1",
            timeout_seconds=1,
        )
    )
    assert events == []
    assert 0.9 <= time.monotonic() - started < 3


def test_ending_watches_ends_open_streams(
    server: FakeKubeServer, objects: CustomObjectsApi
) -> None:
    create(objects, cluster())
    ended = threading.Event()

    def follow() -> None:
        list(
            watch.Watch().stream(
                objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                NS,
                PLURAL,
                resource_version="1",
                timeout_seconds=30,
            )
        )
        ended.set()

    watcher = threading.Thread(target=follow)
    watcher.start()
    time.sleep(0.1)
    server.end_watches()
    assert ended.wait(5)
    watcher.join()


def test_a_watch_from_a_forgotten_version_gets_410_gone(
    server: FakeKubeServer, objects: CustomObjectsApi
) -> None:
    created = create(objects, cluster())
    replace_status(objects, {**created, "status": {"nextShardId": 1}})
    server.compact()
    with pytest.raises(ApiException) as error:
        list(
            watch.Watch().stream(
                objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                NS,
                PLURAL,
                resource_version=created["metadata"]["resourceVersion"],
                timeout_seconds=1,
            )
        )
    assert error.value.status == 410
    # On the wire: a 200 answer whose one event is an ERROR carrying a 410 Status.
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
    query = f"?watch=true&resourceVersion={created['metadata']['resourceVersion']}"
    code, event = raw(server, "GET", path + query)
    assert code == 200
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_the_watch_history_is_bounded(objects: CustomObjectsApi) -> None:
    with FakeKubeServer(history_limit=3) as server:
        objects = CustomObjectsApi(server.api_client())
        created = create(objects, cluster())
        current = created
        for next_shard_id in range(1, 5):
            current = replace_status(objects, {**current, "status": {"nextShardId": next_shard_id}})

        def events_since(version: str) -> list[str]:
            stream = watch.Watch().stream(
                objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                NS,
                PLURAL,
                resource_version=version,
                timeout_seconds=1,
            )
            return [event["raw_object"]["metadata"]["resourceVersion"] for event in take(stream, 2)]

        with pytest.raises(ApiException) as error:
            events_since(created["metadata"]["resourceVersion"])
        assert error.value.status == 410
        recent = int(current["metadata"]["resourceVersion"]) - 2
        assert events_since(str(recent)) == [str(recent + 1), str(recent + 2)]


def test_pod_watches_follow_phase_and_readiness(server: FakeKubeServer) -> None:
    core = CoreV1Api(server.api_client())
    server.add_pod("storage-0", NS, labels={"app": "storage"})
    server.add_pod("other-0", NS, labels={"app": "other"})
    listing = core.list_namespaced_pod(NS, label_selector="app=storage")
    assert [pod.metadata.name for pod in listing.items] == ["storage-0"]
    version = listing.metadata.resource_version
    events: list[tuple[str, Any]] = []
    running: list[tuple[str, Any]] = []

    def follow(selector: str, into: list[tuple[str, Any]]) -> None:
        stream = watch.Watch().stream(
            core.list_namespaced_pod,
            NS,
            label_selector="app=storage",
            field_selector=selector,
            resource_version=version,
            timeout_seconds=1,
        )
        into.extend((event["type"], event["object"]) for event in take(stream, 4))

    watchers = [
        threading.Thread(target=follow, args=("", events)),
        threading.Thread(target=follow, args=("status.phase=Running", running)),
    ]
    for watcher in watchers:
        watcher.start()
    server.add_pod("storage-1", NS, labels={"app": "storage"})
    server.set_pod_status("storage-0", NS, ready=False)
    server.set_pod_status("storage-1", NS, phase="Failed")
    server.delete_pod("storage-0", NS)
    server.set_pod_status("other-0", NS, ready=False)  # not selected
    for watcher in watchers:
        watcher.join()
    assert [(kind, pod.metadata.name) for kind, pod in events] == [
        ("ADDED", "storage-1"),
        ("MODIFIED", "storage-0"),
        ("MODIFIED", "storage-1"),
        ("DELETED", "storage-0"),
    ]
    ready = {c.type: c.status for c in events[1][1].status.conditions}
    assert ready["Ready"] == "False"
    assert events[2][1].status.phase == "Failed"
    # Leaving a field selector reads as a deletion to that watcher.
    assert [(kind, pod.metadata.name) for kind, pod in running] == [
        ("ADDED", "storage-1"),
        ("MODIFIED", "storage-0"),
        ("DELETED", "storage-1"),
        ("DELETED", "storage-0"),
    ]


# -- StatefulSet scale and Leases ----------------------------------------------------


def test_the_statefulset_scale_subresource(server: FakeKubeServer) -> None:
    apps = AppsV1Api(server.api_client())
    server.add_statefulset("cairn-storage", NS, replicas=3)
    scale = apps.read_namespaced_stateful_set_scale("cairn-storage", NS)
    assert scale.spec.replicas == 3
    assert scale.status.selector == "app=cairn-storage"
    scale.spec.replicas = 5
    scaled = apps.replace_namespaced_stateful_set_scale("cairn-storage", NS, scale)
    assert scaled.spec.replicas == 5
    # The scale's resourceVersion is the StatefulSet's: the old one is stale now.
    with pytest.raises(ApiException) as error:
        apps.replace_namespaced_stateful_set_scale("cairn-storage", NS, scale)
    assert error.value.status == 409
    patched = apps.patch_namespaced_stateful_set_scale(
        "cairn-storage", NS, {"spec": {"replicas": 2}}
    )
    assert patched.spec.replicas == 2
    statefulset = apps.read_namespaced_stateful_set("cairn-storage", NS)
    assert statefulset.spec.replicas == 2
    assert statefulset.metadata.generation == 3
    with pytest.raises(ApiException) as error:
        apps.replace_namespaced_stateful_set_scale(
            "cairn-storage",
            NS,
            V1Scale(metadata=V1ObjectMeta(name="cairn-storage"), spec=V1ScaleSpec(replicas=-1)),
        )
    assert error.value.status == 422
    with pytest.raises(ApiException) as error:
        apps.read_namespaced_stateful_set_scale("absent", NS)
    assert error.value.status == 404


def test_leases_with_conflicts_and_micro_times(server: FakeKubeServer) -> None:
    leases = CoordinationV1Api(server.api_client())
    spec = V1LeaseSpec(holder_identity="a", lease_duration_seconds=15)
    created = leases.create_namespaced_lease(
        NS, V1Lease(metadata=V1ObjectMeta(name="lock"), spec=spec)
    )
    assert created.metadata.resource_version
    created.spec.holder_identity = "b"
    updated = leases.replace_namespaced_lease("lock", NS, created)
    assert updated.spec.holder_identity == "b"
    with pytest.raises(ApiException) as error:
        leases.replace_namespaced_lease("lock", NS, created)  # its version is stale now
    assert error.value.status == 409
    # MicroTime is parsed with exactly six fraction digits, as the API server does.
    generic = CustomObjectsApi(server.api_client())
    for renew_time, code in (("2024-05-01T10:00:00.000001Z", 200), ("2024-05-01T10:00:00Z", 400)):
        body = leases.read_namespaced_lease("lock", NS).to_dict()
        body["spec"]["renewTime"] = renew_time
        if code == 200:
            replaced = generic.replace_namespaced_custom_object(
                "coordination.k8s.io", "v1", NS, "leases", "lock", body
            )
            assert replaced["spec"]["renewTime"] == renew_time
        else:
            with pytest.raises(ApiException) as error:
                generic.replace_namespaced_custom_object(
                    "coordination.k8s.io", "v1", NS, "leases", "lock", body
                )
            assert error.value.status == code
    leases.delete_namespaced_lease("lock", NS)
    with pytest.raises(ApiException) as error:
        leases.read_namespaced_lease("lock", NS)
    assert error.value.status == 404


# -- errors and fault injection ------------------------------------------------------


def test_unknown_paths_are_404_with_a_status(server: FakeKubeServer) -> None:
    for path in (
        "/apis/example.com/v1/namespaces/x/widgets",
        f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/cairn/scale",
        "/healthz",
    ):
        code, status = raw(server, "GET", path)
        assert code == 404
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 404, "NotFound")


def test_injected_failures(server: FakeKubeServer, objects: CustomObjectsApi) -> None:
    server.fail_next(2, 503)
    for _ in range(2):
        with pytest.raises(ApiException) as error:
            create(objects, cluster())
        assert (status_of(error)["code"], status_of(error)["reason"]) == (503, "ServiceUnavailable")
    create(objects, cluster())
    # A dropped connection: no answer at all.
    server.fail_next(1, 0, method="POST")
    with pytest.raises(urllib3.exceptions.HTTPError):
        create(objects, cluster("other"))
    # A partition fails one client only, until healed.
    cut_off = CustomObjectsApi(server.api_client("cut-off"))
    server.partition("cut-off", 500)
    with pytest.raises(ApiException) as error:
        get(cut_off)
    assert status_of(error)["reason"] == "InternalError"
    assert get(objects)["metadata"]["name"] == "cairn"
    server.heal("cut-off")
    assert get(cut_off)["metadata"]["name"] == "cairn"
