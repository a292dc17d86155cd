"""The CairnCluster CRD (kustomize/base/crd.yaml): well formed, structural, and in
step with the documents the model writes and the limits the model enforces."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder
from cairn.controller import model
from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    ElectionRecord,
    LastLeader,
    LeaderMove,
    NamespaceSpec,
    NodeHealth,
    NodeRecord,
    ShardRecord,
    ShardState,
    SpecError,
    default_spec,
    parse_spec,
    parse_status,
    spec_document,
    status_document,
)
from cairn.controller.state import kube_store
from support.fake_kube import CRD_PATH, check_schema, validate

CRD: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
SERVED: dict[str, Any] = CRD["spec"]["versions"][0]
SCHEMA: dict[str, Any] = SERVED["schema"]["openAPIV3Schema"]

RICH_SPEC = ClusterSpec(
    namespaces=(
        NamespaceSpec("default", 1024, model.MAX_REPLICATION_FACTOR),
        NamespaceSpec("a" * 63, 1, 1, notifications=False, key_order=KeyOrder.NATURAL),
    ),
    storage_pods=model.MAX_STORAGE_PODS,
    anti_affinity=("topology.kubernetes.io/zone",),
    drain=("cairn-storage-999", "cairn-storage-0"),
)
RICH_STATUS = ClusterStatus(
    shards=(
        ShardRecord(
            "default",
            0,
            HashRange(0, 0xFFFFFFFF),
            term=12,
            state=ShardState.STEADY,
            leader="cairn-storage-1",
            ensemble=("cairn-storage-1", "cairn-storage-2"),
            leaving=("cairn-storage-0",),
            commit_offset=99,
            incarnations=(("cairn-storage-1", 2**63 - 1), ("cairn-storage-2", 7)),
            last_leader=LastLeader(12, "cairn-storage-1", ("cairn-storage-2",), committed=True),
        ),
        ShardRecord("default", 1, HashRange(5, 5), 0, ShardState.NEW, None, ("cairn-storage-3",)),
        ShardRecord(
            "a" * 63,
            2,
            HashRange(0, 1),
            3,
            ShardState.ELECTION,
            None,
            (),
            last_leader=LastLeader(2, "cairn-storage-0"),
        ),
    ),
    nodes=(
        NodeRecord("cairn-storage-0", "a:1", "a:2", {"zone": "z1"}, NodeHealth.UNHEALTHY),
        NodeRecord("cairn-storage-1", "b:1", "b:2", {}, NodeHealth.HEALTHY),
        NodeRecord("cairn-storage-2", "c:1", "c:2"),
    ),
    next_shard_id=3,
    assignments_version=4,
    elections=(ElectionRecord("default", 0, 12, "cairn-storage-1", "moved", 1, 0),),
    leader_moves=(LeaderMove(0, "cairn-storage-2"),),
    observed_generation=2,
)


def custom_object(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = {
        "apiVersion": f"{kube_store.GROUP}/{kube_store.VERSION}",
        "kind": kube_store.KIND,
        "metadata": {"name": "cairn", "namespace": "cairn-system"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or "<root>", node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from schema_nodes(node["items"], f"{path}[*]")


# -- form -------------------------------------------------------------------------


def test_the_crd_defines_the_resource_the_store_uses() -> None:
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["kind"] == "CustomResourceDefinition"
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{kube_store.PLURAL}.{kube_store.GROUP}"
    assert spec["group"] == kube_store.GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == kube_store.KIND
    assert spec["names"]["plural"] == kube_store.PLURAL
    assert spec["names"]["shortNames"] == ["cairn"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        (kube_store.VERSION, True, True)
    ]
    # The status subresource is what keeps status writes from bumping the generation.
    assert SERVED["subresources"] == {"status": {}}


def test_the_schema_is_structural() -> None:
    for path, node in schema_nodes(SCHEMA):
        assert "type" in node, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"]["required"]), path
    # The API server handles metadata itself: the schema may only say it is an object.
    assert SCHEMA["properties"]["metadata"] == {"type": "object"}
    # And the fake's validator enforces every keyword the schema uses.
    check_schema(SCHEMA)


# -- the model's documents ---------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "status"),
    [(default_spec(), ClusterStatus()), (RICH_SPEC, RICH_STATUS)],
    ids=["default", "rich"],
)
def test_the_models_documents_validate_and_round_trip(
    spec: ClusterSpec, status: ClusterStatus
) -> None:
    obj = custom_object(spec_document(spec), status_document(status))
    checked = copy.deepcopy(obj)
    assert validate(SCHEMA, checked) == []
    # Nothing left for the schema to default: the model writes every field.
    assert checked == obj
    assert parse_spec(checked["spec"]) == spec
    assert parse_status(checked["status"]) == status


def test_a_minimal_spec_is_defaulted_as_the_model_parses_it() -> None:
    spec = {
        "namespaces": [{"name": "default", "initialShardCount": 3, "replicationFactor": 3}],
        "storage": {"replicas": 3},
    }
    obj = custom_object(copy.deepcopy(spec))
    assert validate(SCHEMA, obj) == []
    assert parse_spec(obj["spec"]) == parse_spec(spec) == default_spec()


def test_status_conditions_are_optional_standard_conditions() -> None:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "AllShardsLed",
        "message": "every shard has a leader",
        "lastTransitionTime": "2024-05-01T10:00:00Z",
        "observedGeneration": 1,
    }
    status = status_document(ClusterStatus())
    assert "conditions" not in status
    obj = custom_object(spec_document(default_spec()), {**status, "conditions": [condition]})
    assert validate(SCHEMA, obj) == []
    bad = {**condition, "status": "Maybe", "lastTransitionTime": "yesterday"}
    obj = custom_object(spec_document(default_spec()), {**status, "conditions": [bad]})
    assert sorted(cause["field"] for cause in validate(SCHEMA, obj)) == [
        "status.conditions[0].lastTransitionTime",
        "status.conditions[0].status",
    ]


Mutation = Callable[[dict[str, Any]], None]


def _namespace(field: str, value: Any) -> Mutation:
    return lambda spec: spec["namespaces"][0].__setitem__(field, value)


def _set(field: str, value: Any) -> Mutation:
    return lambda spec: spec.__setitem__(field, value)


def _duplicate_namespace(spec: dict[str, Any]) -> None:
    spec["namespaces"].append(copy.deepcopy(spec["namespaces"][0]))


# (what changes, whether the model accepts it): the CRD must agree on each.
SPEC_CASES: list[tuple[str, Mutation, bool]] = [
    ("replication factor 1", _namespace("replicationFactor", 1), True),
    ("replication factor 7", _namespace("replicationFactor", 7), True),
    ("replication factor 0", _namespace("replicationFactor", 0), False),
    ("replication factor 8", _namespace("replicationFactor", 8), False),
    ("1 shard", _namespace("initialShardCount", 1), True),
    ("1024 shards", _namespace("initialShardCount", 1024), True),
    ("0 shards", _namespace("initialShardCount", 0), False),
    ("1025 shards", _namespace("initialShardCount", 1025), False),
    ("shards as text", _namespace("initialShardCount", "3"), False),
    ("shards as a boolean", _namespace("initialShardCount", True), False),
    ("natural key order", _namespace("keySorting", "natural"), True),
    ("unknown key order", _namespace("keySorting", "reverse"), False),
    ("notifications as text", _namespace("notificationsEnabled", "yes"), False),
    ("63-character namespace", _namespace("name", "n" * 63), True),
    ("64-character namespace", _namespace("name", "n" * 64), False),
    ("upper-case namespace", _namespace("name", "Default"), False),
    ("dotted namespace", _namespace("name", "a.b_c-d"), True),
    ("duplicate namespaces", _duplicate_namespace, False),
    ("no namespaces", _set("namespaces", []), True),
    ("1 pod", _set("storage", {"replicas": 1}), True),
    ("1000 pods", _set("storage", {"replicas": 1000}), True),
    ("0 pods", _set("storage", {"replicas": 0}), False),
    ("1001 pods", _set("storage", {"replicas": 1001}), False),
    ("drain a pod", _set("drain", ["cairn-storage-3"]), True),
    ("drain a non-pod", _set("drain", ["cairn-storage"]), False),
    ("anti-affinity labels", _set("placement", {"antiAffinityLabels": ["zone"]}), True),
    ("anti-affinity label not text", _set("placement", {"antiAffinityLabels": [1]}), False),
]


@pytest.mark.parametrize(
    ("mutate", "accepted"),
    [(mutate, accepted) for _, mutate, accepted in SPEC_CASES],
    ids=[name for name, _, _ in SPEC_CASES],
)
def test_the_crd_accepts_exactly_the_specs_the_model_accepts(
    mutate: Mutation, accepted: bool
) -> None:
    spec = spec_document(default_spec())
    mutate(spec)
    try:
        parse_spec(copy.deepcopy(spec))
        model_accepts = True
    except SpecError:
        model_accepts = False
    assert model_accepts == accepted
    causes = validate(SCHEMA, custom_object(spec))
    assert (causes == []) == accepted, causes


def _shard(field: str, value: Any) -> Mutation:
    return lambda status: status["shards"][0].__setitem__(field, value)


def _last(status: dict[str, Any]) -> dict[str, Any]:
    last: dict[str, Any] = status["shards"][0]["lastLeader"]
    return last


# parse_status does not check that names and labels are text (the CRD does), so
# only the checks both make are compared.
STATUS_CASES: list[tuple[str, Mutation, bool]] = [
    ("unknown shard state", _shard("state", "leading"), False),
    ("hash range past 32 bits", _shard("hashRange", {"min": 0, "max": 2**32}), False),
    ("negative hash", _shard("hashRange", {"min": -1, "max": 5}), False),
    ("no leader", _shard("leader", None), True),
    ("no ensemble", lambda status: status["shards"][0].pop("ensemble"), False),
    ("unknown health", lambda status: status["nodes"][0].__setitem__("health", "dead"), False),
    ("no incarnations", _shard("incarnations", {}), True),
    ("zero incarnation", _shard("incarnations", {"cairn-storage-1": 0}), False),
    ("text incarnation", _shard("incarnations", {"cairn-storage-1": "7"}), False),
    ("no last leader", lambda status: status["shards"][0].pop("lastLeader"), True),
    ("last leader without learners", lambda status: _last(status).pop("learners"), True),
    ("last leader without a name", lambda status: _last(status).pop("name"), False),
    ("last leader without a term", lambda status: _last(status).pop("term"), False),
    ("negative last leader term", lambda status: _last(status).__setitem__("term", -1), False),
    ("text last leader term", lambda status: _last(status).__setitem__("term", "12"), False),
    ("learners not a list", lambda status: _last(status).__setitem__("learners", "x"), False),
    ("last leader not known to commit", lambda status: _last(status).pop("committed"), True),
    ("text committed", lambda status: _last(status).__setitem__("committed", "true"), False),
]


@pytest.mark.parametrize(
    ("mutate", "accepted"),
    [(mutate, accepted) for _, mutate, accepted in STATUS_CASES],
    ids=[name for name, _, _ in STATUS_CASES],
)
def test_the_crd_accepts_exactly_the_statuses_the_model_accepts(
    mutate: Mutation, accepted: bool
) -> None:
    status = status_document(RICH_STATUS)
    mutate(status)
    try:
        parse_status(copy.deepcopy(status))
        model_accepts = True
    except (SpecError, ValueError):
        model_accepts = False
    assert model_accepts == accepted
    causes = validate(SCHEMA, custom_object(spec_document(default_spec()), status))
    assert (causes == []) == accepted, causes


# -- printer columns -----------------------------------------------------------------

# Object metadata the API server always serves, by JSONPath, with its column type.
METADATA_COLUMNS = {
    ".metadata.name": "string",
    ".metadata.namespace": "string",
    ".metadata.generation": "integer",
    ".metadata.creationTimestamp": "date",
}
JSONPATH_STEP = re.compile(r'\.([A-Za-z0-9_]+)|\[\?\(@\.([A-Za-z0-9_]+)=="[^"]*"\)\]')


def schema_at(json_path: str) -> dict[str, Any]:
    """The schema node a printer column's JSONPath reads (fields and == filters)."""
    node = SCHEMA
    position = 0
    while position < len(json_path):
        step = JSONPATH_STEP.match(json_path, position)
        assert step is not None, f"cannot follow {json_path!r} at {json_path[position:]!r}"
        field, filtered_by = step.groups()
        if field is not None:
            assert field in node.get("properties", {}), f"{json_path}: no field {field!r}"
            node = node["properties"][field]
        else:
            assert node["type"] == "array", f"{json_path}: a filter on a non-list"
            node = node["items"]
            assert filtered_by in node["properties"], f"{json_path}: no field {filtered_by!r}"
        position = step.end()
    return node


def column_type(node: dict[str, Any]) -> str:
    if node["type"] == "string" and node.get("format") == "date-time":
        return "date"
    return str(node["type"])


def test_printer_columns_read_fields_of_the_schema_with_their_types() -> None:
    columns = SERVED["additionalPrinterColumns"]
    names = [column["name"] for column in columns]
    assert len(set(names)) == len(names)
    assert {"Replicas", "Age"} <= set(names)
    for column in columns:
        path = column["jsonPath"]
        if path in METADATA_COLUMNS:
            assert column["type"] == METADATA_COLUMNS[path], column
        else:
            assert path.startswith((".spec.", ".status.")), column
            assert column["type"] == column_type(schema_at(path)), column
