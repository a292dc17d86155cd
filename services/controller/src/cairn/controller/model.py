"""The cluster state: what operators want (spec) and what the controller has
made so (status), as immutable values, and their document form.

The document form is the `CairnCluster` custom resource's JSON (camelCase
fields, `spec` and `status`); the file store keeps the same document, so one
parser serves both stores and `kubectl get cairncluster -o yaml` shows exactly
what the file holds locally.

Nodes are storage pods, named like a StatefulSet's pods (`<prefix>-<ordinal>`):
with `storage_pods = n`, ordinals 0..n-1 are wanted and higher ones are drained
and then released. Shard ids are unique across the cluster (a pod keys its
replicas by id alone).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder

NAMESPACE_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?-(\d+)$")
MAX_REPLICATION_FACTOR = 7
MAX_STORAGE_PODS = 1000
# Status keeps this many recent elections (a bounded history, newest last).
ELECTION_HISTORY = 50

Document = dict[str, Any]


class SpecError(ValueError):
    """A spec (or status) document that cannot be accepted."""


def node_ordinal(name: str) -> int:
    match = NODE_NAME.match(name)
    if match is None:
        raise SpecError(f"node name {name!r} must look like <name>-<ordinal>")
    return int(match.group(2))


# -- spec --------------------------------------------------------------------------


@dataclass(frozen=True)
class NamespaceSpec:
    name: str
    shards: int
    replication_factor: int
    notifications: bool = True
    key_order: KeyOrder = KeyOrder.HIERARCHICAL

    def __post_init__(self) -> None:
        if not NAMESPACE_NAME.match(self.name):
            raise SpecError(f"namespace name {self.name!r} is not a valid name")
        if not 1 <= self.shards <= 1024:
            raise SpecError(f"namespace {self.name!r}: shards must be 1..1024, not {self.shards}")
        if not 1 <= self.replication_factor <= MAX_REPLICATION_FACTOR:
            raise SpecError(
                f"namespace {self.name!r}: replication factor must be "
                f"1..{MAX_REPLICATION_FACTOR}, not {self.replication_factor}"
            )


@dataclass(frozen=True)
class ClusterSpec:
    namespaces: tuple[NamespaceSpec, ...]
    storage_pods: int
    # Node label keys: the members of one ensemble sit on distinct values of each
    # (e.g. "topology.kubernetes.io/zone") whenever enough distinct values exist.
    anti_affinity: tuple[str, ...] = ()
    # Nodes to empty of shards (kept running); see also `storage_pods`.
    drain: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [namespace.name for namespace in self.namespaces]
        if len(set(names)) != len(names):
            raise SpecError(f"namespace names must be unique: {names}")
        if not 1 <= self.storage_pods <= MAX_STORAGE_PODS:
            raise SpecError(f"storage pods must be 1..{MAX_STORAGE_PODS}, not {self.storage_pods}")
        for name in self.drain:
            node_ordinal(name)

    def namespace(self, name: str) -> NamespaceSpec | None:
        return next((ns for ns in self.namespaces if ns.name == name), None)

    def wants_node(self, name: str) -> bool:
        """Whether the node may hold shards: within the pod count and not drained."""
        return node_ordinal(name) < self.storage_pods and name not in self.drain


# -- status ------------------------------------------------------------------------


class ShardState(enum.Enum):
    # Placed, never led yet; the first election makes it steady.
    NEW = "new"
    # Fenced at `term`, no leader chosen yet (or the choice was not confirmed).
    ELECTION = "election"
    STEADY = "steady"


class NodeHealth(enum.Enum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True)
class LastLeader:
    """The leader last chosen for a shard, in `term`: recorded before it is
    told (steps.record_leader), so no later term has had a leader, and kept
    through the elections that fail after it (which choose no one), so that
    the next one still knows whom that leader counted toward its commit
    offset (planner.counted_voters), also after this controller restarted.

    It was handed every member of the ensemble but itself as a follower, and
    those vote from the start of its term. `learners`: the members added
    since (steps.add_member, recorded before the leader hears of them), which
    it counts only once caught up, and that it has not been seen to count
    yet (steps.record_voting). `committed`: it was seen to have committed the
    first entry of its term (planner.term_committed), a fact that never
    changes once true; in an ensemble of an even number of voters, half of
    them may then elect (election.enough_answers), also when only this
    record is left to tell it (steps.record_voting)."""

    term: int
    name: str
    learners: tuple[str, ...] = ()
    committed: bool = False


@dataclass(frozen=True)
class ShardRecord:
    namespace: str
    shard: int
    hash_range: HashRange
    term: int
    state: ShardState
    leader: str | None
    # The members the shard should have (the leader included), in the order they
    # were chosen. An added member is listed here before it is added.
    ensemble: tuple[str, ...]
    # Members being removed: still counted by elections (their votes may be
    # needed) until the leader has dropped them.
    leaving: tuple[str, ...] = ()
    # The commit offset last reported by the leader (informational).
    commit_offset: int = -1
    # (member, incarnation): the incarnation of the data each member is known to
    # hold the shard's committed entries with (see incarnation_of). A member
    # answering with another one lost that data (a wiped disk) and does not count
    # toward an election's majority until its leader has caught it up again.
    incarnations: tuple[tuple[str, int], ...] = ()
    # None in records written before it was kept, and before a first leader.
    last_leader: LastLeader | None = None

    def incarnation_of(self, name: str) -> int | None:
        """The recorded incarnation of `name`'s data; None if none is recorded
        (a member recorded before incarnations were, or one of a pod that does
        not report them): it is taken as intact, as before."""
        return next((value for member, value in self.incarnations if member == name), None)

    def intact(self, name: str, incarnation: int) -> bool:
        """Does `name`, answering with `incarnation` (0: not reported), hold the
        data it is recorded to hold?"""
        recorded = self.incarnation_of(name)
        return recorded is None or incarnation == 0 or incarnation == recorded

    def with_incarnations(self, changes: Mapping[str, int]) -> ShardRecord:
        """Recorded incarnations updated by `changes` (0 values ignored), kept only
        for the shard's voters."""
        values = dict(self.incarnations)
        values.update({name: value for name, value in changes.items() if value})
        voters = set(self.voters)
        kept = tuple(sorted((name, value) for name, value in values.items() if name in voters))
        return replace(self, incarnations=kept)

    @property
    def voters(self) -> tuple[str, ...]:
        """Who an election must hear from a majority of: the members, and those
        still leaving (one change at a time keeps any majority of this union
        overlapping every majority of the leader's actual voters)."""
        return self.ensemble + tuple(name for name in self.leaving if name not in self.ensemble)


