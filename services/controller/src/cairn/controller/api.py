"""The controller's HTTP API: heartbeats from the health sidecars, and the
admin API that operators, the gateway and the CLI use (OpenAPI at /docs).

Views:   GET /v1/cluster, /v1/namespaces, /v1/shards, /v1/nodes, /v1/elections
Actions: PUT  /v1/namespaces/{name}/replication-factor  {"replicationFactor": n}
         PUT  /v1/storage-pods                          {"replicas": n}
         POST /v1/shards/{id}/leader                    {"node": "storage-1"}
         PUT / DELETE /v1/nodes/{name}/drain
Changes of desired state (replication factor, pod count, drains) are written to
the cluster spec (on Kubernetes: the custom resource's spec, so kubectl and this
API always agree); a leader move is a request recorded in the status.
Every error, validation included, is an RFC 9457 problem document with a stable
`code` (cairn.common.problems, as the gateway answers); a body sent as anything
but JSON is refused with 415 (one with no Content-Type is read as JSON).

With TLS (`require_identity`), a heartbeat is taken only from the sidecar of
the pod it is about (its client certificate names `sidecar/<pod>`): 401 without
a certificate, 403 with another one (cairn.common.access). The admin API's
rules are per principal (issue 39's authorization, not here).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from cairn.common.access import Verdict, decide_heartbeat
from cairn.common.api_docs import serve_docs
from cairn.common.auth.config import AuthConfig
from cairn.common.auth.config import disabled as disabled_auth
from cairn.common.heartbeat import HeartbeatError, parse_heartbeat
from cairn.common.identity import asgi_peer_principal
from cairn.common.problems import Code, Problem
from cairn.common.problems_http import install_problem_handlers, json_body, problem_response
from cairn.controller.api_access import READ_METHODS, Refusal, check_request
from cairn.controller.fencing import ControllerFenced
from cairn.controller.model import (
    MAX_REPLICATION_FACTOR,
    MAX_STORAGE_PODS,
    ClusterSpec,
    ClusterStatus,
    LeaderMove,
    ShardState,
    SpecError,
    node_ordinal,
    spec_document,
)
from cairn.controller.planner import election_blocked
from cairn.controller.runtime import Controller

log = logging.getLogger(__name__)
MAX_HEARTBEAT_BYTES = 4 * 1024 * 1024


# The challenge a 401 carries (RFC 6750).
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cairn"'}


class ReplicationFactorChange(BaseModel):
    replicationFactor: int = Field(ge=1, le=MAX_REPLICATION_FACTOR)


class PodCountChange(BaseModel):
    replicas: int = Field(ge=1, le=MAX_STORAGE_PODS)


class LeaderMoveRequest(BaseModel):
    node: str


def _admit_heartbeat(request: Request, node: str) -> None:
    """Raise a 401/403 Problem unless the caller is `node`'s own sidecar."""
    principal = asgi_peer_principal(request.scope)
    verdict = decide_heartbeat(principal, node)
    if verdict is Verdict.ALLOW:
        return
    who = str(principal) if principal is not None else "no client certificate"
    log.warning("refused a heartbeat for %s from %s", node, who)
    if verdict is Verdict.UNAUTHENTICATED:
        raise Problem(
            Code.UNAUTHORIZED, "a heartbeat needs a sidecar's client certificate", BEARER_CHALLENGE
        )
    raise Problem(Code.FORBIDDEN, f"{who} may not send heartbeats for {node}")


