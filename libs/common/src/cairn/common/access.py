"""Which component may make which internal call: one table, no I/O.

Internal calls are authenticated by mutual TLS; the caller's role comes from
its certificate (cairn.common.identity). The rules:

- Coordination (fence, elect, change ensembles, delete shards, push the shard
  map) only from the controller: a forged NewTerm or DeleteShard is the worst
  thing a stranger could do to a shard.
- GetStatus and the gRPC health service from the controller and the health
  sidecars (both watch the pod); storage pods may also check each other's health.
- GetStateDigest (read-only, for the audit job) from a controller identity.
- Replication (leader to follower) only from storage pods.
- Heartbeats to the controller only from sidecars, each for its own pod.

A method the table does not name is refused: a new internal method is closed
until a rule opens it. The public client API and the controller's admin API
are not here; their rules are per principal and per namespace (issue 39's
authorization rules), not per component.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from cairn.common.identity import Principal, Role

COORDINATION = "/cairn.replication.v1.Coordination/"
REPLICATION = "/cairn.replication.v1.Replication/"
HEALTH = "/grpc.health.v1.Health/"

_CONTROLLER = frozenset({Role.CONTROLLER})
_WATCHERS = frozenset({Role.CONTROLLER, Role.SIDECAR})

# Full method name, or a service prefix ending in "/", -> roles that may call it.
# An exact name wins over its service's prefix.
INTERNAL_GRPC_RULES: Mapping[str, frozenset[Role]] = {
    COORDINATION: _CONTROLLER,
    COORDINATION + "GetStatus": _WATCHERS,
    # Read-only (a digest, no data); the audit job runs with a controller identity.
    COORDINATION + "GetStateDigest": _CONTROLLER,
    REPLICATION: frozenset({Role.STORAGE}),
    HEALTH: frozenset({Role.CONTROLLER, Role.SIDECAR, Role.STORAGE}),
}

HEARTBEAT_ROLES = frozenset({Role.SIDECAR})


class Verdict(Enum):
    ALLOW = "allow"
    # No identity at all: gRPC UNAUTHENTICATED, HTTP 401.
    UNAUTHENTICATED = "unauthenticated"
    # An identity that may not do this: gRPC PERMISSION_DENIED, HTTP 403.
    DENIED = "denied"


def allowed_roles(
    method: str, rules: Mapping[str, frozenset[Role]] = INTERNAL_GRPC_RULES
) -> frozenset[Role]:
    """The roles that may call `method` (`/package.Service/Method`); none if unknown."""
    exact = rules.get(method)
    if exact is not None:
        return exact
    service, _, _ = method.rpartition("/")
    return rules.get(service + "/", frozenset())


def decide_internal_call(
    method: str,
    principal: Principal | None,
    rules: Mapping[str, frozenset[Role]] = INTERNAL_GRPC_RULES,
) -> Verdict:
    if principal is None:
        return Verdict.UNAUTHENTICATED
    if principal.role in allowed_roles(method, rules):
        return Verdict.ALLOW
    return Verdict.DENIED


def decide_heartbeat(principal: Principal | None, node: str) -> Verdict:
    """A heartbeat about `node`: only that pod's own sidecar may send it (its
    certificate names the pod, `spiffe://<domain>/sidecar/<pod>`)."""
    if principal is None:
        return Verdict.UNAUTHENTICATED
    if principal.role in HEARTBEAT_ROLES and principal.name == node:
        return Verdict.ALLOW
    return Verdict.DENIED