@dataclass(frozen=True)
class NodeRecord:
    name: str
    public_address: str
    internal_address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    health: NodeHealth = NodeHealth.UNKNOWN


@dataclass(frozen=True)
class ElectionRecord:
    namespace: str
    shard: int
    term: int
    leader: str
    reason: str
    started_ms: int
    duration_ms: int


@dataclass(frozen=True)
class LeaderMove:
    """An operator's request to move a shard's leadership to `node`."""

    shard: int
    node: str


@dataclass(frozen=True)
class ClusterStatus:
    shards: tuple[ShardRecord, ...] = ()
    nodes: tuple[NodeRecord, ...] = ()
    next_shard_id: int = 0
    # Bumped whenever a leader changes: the shard map pods hand to clients.
    assignments_version: int = 0
    elections: tuple[ElectionRecord, ...] = ()
    leader_moves: tuple[LeaderMove, ...] = ()
    observed_generation: int = 0
    # The epoch (fencing token) of the controller that acts: each controller takes
    # the next one when it takes the leadership, and every status write checks
    # that it is still its own (see cairn.controller.fencing). 0: none taken yet.
    controller_epoch: int = 0

    def shard(self, shard_id: int) -> ShardRecord | None:
        return next((record for record in self.shards if record.shard == shard_id), None)

    def node(self, name: str) -> NodeRecord | None:
        return next((record for record in self.nodes if record.name == name), None)

    def with_shard(self, record: ShardRecord) -> ClusterStatus:
        shards = tuple(s for s in self.shards if s.shard != record.shard)
        return replace(self, shards=tuple(sorted((*shards, record), key=lambda s: s.shard)))

    def with_node(self, record: NodeRecord) -> ClusterStatus:
        nodes = tuple(n for n in self.nodes if n.name != record.name)
        return replace(self, nodes=tuple(sorted((*nodes, record), key=lambda n: n.name)))

    def with_election(self, record: ElectionRecord) -> ClusterStatus:
        return replace(self, elections=(*self.elections, record)[-ELECTION_HISTORY:])


