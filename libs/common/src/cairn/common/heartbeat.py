"""What a health sidecar tells the controller about its storage pod.

The sidecar POSTs a `Heartbeat` as JSON to the controller's
`/v1/heartbeats` every heartbeat interval. It is a report, never a source of
truth: the controller decides from it (and its own probes) whether the pod is
alive, and reads offsets from it to judge lag and ensemble changes.

`storage_reachable` is False when the sidecar's last probe of its pod failed
or timed out (a hung pod: its sidecar still beats, but says so). `replicas`
is the pod's own status of every shard replica it hosts, as of that probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.proto import replication_pb2 as rpb

MAX_REPLICAS_PER_HEARTBEAT = 100_000


class HeartbeatError(ValueError):
    pass


@dataclass(frozen=True)
class FollowerReport:
    internal_address: str
    acked_offset: int
    voting: bool
    state: str
    # The incarnation of the follower's data its leader tracks (0: not known).
    incarnation: int = 0


@dataclass(frozen=True)
class ReplicaReport:
    shard: int
    namespace: str
    # "not_member" | "fenced" | "follower" | "leader"
    role: str
    term: int
    head_term: int
    head_offset: int
    commit_offset: int
    durable_offset: int
    applied_offset: int
    # The internal address of the leader it follows or is (empty if none).
    leader_internal_address: str = ""
    followers: tuple[FollowerReport, ...] = ()
    # The incarnation of the replica's data (0: not reported).
    incarnation: int = 0
    # A leader's: the offset of its term's first entry (None: not a leader, or
    # a pod that does not report it). See ShardStatus.term_start_offset.
    term_start_offset: int | None = None
    # The term of the entry at commit_offset (None: unknown). See
    # ShardStatus.commit_term.
    commit_term: int | None = None


@dataclass(frozen=True)
class Heartbeat:
    node: str
    public_address: str
    internal_address: str
    storage_reachable: bool
    sent_at_ms: int
    labels: Mapping[str, str] = field(default_factory=dict)
    replicas: tuple[ReplicaReport, ...] = ()


def role_name(role: int) -> str:
    """The role enum's name, lowercased ("leader"); a role this code does not know
    yet (a newer pod) is still reported rather than failing the probe."""
    try:
        return str(rpb.ReplicaRole.Name(role)).lower()
    except ValueError:
        return f"unknown_{role}"


def replica_report_of(status: rpb.ShardStatus) -> ReplicaReport:
    """A replica's status (from Coordination.GetStatus) as reports carry it."""
    return ReplicaReport(
        shard=status.shard,
        namespace=status.spec.namespace,
        role=role_name(status.role),
        term=status.term,
        head_term=status.head.term,
        head_offset=status.head.offset,
        commit_offset=status.commit_offset,
        durable_offset=status.durable_offset,
        applied_offset=status.applied_offset,
        leader_internal_address=status.leader.internal_address,
        followers=tuple(
            FollowerReport(
                internal_address=follower.node.internal_address,
                acked_offset=follower.acked_offset,
                voting=follower.voting,
                state=follower.state,
                incarnation=follower.incarnation,
            )
            for follower in status.followers
        ),
        incarnation=status.incarnation,
        term_start_offset=(
            status.term_start_offset if status.HasField("term_start_offset") else None
        ),
        commit_term=status.commit_term if status.HasField("commit_term") else None,
    )


def heartbeat_document(heartbeat: Heartbeat) -> dict[str, Any]:
    return {
        "node": heartbeat.node,
        "publicAddress": heartbeat.public_address,
        "internalAddress": heartbeat.internal_address,
        "storageReachable": heartbeat.storage_reachable,
        "sentAtMs": heartbeat.sent_at_ms,
        "labels": dict(heartbeat.labels),
        "replicas": [
            {
                "shard": r.shard,
                "namespace": r.namespace,
                "role": r.role,
                "term": r.term,
                "headTerm": r.head_term,
                "headOffset": r.head_offset,
                "commitOffset": r.commit_offset,
                "durableOffset": r.durable_offset,
                "appliedOffset": r.applied_offset,
                "leaderInternalAddress": r.leader_internal_address,
                "followers": [
                    {
                        "internalAddress": f.internal_address,
                        "ackedOffset": f.acked_offset,
                        "voting": f.voting,
                        "state": f.state,
                        "incarnation": f.incarnation,
                    }
                    for f in r.followers
                ],
                "incarnation": r.incarnation,
                "termStartOffset": r.term_start_offset,
                "commitTerm": r.commit_term,
            }
            for r in heartbeat.replicas
        ],
    }


def parse_heartbeat(document: Mapping[str, Any]) -> Heartbeat:
    """The heartbeat in `document`; HeartbeatError if it is malformed."""
    try:
        replicas = document.get("replicas", [])
        if len(replicas) > MAX_REPLICAS_PER_HEARTBEAT:
            raise HeartbeatError(f"too many replicas in one heartbeat: {len(replicas)}")
        labels = document.get("labels", {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise HeartbeatError("labels must map strings to strings")
        heartbeat = Heartbeat(
            node=_text(document["node"]),
            public_address=_text(document["publicAddress"]),
            internal_address=_text(document["internalAddress"]),
            storage_reachable=bool(document["storageReachable"]),
            sent_at_ms=int(document["sentAtMs"]),
            labels=dict(labels),
            replicas=tuple(
                ReplicaReport(
                    shard=int(r["shard"]),
                    namespace=_text(r["namespace"]),
                    role=_text(r["role"]),
                    term=int(r["term"]),
                    head_term=int(r["headTerm"]),
                    head_offset=int(r["headOffset"]),
                    commit_offset=int(r["commitOffset"]),
                    durable_offset=int(r["durableOffset"]),
                    applied_offset=int(r["appliedOffset"]),
                    leader_internal_address=_text(r.get("leaderInternalAddress", "")),
                    followers=tuple(
                        FollowerReport(
                            internal_address=_text(f["internalAddress"]),
                            acked_offset=int(f["ackedOffset"]),
                            voting=bool(f["voting"]),
                            state=_text(f["state"]),
                            incarnation=int(f.get("incarnation", 0)),
                        )
                        for f in r.get("followers", [])
                    ),
                    incarnation=int(r.get("incarnation", 0)),
                    term_start_offset=_optional_int(r.get("termStartOffset")),
                    commit_term=_optional_int(r.get("commitTerm")),
                )
                for r in replicas
            ),
        )
    except HeartbeatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise HeartbeatError(f"malformed heartbeat: {error!r}") from None
    if not heartbeat.node:
        raise HeartbeatError("a heartbeat must name its node")
    return heartbeat


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise HeartbeatError(f"expected a string, got {type(value).__name__}")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
