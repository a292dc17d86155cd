"""The shared problem handlers (cairn.common.problems_http) on apps shaped like
the gateway's (routes in included routers, several sharing a path) and the
controller's (routes on the app)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from cairn.common.problems import PROBLEM_MEDIA_TYPE, Code, Problem
from cairn.common.problems_http import install_problem_handlers

Session = Callable[[httpx.AsyncClient], Awaitable[None]]


class _OwnError(Exception):
    pass


def _app(assets: Path) -> FastAPI:
    app = FastAPI()
    reads, writes = APIRouter(), APIRouter()

    @reads.get("/items/{name}")
    async def read_item(name: str) -> dict[str, str]:
        return {"name": name}

    @writes.delete("/items/{name}")
    async def delete_item(name: str) -> None:
        raise _OwnError(name)

    @app.put("/items/{name}")
    async def put_item(name: str) -> dict[str, str]:
        return {"name": name}

    @app.post("/only-post")
    async def only_post() -> dict[str, str]:
        return {}

    app.include_router(reads)
    app.include_router(writes)
    app.mount("/assets", StaticFiles(directory=str(assets)))

    def own_problem(error: Exception) -> Problem:
        return Problem(Code.CONFLICT, f"own error: {error}")

    install_problem_handlers(app, "test service", {_OwnError: own_problem})
    return app


def _serve(app: FastAPI, session: Session) -> None:
    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            await session(http)

    asyncio.run(main())


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    document: dict[str, Any] = response.json()
    assert document["status"] == status and document["code"] == code, document
    return document


def test_a_wrong_method_names_every_method_of_the_path_across_routers(tmp_path: Path) -> None:
    async def session(http: httpx.AsyncClient) -> None:
        wrong = await http.patch("/items/a")
        document = _problem(wrong, 405, "method-not-allowed")
        # GET and DELETE come from two included routers, PUT from the app itself.
        assert wrong.headers["allow"] == "DELETE, GET, PUT"
        assert "DELETE, GET, PUT" in document["detail"]
        only = await http.get("/only-post")
        _problem(only, 405, "method-not-allowed")
        assert only.headers["allow"] == "POST"

    _serve(_app(tmp_path), session)


def test_an_endpoint_refusing_a_method_itself_keeps_its_own_allow(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")

    async def session(http: httpx.AsyncClient) -> None:
        assert (await http.get("/assets/a.txt")).text == "a"
        wrong = await http.post("/assets/a.txt")
        _problem(wrong, 405, "method-not-allowed")
        assert wrong.headers["allow"] == "GET, HEAD"

    _serve(_app(tmp_path), session)


def test_the_apps_own_errors_validation_and_unknown_paths(tmp_path: Path) -> None:
    async def session(http: httpx.AsyncClient) -> None:
        own = _problem(await http.delete("/items/b"), 409, "conflict")
        assert own["detail"] == "own error: b"
        _problem(await http.get("/nothing-here"), 404, "not-found")

    _serve(_app(tmp_path), session)
