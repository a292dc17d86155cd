"""The sidecar's decisions, free of I/O: what its probes of the pod amount to,
the heartbeat it sends, and whether the pod is live and ready (with reasons).

Times are monotonic seconds (`*_s`) handed in by the caller, so that every
decision can be tested without a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.common.heartbeat import FollowerReport, Heartbeat, ReplicaReport, replica_report_of
from cairn.proto import replication_pb2 as rpb

# Roles in which a replica takes part in its shard (the others wait for the
# controller: "fenced" after NewTerm or a restart, "not_member" when unknown).
LEADER = "leader"
FOLLOWER = "follower"
SERVING_ROLES = frozenset({LEADER, FOLLOWER})


# -- from the pod's answer -----------------------------------------------------------


@dataclass(frozen=True)
class PodStatus:
    """What one successful probe (Coordination.GetStatus) saw."""

    public_address: str
    internal_address: str
    replicas: tuple[ReplicaReport, ...] = ()


def pod_status_of(response: rpb.GetStatusResponse) -> PodStatus:
    """The answer to GetStatus of every shard."""
    return PodStatus(
        public_address=response.node.public_address,
        internal_address=response.node.internal_address,
        replicas=tuple(
            sorted((replica_report_of(s) for s in response.shards), key=lambda r: r.shard)
        ),
    )


# -- what the probes amount to ------------------------------------------------------


@dataclass(frozen=True)
class ProbeRecord:
    """The sidecar's knowledge of its pod after the probes so far."""

    # When the latest probe ended (None: none has yet).
    last_probe_at_s: float | None = None
    last_probe_ok: bool = False
    # Why the latest probe failed ("" if it did not).
    last_error: str = ""
    last_success_at_s: float | None = None
    # As of the last successful probe (None: none has succeeded yet).
    pod: PodStatus | None = None

    def after_success(self, pod: PodStatus, at_s: float) -> ProbeRecord:
        return ProbeRecord(at_s, True, "", at_s, pod)

    def after_failure(self, error: str, at_s: float) -> ProbeRecord:
        return dataclasses.replace(
            self, last_probe_at_s=at_s, last_probe_ok=False, last_error=error
        )

    @property
    def storage_reachable(self) -> bool:
        return self.last_probe_ok


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...] = ()


def liveness(record: ProbeRecord, now_s: float, liveness_failure_ms: int) -> Verdict:
    """Live unless the pod has failed every probe for longer than
    `liveness_failure_ms` since its last success (the kubelet then restarts it).

    Before any success the pod counts as live: it may be replaying its log, and
    restarting it would only start that over (a startup probe covers a pod that
    never comes up)."""
    if record.last_probe_ok or record.last_success_at_s is None:
        return Verdict(True)
    failing_ms = round((now_s - record.last_success_at_s) * 1000)
    if failing_ms <= liveness_failure_ms:
        return Verdict(True)
    return Verdict(
        False,
        (
            f"no successful probe for {failing_ms} ms (limit {liveness_failure_ms} ms): "
            f"{record.last_error}",
        ),
    )


def follower_lag(leader: ReplicaReport, follower: FollowerReport) -> int:
    """How many entries the leader has committed that the follower has not
    acknowledged as durable (0 when it is ahead of the commit offset)."""
    return max(0, leader.commit_offset - follower.acked_offset)


def readiness(record: ProbeRecord, max_lag_entries: int) -> Verdict:
    """Ready when the latest probe succeeded, every hosted replica has a role, and
    every leader's voting followers are within `max_lag_entries` of its commit.

    Followers that do not vote yet are still catching up by design; they do not
    hold the shard's majority, so they do not count."""
    if record.pod is None:
        reason = "no successful probe yet"
        if record.last_error:
            reason += f": {record.last_error}"
        return Verdict(False, (reason,))
    if not record.last_probe_ok:
        return Verdict(False, (f"storage unreachable: {record.last_error}",))
    reasons: list[str] = []
    for replica in record.pod.replicas:
        if replica.role not in SERVING_ROLES:
            reasons.append(f"shard {replica.shard}: {replica.role}, not leader or follower")
            continue
        if replica.role != LEADER:
            continue
        for follower in replica.followers:
            lag = follower_lag(replica, follower)
            if follower.voting and lag > max_lag_entries:
                reasons.append(
                    f"shard {replica.shard}: follower {follower.internal_address} is {lag} "
                    f"entries behind commit offset {replica.commit_offset} "
                    f"(max {max_lag_entries})"
                )
    return Verdict(not reasons, tuple(reasons))


# -- what the sidecar reports --------------------------------------------------------


def build_heartbeat(
    node: str, labels: Mapping[str, str], record: ProbeRecord, sent_at_ms: int
) -> Heartbeat:
    """The heartbeat for the controller. The addresses are the last known ones (a
    hung pod is still named by them). Replicas are sent only when the latest probe
    succeeded: offsets from an older one would mislead the controller's decisions,
    and `storage_reachable` False already says that nothing is known now."""
    pod = record.pod
    reachable = record.storage_reachable
    return Heartbeat(
        node=node,
        public_address=pod.public_address if pod is not None else "",
        internal_address=pod.internal_address if pod is not None else "",
        storage_reachable=reachable,
        sent_at_ms=sent_at_ms,
        labels=dict(labels),
        replicas=pod.replicas if pod is not None and reachable else (),
    )


def _age_ms(at_s: float | None, now_s: float) -> int | None:
    return None if at_s is None else max(0, round((now_s - at_s) * 1000))


def status_document(
    node: str, record: ProbeRecord, now_s: float, live: Verdict, ready: Verdict
) -> dict[str, Any]:
    """GET /status: for people. Shards are those of the last successful probe,
    however old (`lastSuccessAgeMs` says how old)."""
    pod = record.pod
    return {
        "node": node,
        "publicAddress": pod.public_address if pod is not None else "",
        "internalAddress": pod.internal_address if pod is not None else "",
        "storageReachable": record.storage_reachable,
        "lastProbeAgeMs": _age_ms(record.last_probe_at_s, now_s),
        "lastSuccessAgeMs": _age_ms(record.last_success_at_s, now_s),
        "lastError": record.last_error,
        "live": live.ok,
        "ready": ready.ok,
        "reasons": [*live.reasons, *ready.reasons],
        "shards": [_shard_document(r) for r in (pod.replicas if pod is not None else ())],
    }


def _shard_document(replica: ReplicaReport) -> dict[str, Any]:
    return {
        "shard": replica.shard,
        "namespace": replica.namespace,
        "role": replica.role,
        "term": replica.term,
        "headTerm": replica.head_term,
        "headOffset": replica.head_offset,
        "commitOffset": replica.commit_offset,
        "durableOffset": replica.durable_offset,
        "appliedOffset": replica.applied_offset,
        "leaderInternalAddress": replica.leader_internal_address,
        "followers": [
            {
                "internalAddress": f.internal_address,
                "ackedOffset": f.acked_offset,
                "voting": f.voting,
                "state": f.state,
                "lag": follower_lag(replica, f),
            }
            for f in replica.followers
        ],
    }