def create_app(
    controller: Controller, auth: AuthConfig | None = None, require_identity: bool = False
) -> FastAPI:
    """`auth` None: no authentication (tests that build the app in process).
    `require_identity` (TLS): heartbeats only from the pod's own sidecar certificate."""
    auth_config = auth if auth is not None else disabled_auth()

    async def authorized(request: Request) -> None:
        try:
            principal = check_request(
                auth_config,
                request.method,
                request.url.path,
                {k.lower(): v for k, v in request.headers.items()},
                request.scope,
            )
        except Refusal as refusal:
            if refusal.status == 401:
                raise Problem(Code.UNAUTHORIZED, refusal.detail, BEARER_CHALLENGE) from None
            raise Problem(Code.FORBIDDEN, refusal.detail) from None
        if principal is not None and request.method not in READ_METHODS:
            log.info("%s %s by %s", request.method, request.url.path, principal)

    app = FastAPI(
        title="Cairn controller",
        description="Cluster views and operations, and the health sidecars' heartbeats.",
        version="1",
        dependencies=[Depends(authorized)],
        docs_url=None,
        redoc_url=None,
        # A body without a Content-Type is read as JSON; one of another media type
        # (curl's -d sends a form's) is refused with 415 (json_body).
        strict_content_type=False,
    )
    serve_docs(app)

    install_problem_handlers(app, "controller")

    @app.exception_handler(ControllerFenced)
    async def fenced(_: Request, error: ControllerFenced) -> JSONResponse:
        # A newer controller took over while this request was being served.
        return problem_response(Problem(Code.UNAVAILABLE, f"not leading: {error}"))

    def keeper() -> Any:
        if controller.keeper is None or not controller.leading.is_set():
            raise Problem(
                Code.UNAVAILABLE, "not leading: this controller does not hold the lock (yet)"
            )
        return controller.keeper

    # -- probes and heartbeats ---------------------------------------------------------

    @app.get("/livez")
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        keeper()
        return {"status": "leading"}

    @app.post("/v1/heartbeats")
    async def heartbeat(request: Request) -> dict[str, bool]:
        body = await request.body()
        if len(body) > MAX_HEARTBEAT_BYTES:
            raise Problem(Code.PAYLOAD_TOO_LARGE, f"a heartbeat of {len(body)} bytes")
        try:
            beat = parse_heartbeat(json.loads(body))
        except (HeartbeatError, ValueError) as error:
            raise Problem(Code.INVALID_ARGUMENT, f"bad heartbeat: {error}") from None
        if require_identity:
            _admit_heartbeat(request, beat.node)
        controller.observer.on_heartbeat(beat)
        return {"accepted": True}

    # -- views ---------------------------------------------------------------------------

    @app.get("/v1/cluster")
    async def cluster() -> dict[str, Any]:
        state = keeper().state
        status: ClusterStatus = state.status
        return {
            "generation": state.generation,
            "observedGeneration": status.observed_generation,
            "spec": spec_document(state.spec),
            "shards": len(status.shards),
            "steadyShards": sum(1 for s in status.shards if s.state.value == "steady"),
            "nodes": len(status.nodes),
            "healthyNodes": sum(1 for n in status.nodes if n.health.value == "healthy"),
            "assignmentsVersion": status.assignments_version,
        }

    @app.get("/v1/namespaces")
    async def namespaces() -> list[dict[str, Any]]:
        state = keeper().state
        return [
            {
                **namespace_document,
                "shards": [
                    s.shard
                    for s in state.status.shards
                    if s.namespace == namespace_document["name"]
                ],
            }
            for namespace_document in spec_document(state.spec)["namespaces"]
        ]

    @app.get("/v1/shards")
    async def shards() -> list[dict[str, Any]]:
        state = keeper().state
        observed = controller.observer.view()
        answer = []
        for record in state.status.shards:
            report = observed.report(record.leader, record.shard)
            followers = []
            if report is not None and report.term == record.term:
                names = {v.internal_address: v.name for v in observed.nodes.values()}
                followers = [
                    {
                        "node": names.get(f.internal_address, f.internal_address),
                        "ackedOffset": f.acked_offset,
                        "lag": max(0, report.head_offset - f.acked_offset),
                        "voting": f.voting,
                        "state": f.state,
                    }
                    for f in report.followers
                ]
            answer.append(
                {
                    "namespace": record.namespace,
                    "id": record.shard,
                    "term": record.term,
                    "state": record.state.value,
                    "leader": record.leader,
                    "ensemble": list(record.ensemble),
                    "leaving": list(record.leaving),
                    "hashRange": [record.hash_range.min_inclusive, record.hash_range.max_inclusive],
                    "headOffset": report.head_offset if report else None,
                    "commitOffset": report.commit_offset if report else None,
                    "followers": followers,
                    # Without a serving leader: why no election can be held (a
                    # majority of members unreachable or without their data),
                    # which an operator has to resolve when the data is lost.
                    "electionBlocked": (
                        election_blocked(record, observed, state.status)
                        if report is None
                        or report.term != record.term
                        or report.role != "leader"
                        or record.state is not ShardState.STEADY
                        else None
                    ),
                }
            )
        return answer

    @app.get("/v1/nodes")
    async def nodes() -> list[dict[str, Any]]:
        state = keeper().state
        observed = controller.observer.view()
        answer = []
        names = sorted({n.name for n in state.status.nodes} | set(observed.nodes))
        for name in names:
            view = observed.nodes.get(name)
            record = state.status.node(name)
            try:
                wanted = state.spec.wants_node(name)
            except SpecError:
                wanted = False
            answer.append(
                {
                    "name": name,
                    "publicAddress": view.public_address
                    if view
                    else record.public_address
                    if record
                    else "",
                    "internalAddress": view.internal_address
                    if view
                    else record.internal_address
                    if record
                    else "",
                    "labels": dict(view.labels if view else record.labels if record else {}),
                    "alive": bool(view and view.alive),
                    "wanted": wanted,
                    "draining": name in state.spec.drain,
                    "replicas": sum(1 for s in state.status.shards if name in s.voters),
                    "leaders": sum(1 for s in state.status.shards if s.leader == name),
                }
            )
        return answer

    @app.get("/v1/elections")
    async def elections() -> list[dict[str, Any]]:
        state = keeper().state
        return [
            {
                "namespace": e.namespace,
                "shard": e.shard,
                "term": e.term,
                "leader": e.leader,
                "reason": e.reason,
                "startedMs": e.started_ms,
                "durationMs": e.duration_ms,
            }
            for e in reversed(state.status.elections)
        ]

    # -- actions ---------------------------------------------------------------------------

    async def change_spec(change: Any) -> dict[str, Any]:
        try:
            state = await keeper().update_spec(change)
        except SpecError as error:
            raise Problem(Code.INVALID_CHANGE, str(error)) from None
        controller.wake.set()
        return {"generation": state.generation, "spec": spec_document(state.spec)}

    @app.put("/v1/namespaces/{name}/replication-factor", dependencies=[Depends(json_body)])
    async def set_replication_factor(name: str, body: ReplicationFactorChange) -> dict[str, Any]:
        def change(spec: ClusterSpec) -> ClusterSpec:
            namespace = spec.namespace(name)
            if namespace is None:
                raise Problem(Code.NAMESPACE_NOT_FOUND, f"namespace {name!r} does not exist")
            updated = replace(namespace, replication_factor=body.replicationFactor)
            return replace(
                spec,
                namespaces=tuple(updated if ns.name == name else ns for ns in spec.namespaces),
            )

        return await change_spec(change)

    @app.put("/v1/storage-pods", dependencies=[Depends(json_body)])
    async def set_storage_pods(body: PodCountChange) -> dict[str, Any]:
        return await change_spec(lambda spec: replace(spec, storage_pods=body.replicas))

    def check_node(name: str) -> None:
        try:
            node_ordinal(name)
        except SpecError as error:
            raise Problem(Code.NODE_NOT_FOUND, str(error)) from None

    @app.put("/v1/nodes/{name}/drain")
    async def drain(name: str) -> dict[str, Any]:
        check_node(name)
        return await change_spec(
            lambda spec: spec if name in spec.drain else replace(spec, drain=(*spec.drain, name))
        )

    @app.delete("/v1/nodes/{name}/drain")
    async def undrain(name: str) -> dict[str, Any]:
        check_node(name)
        return await change_spec(
            lambda spec: replace(spec, drain=tuple(n for n in spec.drain if n != name))
        )

    @app.post("/v1/shards/{shard}/leader", status_code=202, dependencies=[Depends(json_body)])
    async def move_leader(shard: int, body: LeaderMoveRequest) -> dict[str, Any]:
        """Move a shard's leader to a member of its ensemble, once that member holds
        everything committed. The leader then stays there until it changes for
        another reason (a failure, a drain, another move): balancing moves the other
        leaders around it."""
        handle = keeper()
        record = handle.state.status.shard(shard)
        if record is None:
            raise Problem(Code.SHARD_NOT_FOUND, f"shard {shard} does not exist")
        if body.node not in record.ensemble:
            raise Problem(
                Code.CONFLICT,
                f"{body.node} is not in shard {shard}'s ensemble {list(record.ensemble)}",
            )

        def change(status: ClusterStatus) -> ClusterStatus:
            moves = tuple(m for m in status.leader_moves if m.shard != shard)
            return replace(status, leader_moves=(*moves, LeaderMove(shard, body.node)))

        await handle.update_status(change)
        controller.wake.set()
        return {"shard": shard, "node": body.node, "accepted": True}

    return app