@dataclass(frozen=True)
class ClusterState:
    """One read of the store: both halves, and the version a write must name."""

    spec: ClusterSpec
    status: ClusterStatus
    version: str
    generation: int = 0


# -- documents ---------------------------------------------------------------------


def spec_document(spec: ClusterSpec) -> Document:
    document: Document = {
        "namespaces": [
            {
                "name": ns.name,
                "initialShardCount": ns.shards,
                "replicationFactor": ns.replication_factor,
                "notificationsEnabled": ns.notifications,
                "keySorting": ns.key_order.value,
            }
            for ns in spec.namespaces
        ],
        "storage": {"replicas": spec.storage_pods},
    }
    if spec.anti_affinity:
        document["placement"] = {"antiAffinityLabels": list(spec.anti_affinity)}
    if spec.drain:
        document["drain"] = list(spec.drain)
    return document


def _field(document: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    value = document.get(name, default)
    if value is None and default is None:
        raise SpecError(f"missing field {name!r}")
    if kind is int and isinstance(value, bool):
        raise SpecError(f"field {name!r} must be an integer")
    if not isinstance(value, kind):
        raise SpecError(f"field {name!r} must be {kind.__name__}, not {type(value).__name__}")
    return value


def parse_spec(document: Mapping[str, Any]) -> ClusterSpec:
    try:
        namespaces = tuple(
            NamespaceSpec(
                name=_field(ns, "name", str),
                shards=_field(ns, "initialShardCount", int),
                replication_factor=_field(ns, "replicationFactor", int),
                notifications=_field(ns, "notificationsEnabled", bool, True),
                key_order=KeyOrder(_field(ns, "keySorting", str, KeyOrder.HIERARCHICAL.value)),
            )
            for ns in _field(document, "namespaces", list)
        )
        storage = _field(document, "storage", dict)
        placement = _field(document, "placement", dict, {})
        return ClusterSpec(
            namespaces=namespaces,
            storage_pods=_field(storage, "replicas", int),
            anti_affinity=tuple(_strings(_field(placement, "antiAffinityLabels", list, []))),
            drain=tuple(_strings(_field(document, "drain", list, []))),
        )
    except (TypeError, AttributeError) as error:
        raise SpecError(f"malformed spec: {error}") from None
    except ValueError as error:
        raise SpecError(str(error)) from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise SpecError(f"expected a string, got {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(f"labels must be a mapping, got {value!r}")
    return {_text(key): _text(item) for key, item in value.items()}


def _incarnations(value: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise SpecError(f"incarnations must be a mapping, got {value!r}")
    pairs = []
    for name, incarnation in value.items():
        if isinstance(incarnation, bool) or not isinstance(incarnation, int):
            raise SpecError(f"incarnation of {name!r} must be an integer, got {incarnation!r}")
        if not 0 < incarnation < 2**63:
            raise SpecError(f"incarnation of {name!r} out of range: {incarnation}")
        pairs.append((_text(name), incarnation))
    return tuple(sorted(pairs))


def _last_leader_document(last: LastLeader) -> Document:
    return {
        "term": last.term,
        "name": last.name,
        "learners": list(last.learners),
        **({"committed": True} if last.committed else {}),
    }


def _last_leader(value: Any) -> LastLeader | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError(f"lastLeader must be a mapping, got {value!r}")
    term = value.get("term")
    if isinstance(term, bool) or not isinstance(term, int) or not 0 <= term < 2**63:
        raise SpecError(f"lastLeader term must be a non-negative integer, got {term!r}")
    learners = value.get("learners", [])
    if not isinstance(learners, list):
        raise SpecError(f"lastLeader learners must be a list, got {learners!r}")
    committed = value.get("committed", False)
    if not isinstance(committed, bool):
        raise SpecError(f"lastLeader committed must be a boolean, got {committed!r}")
    return LastLeader(
        term=term,
        name=_text(value.get("name")),
        learners=tuple(_strings(learners)),
        committed=committed,
    )


def _strings(values: Iterable[Any]) -> list[str]:
    strings = list(values)
    if not all(isinstance(value, str) for value in strings):
        raise SpecError(f"expected strings, got {strings!r}")
    return strings


def status_document(status: ClusterStatus) -> Document:
    return {
        "observedGeneration": status.observed_generation,
        "controllerEpoch": status.controller_epoch,
        "nextShardId": status.next_shard_id,
        "assignmentsVersion": status.assignments_version,
        "shards": [
            {
                "namespace": s.namespace,
                "id": s.shard,
                "hashRange": {"min": s.hash_range.min_inclusive, "max": s.hash_range.max_inclusive},
                "term": s.term,
                "state": s.state.value,
                "leader": s.leader,
                "ensemble": list(s.ensemble),
                "leaving": list(s.leaving),
                "commitOffset": s.commit_offset,
                **({"incarnations": dict(s.incarnations)} if s.incarnations else {}),
                **(
                    {"lastLeader": _last_leader_document(s.last_leader)}
                    if s.last_leader is not None
                    else {}
                ),
            }
            for s in status.shards
        ],
        "nodes": [
            {
                "name": n.name,
                "publicAddress": n.public_address,
                "internalAddress": n.internal_address,
                "labels": dict(n.labels),
                "health": n.health.value,
            }
            for n in status.nodes
        ],
        "elections": [
            {
                "namespace": e.namespace,
                "shard": e.shard,
                "term": e.term,
                "leader": e.leader,
                "reason": e.reason,
                "startedMs": e.started_ms,
                "durationMs": e.duration_ms,
            }
            for e in status.elections
        ],
        "leaderMoves": [{"shard": m.shard, "node": m.node} for m in status.leader_moves],
    }


def parse_status(document: Mapping[str, Any]) -> ClusterStatus:
    if not document:
        return ClusterStatus()
    try:
        return ClusterStatus(
            shards=tuple(
                ShardRecord(
                    namespace=_text(s["namespace"]),
                    shard=int(s["id"]),
                    hash_range=HashRange(int(s["hashRange"]["min"]), int(s["hashRange"]["max"])),
                    term=int(s["term"]),
                    state=ShardState(s["state"]),
                    leader=_optional_text(s.get("leader")),
                    ensemble=tuple(_strings(s["ensemble"])),
                    leaving=tuple(_strings(s.get("leaving", ()))),
                    commit_offset=int(s.get("commitOffset", -1)),
                    incarnations=_incarnations(s.get("incarnations", {})),
                    last_leader=_last_leader(s.get("lastLeader")),
                )
                for s in document.get("shards", ())
            ),
            nodes=tuple(
                NodeRecord(
                    name=_text(n["name"]),
                    public_address=_text(n["publicAddress"]),
                    internal_address=_text(n["internalAddress"]),
                    labels=_labels(n.get("labels", {})),
                    health=NodeHealth(n.get("health", NodeHealth.UNKNOWN.value)),
                )
                for n in document.get("nodes", ())
            ),
            next_shard_id=int(document.get("nextShardId", 0)),
            assignments_version=int(document.get("assignmentsVersion", 0)),
            elections=tuple(
                ElectionRecord(
                    namespace=_text(e["namespace"]),
                    shard=int(e["shard"]),
                    term=int(e["term"]),
                    leader=_text(e["leader"]),
                    reason=_text(e["reason"]),
                    started_ms=int(e["startedMs"]),
                    duration_ms=int(e["durationMs"]),
                )
                for e in document.get("elections", ())
            ),
            leader_moves=tuple(
                LeaderMove(int(m["shard"]), _text(m["node"]))
                for m in document.get("leaderMoves", ())
            ),
            observed_generation=int(document.get("observedGeneration", 0)),
            controller_epoch=int(document.get("controllerEpoch", 0)),
        )
    except SpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SpecError(f"malformed status: {error!r}") from None


def default_spec(
    shards: int = 3, replication_factor: int = 3, storage_pods: int = 3
) -> ClusterSpec:
    return ClusterSpec(
        namespaces=(NamespaceSpec("default", shards, replication_factor),),
        storage_pods=storage_pods,
    )
