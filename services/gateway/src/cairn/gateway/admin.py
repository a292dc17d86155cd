"""Admin views and actions, through the controller's admin API.

    GET    /v1/admin/cluster | namespaces | shards | nodes | elections
    PUT    /v1/admin/namespaces/{name}/replication-factor  {"replicationFactor": n}
    PUT    /v1/admin/storage-pods                          {"replicas": n}
    POST   /v1/admin/shards/{id}/leader                    {"node": "storage-1"}
    PUT    /v1/admin/nodes/{name}/drain   (DELETE undoes it)

The gateway holds no cluster state: each call is the controller's answer,
checked against the documented models (an answer that does not fit is a 502,
never passed on unchecked). The controller's errors come back as problem
documents with the gateway's codes; an unreachable controller is a 503
(controller-unavailable).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from cairn.common.tls import LiveSSLContext, TlsSource
from cairn.gateway.callers import current_caller, on_behalf_of_metadata
from cairn.gateway.openapi import errors
from cairn.gateway.problems import Code, Problem, problem_for_controller
from cairn.gateway.settings import GatewaySettings

T = TypeVar("T")
# The controller's own bounds (cairn.controller.model); it checks them again.
MAX_REPLICATION_FACTOR = 7
MAX_STORAGE_PODS = 1000


class _View(BaseModel):
    # Fields the controller adds later pass through rather than fail the view.
    model_config = ConfigDict(extra="allow")


class NamespaceSpec(_View):
    name: str
    initialShardCount: int
    replicationFactor: int
    notificationsEnabled: bool
    keySorting: str = Field(description="hierarchical | natural")


class StorageSpec(_View):
    replicas: int = Field(description="Storage pods wanted")


class PlacementSpec(_View):
    antiAffinityLabels: list[str]


class ClusterSpec(_View):
    namespaces: list[NamespaceSpec]
    storage: StorageSpec
    placement: PlacementSpec | None = None
    drain: list[str] | None = Field(default=None, description="Nodes being drained")


class ClusterView(_View):
    generation: int = Field(description="Spec generation")
    observedGeneration: int = Field(description="Last generation the controller acted on")
    spec: ClusterSpec
    shards: int
    steadyShards: int
    nodes: int
    healthyNodes: int
    assignmentsVersion: int


class NamespaceView(NamespaceSpec):
    shards: list[int] = Field(description="The namespace's shard ids")


class FollowerView(_View):
    node: str
    ackedOffset: int
    lag: int = Field(description="Entries behind the leader's head")
    voting: bool
    state: str


class ShardView(_View):
    namespace: str
    id: int
    term: int
    state: str = Field(description="new | election | steady")
    leader: str | None
    ensemble: list[str]
    leaving: list[str]
    hashRange: list[int] = Field(description="[min, max], inclusive")
    headOffset: int | None
    commitOffset: int | None
    followers: list[FollowerView]
    electionBlocked: str | None = Field(
        default=None,
        description="Without a serving leader: why no election can be held (members "
        "unreachable, or that lost their data); an operator resolves lost data",
    )


class NodeView(_View):
    name: str
    publicAddress: str
    internalAddress: str
    labels: dict[str, str]
    alive: bool
    wanted: bool
    draining: bool
    replicas: int
    leaders: int


class ElectionView(_View):
    namespace: str
    shard: int
    term: int
    leader: str
    reason: str
    startedMs: int
    durationMs: int


class SpecChange(_View):
    generation: int
    spec: ClusterSpec


class LeaderMoveAnswer(_View):
    shard: int
    node: str
    accepted: bool


class ReplicationFactorChange(BaseModel):
    replicationFactor: int = Field(ge=1, le=MAX_REPLICATION_FACTOR)


class PodCountChange(BaseModel):
    replicas: int = Field(ge=1, le=MAX_STORAGE_PODS)


class LeaderMoveRequest(BaseModel):
    node: str = Field(min_length=1, max_length=253, description="A member of the shard")


def _controller_client(settings: GatewaySettings) -> httpx.AsyncClient:
    if settings.tls_dir is None:
        return httpx.AsyncClient(
            base_url=settings.controller_url or "", timeout=settings.controller_timeout_s
        )
    # The gateway's certificate, loaded afresh before requests once the files change.
    tls = LiveSSLContext(TlsSource.from_directory(settings.tls_dir), server=False)
    return httpx.AsyncClient(
        base_url=settings.controller_url or "",
        timeout=settings.controller_timeout_s,
        verify=tls.context,
        event_hooks={"request": [tls.httpx_request_hook]},
    )


class Controller:
    """The controller's admin API over HTTP (one connection pool)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.url = settings.controller_url
        self._retry_after_s = settings.retry_after_s
        # Its own token (with auth), and over TLS its certificate: either names the
        # gateway to the controller, which then takes the caller it names.
        self._token = settings.pod_token
        self._http = _controller_client(settings) if self.url else None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def call(self, method: str, path: str, body: BaseModel | None = None) -> Any:
        if self._http is None:
            raise Problem(
                Code.CONTROLLER_UNAVAILABLE,
                "this gateway has no controller to ask (start it with --controller-url; "
                "a standalone storage server has none)",
            )
        headers = {}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        caller = current_caller()
        if caller is not None:
            headers.update(on_behalf_of_metadata(caller))
        try:
            response = await self._http.request(
                method,
                path,
                json=body.model_dump() if body is not None else None,
                headers=headers,
            )
        except httpx.HTTPError as error:
            raise Problem(
                Code.CONTROLLER_UNAVAILABLE,
                f"the controller at {self.url} did not answer: {error!r}",
                {"Retry-After": str(self._retry_after_s)},
            ) from None
        try:
            document = response.json()
        except ValueError:
            document = None
        if response.status_code >= 400:
            raise problem_for_controller(response.status_code, document)
        if document is None:
            raise Problem(Code.CONTROLLER_ERROR, "the controller's answer is not JSON")
        return document

    async def view(
        self, model: TypeAdapter[T], method: str, path: str, body: BaseModel | None = None
    ) -> T:
        document = await self.call(method, path, body)
        try:
            return model.validate_python(document)
        except ValidationError as error:
            raise Problem(
                Code.CONTROLLER_ERROR,
                f"the controller's answer to {method} {path} does not fit its model: "
                f"{error.error_count()} errors, first: {error.errors()[0]['msg']}",
            ) from None


