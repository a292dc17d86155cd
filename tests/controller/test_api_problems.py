"""The controller's admin API answers every error as a problem document like the
gateway's (validation, unknown paths and methods, refused media types included),
and takes a JSON body sent without a Content-Type."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn.common.auth.config import AuthConfig, parse_auth_config
from cairn.common.problems import PROBLEM_MEDIA_TYPE
from cairn.controller.api import create_app
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import default_spec
from cairn.controller.runtime import Controller
from cairn.controller.state.memory_store import MemoryCluster, MemoryLeaderLock, MemoryStateStore

Session = Callable[[httpx.AsyncClient], Awaitable[None]]


def _serve(session: Session, leading: bool = True, auth: AuthConfig | None = None) -> None:
    """Run `session` against a controller's app in this process: leading (its
    state in memory, nothing reconciling), or not yet holding the lock."""

    async def main() -> None:
        cluster = MemoryCluster()
        store = MemoryStateStore(cluster)
        controller = Controller(store, MemoryLeaderLock(cluster), default_spec())
        if leading:
            keeper = StateKeeper(store, await store.create(default_spec()))
            await keeper.take_epoch()
            controller.keeper = keeper
            controller.leading.set()
        transport = httpx.ASGITransport(app=create_app(controller, auth))
        async with httpx.AsyncClient(transport=transport, base_url="http://controller") as http:
            await session(http)

    asyncio.run(main())


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE, response.headers
    document: dict[str, Any] = response.json()
    assert document == {
        "type": "about:blank",
        "title": document["title"],
        "status": status,
        "detail": document["detail"],
        "code": code,
    }
    assert document["title"] and document["detail"]
    return document


def test_validation_errors_are_problem_documents() -> None:
    async def session(http: httpx.AsyncClient) -> None:
        zero = await http.put("/v1/namespaces/default/replication-factor",
                              json={"replicationFactor": 0})  # fmt: skip
        assert "replicationFactor" in problem(zero, 400, "invalid-argument")["detail"]
        problem(await http.put("/v1/storage-pods", json={}), 400, "invalid-argument")
        problem(await http.put("/v1/storage-pods", content=b"{not json"), 400, "invalid-argument")
        not_a_shard = await http.post("/v1/shards/first/leader", json={"node": "storage-0"})
        assert "shard" in problem(not_a_shard, 400, "invalid-argument")["detail"]
        # FastAPI's default answer to these is a bare 422 {"detail": [...]}.
        assert zero.status_code != 422 and not_a_shard.status_code != 422

    _serve(session)


def test_a_json_body_without_content_type_is_accepted_and_another_type_refused() -> None:
    async def session(http: httpx.AsyncClient) -> None:
        plain = await http.put("/v1/storage-pods", content=b'{"replicas": 4}')
        assert plain.status_code == 200, plain.text
        assert plain.json()["spec"]["storage"]["replicas"] == 4
        # What `curl -d '{...}'` sends without -H 'Content-Type: application/json'.
        form = await http.put(
            "/v1/namespaces/default/replication-factor",
            content=b'{"replicationFactor": 2}',
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert "application/json" in problem(form, 415, "unsupported-media-type")["detail"]
        typed = await http.put(
            "/v1/storage-pods",
            content=b'{"replicas": 5}',
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert typed.status_code == 200, typed.text
        namespaces = (await http.get("/v1/namespaces")).json()
        assert [ns["replicationFactor"] for ns in namespaces] == [3]

    _serve(session)


def test_framework_errors_and_refusals_are_problem_documents() -> None:
    async def session(http: httpx.AsyncClient) -> None:
        problem(await http.get("/v1/no-such-view"), 404, "not-found")
        wrong = problem(await http.delete("/v1/storage-pods"), 405, "method-not-allowed")
        assert "PUT" in wrong["detail"]
        missing = await http.put("/v1/namespaces/nope/replication-factor",
                                 json={"replicationFactor": 1})  # fmt: skip
        problem(missing, 404, "namespace-not-found")
        problem(await http.put("/v1/nodes/not_a_pod/drain"), 404, "node-not-found")
        leader = await http.post("/v1/shards/999/leader", json={"node": "storage-0"})
        problem(leader, 404, "shard-not-found")
        heartbeat = await http.post("/v1/heartbeats", content=b"[]")
        problem(heartbeat, 400, "invalid-argument")

    _serve(session)


def test_a_controller_not_leading_answers_unavailable() -> None:
    async def session(http: httpx.AsyncClient) -> None:
        problem(await http.get("/v1/shards"), 503, "unavailable")
        problem(await http.put("/v1/storage-pods", json={"replicas": 2}), 503, "unavailable")

    _serve(session, leading=False)


@pytest.mark.parametrize("path", ["/v1/cluster", "/v1/storage-pods"])
def test_refused_credentials_are_problem_documents(path: str) -> None:
    # Authentication on, no tokens known: every caller is anonymous and refused.
    config = parse_auth_config({"enabled": True}, Path("."))

    async def session(http: httpx.AsyncClient) -> None:
        method = "GET" if path == "/v1/cluster" else "PUT"
        answer = await http.request(method, path, json={"replicas": 2})
        problem(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"].startswith("Bearer")

    _serve(session, auth=config)