_CLUSTER = TypeAdapter(ClusterView)
_NAMESPACES = TypeAdapter(list[NamespaceView])
_SHARDS = TypeAdapter(list[ShardView])
_NODES = TypeAdapter(list[NodeView])
_ELECTIONS = TypeAdapter(list[ElectionView])
_SPEC_CHANGE = TypeAdapter(SpecChange)
_LEADER_MOVE = TypeAdapter(LeaderMoveAnswer)

NodeName = Annotated[
    str,
    Path(min_length=1, description="A storage pod (`storage-<ordinal>`)", examples=["storage-0"]),
]

_CONTROLLER_ERRORS = (Code.CONTROLLER_UNAVAILABLE, Code.CONTROLLER_ERROR)


def router(controller: Controller) -> APIRouter:
    # Answers leave out what the controller left out (exclude_unset), so that a
    # field it omits (placement, drain) is not passed on as null.
    api = APIRouter(prefix="/v1/admin", tags=["admin"])

    @api.get(
        "/cluster",
        response_model_exclude_unset=True,
        summary="The cluster: spec and a summary of its status",
        responses=errors(*_CONTROLLER_ERRORS),
    )
    async def cluster() -> ClusterView:
        return await controller.view(_CLUSTER, "GET", "/v1/cluster")

    @api.get(
        "/namespaces",
        response_model_exclude_unset=True,
        summary="Namespaces and their shards",
        responses=errors(*_CONTROLLER_ERRORS),
    )
    async def namespaces() -> list[NamespaceView]:
        return await controller.view(_NAMESPACES, "GET", "/v1/namespaces")

    @api.get(
        "/shards",
        response_model_exclude_unset=True,
        summary="Shards: term, leader, ensemble, followers' lag",
        responses=errors(*_CONTROLLER_ERRORS),
    )
    async def shards() -> list[ShardView]:
        return await controller.view(_SHARDS, "GET", "/v1/shards")

    @api.get(
        "/nodes",
        response_model_exclude_unset=True,
        summary="Storage pods: health, replicas and leaders",
        responses=errors(*_CONTROLLER_ERRORS),
    )
    async def nodes() -> list[NodeView]:
        return await controller.view(_NODES, "GET", "/v1/nodes")

    @api.get(
        "/elections",
        response_model_exclude_unset=True,
        summary="Recent elections, newest first",
        responses=errors(*_CONTROLLER_ERRORS),
    )
    async def elections() -> list[ElectionView]:
        return await controller.view(_ELECTIONS, "GET", "/v1/elections")

    @api.put(
        "/namespaces/{name}/replication-factor",
        response_model_exclude_unset=True,
        summary="Change a namespace's replication factor",
        responses=errors(Code.NAMESPACE_NOT_FOUND, Code.INVALID_CHANGE, *_CONTROLLER_ERRORS),
    )
    async def set_replication_factor(
        name: Annotated[str, Path(min_length=1, examples=["default"])],
        body: ReplicationFactorChange,
    ) -> SpecChange:
        path = f"/v1/namespaces/{quote(name, safe='')}/replication-factor"
        return await controller.view(_SPEC_CHANGE, "PUT", path, body)

    @api.put(
        "/storage-pods",
        response_model_exclude_unset=True,
        summary="Scale the storage pods",
        responses=errors(Code.INVALID_CHANGE, *_CONTROLLER_ERRORS),
    )
    async def set_storage_pods(body: PodCountChange) -> SpecChange:
        return await controller.view(_SPEC_CHANGE, "PUT", "/v1/storage-pods", body)

    @api.post(
        "/shards/{shard}/leader",
        response_model_exclude_unset=True,
        summary="Move a shard's leader to another member",
        status_code=202,
        responses={
            202: {"description": "Requested; the controller moves it when it can"},
            **errors(Code.SHARD_NOT_FOUND, Code.CONFLICT, *_CONTROLLER_ERRORS),
        },
    )
    async def move_leader(
        shard: Annotated[int, Path(ge=0, le=2**31 - 1)], body: LeaderMoveRequest
    ) -> LeaderMoveAnswer:
        return await controller.view(_LEADER_MOVE, "POST", f"/v1/shards/{shard}/leader", body)

    @api.put(
        "/nodes/{name}/drain",
        response_model_exclude_unset=True,
        summary="Drain a storage pod (move its shards away)",
        responses=errors(Code.NODE_NOT_FOUND, Code.INVALID_CHANGE, *_CONTROLLER_ERRORS),
    )
    async def drain(name: NodeName) -> SpecChange:
        path = f"/v1/nodes/{quote(name, safe='')}/drain"
        return await controller.view(_SPEC_CHANGE, "PUT", path)

    @api.delete(
        "/nodes/{name}/drain",
        response_model_exclude_unset=True,
        summary="Stop draining a storage pod",
        responses=errors(Code.NODE_NOT_FOUND, Code.INVALID_CHANGE, *_CONTROLLER_ERRORS),
    )
    async def undrain(name: NodeName) -> SpecChange:
        path = f"/v1/nodes/{quote(name, safe='')}/drain"
        return await controller.view(_SPEC_CHANGE, "DELETE", path)

    return api
