"""The gateway's ASGI application: routers, auth, problem documents, probes."""

# No `from __future__ import annotations` here: the auth dependency's
# annotation names a local (the bearer scheme), which FastAPI must see evaluated.

import asyncio
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.common.api_docs import serve_docs
from cairn.common.problems_http import ProblemOf, install_problem_handlers, problem_response
from cairn.gateway import admin, changes, keys, openapi, scans, sessions
from cairn.gateway.callers import caller_dependency
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import REQUEST_ERRORS, Code, Problem, problem_for_error
from cairn.gateway.settings import GatewaySettings

DESCRIPTION = """\
Cairn over HTTP: records by key (the version is the ETag; `If-Match` and
`If-None-Match: *` make writes conditional), key and record scans with
cursors, range deletes, sessions for ephemeral records, a change feed as
Server-Sent Events, and the cluster's admin views and actions.

Every error is an RFC 9457 problem document (`application/problem+json`) with
a stable `code`. The gateway keeps no state between requests: session tokens,
cursors and event ids carry it, so any number of gateways can serve one address.
"""


def bearer_auth(token: str) -> Callable[..., Awaitable[None]]:
    scheme = HTTPBearer(
        auto_error=False,
        scheme_name="bearer",
        description="The token the gateway was started with (--token-file, CAIRN_GATEWAY_TOKEN)",
    )
    expected = token.encode("utf-8")

    async def check(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)],
    ) -> None:
        check_bearer(credentials.credentials if credentials is not None else None, expected)

    return check


def bearer_credentials(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (None without one),
    read as FastAPI's HTTPBearer reads it."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and credentials) or scheme.lower() != "bearer":
        return None
    return credentials


def check_bearer(credentials: str | None, expected: bytes) -> None:
    """The gateway's single token (--token-file): a 401 problem unless given."""
    if credentials is None:
        raise Problem(
            Code.UNAUTHORIZED,
            "this gateway needs a bearer token (Authorization: Bearer <token>)",
            {"WWW-Authenticate": 'Bearer realm="cairn"'},
        )
    # Constant time: the comparison must not tell how much of a guess was right.
    if not hmac.compare_digest(credentials.encode("utf-8"), expected):
        raise Problem(
            Code.UNAUTHORIZED,
            "the bearer token is not this gateway's",
            {"WWW-Authenticate": 'Bearer realm="cairn", error="invalid_token"'},
        )


class _ProblemForPlainLimit:
    """Starlette answers one case of its body limit itself, in plain text: a
    request whose route reads no body, declaring a body over the limit. That
    answer becomes a problem document like every other."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replacing = False

        async def send_problem(message: Message) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start" and message["status"] == 413:
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                if content_type.startswith(b"text/plain"):
                    replacing = True
                    response = problem_response(
                        Problem(Code.PAYLOAD_TOO_LARGE, "the request body is over the limit")
                    )
                    await response(scope, receive, send)
                    return
            if replacing:
                return  # the plain text body of the replaced answer
            await send(message)

        await self.app(scope, receive, send_problem)


class GatewayApp(FastAPI):
    def build_middleware_stack(self) -> ASGIApp:
        return _ProblemForPlainLimit(super().build_middleware_stack())


class Lifecycle:
    """Shutting down gracefully: once draining, readiness fails (load balancers
    stop sending requests here) and change feed streams end (their clients
    resume on another gateway), so the server's graceful shutdown does not wait
    on streams that never end."""

    def __init__(self) -> None:
        self.draining = asyncio.Event()

    def begin_drain(self) -> None:
        self.draining.set()


def create_app(settings: GatewaySettings) -> FastAPI:
    """The gateway's app; `app.state.lifecycle` is its Lifecycle, `app.state.pool`
    its clients (which fastpath.Front, the app's front in a server, shares)."""
    pool = ClientPool(settings)
    controller = admin.Controller(settings)
    lifecycle = Lifecycle()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await pool.close()
            await controller.close()

    app = GatewayApp(
        title="Cairn gateway",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        # Bodies are small JSON documents except values (raised per route).
        max_body_size=settings.max_json_body_bytes,
        docs_url=None,
        redoc_url=None,
    )
    serve_docs(app)
    app.state.lifecycle = lifecycle
    app.state.pool = pool
    guarded = [Depends(bearer_auth(settings.token))] if settings.token is not None else []
    guarded.append(Depends(caller_dependency(settings.auth)))
    routers = [
        keys.router(settings, pool),
        scans.router(settings, pool),
        sessions.router(settings, pool),
        changes.router(settings, pool, lifecycle.draining),
        admin.router(controller),
    ]
    for api in routers:
        app.include_router(api, dependencies=guarded)
    _probes(app, pool, lifecycle)
    install_problem_handlers(app, "gateway", _problems_of(settings))
    openapi.install(app, auth=settings.token is not None or settings.auth.enabled)
    return app


def _probes(app: FastAPI, pool: ClientPool, lifecycle: Lifecycle) -> None:
    @app.get("/livez", tags=["probes"], summary="Liveness: the process serves HTTP")
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["probes"],
        summary="Readiness: the storage's shard map is known",
        responses=openapi.errors(Code.UNAVAILABLE),
    )
    async def readyz() -> dict[str, str]:
        if lifecycle.draining.is_set():
            raise Problem(Code.UNAVAILABLE, "the gateway is shutting down")
        await pool.root()
        return {"status": "ready"}


def _problems_of(settings: GatewaySettings) -> dict[type[Exception], ProblemOf]:
    """The problems answering the gateway's own errors (fastpath answers alike)."""

    def problem_of(error: Exception) -> Problem:
        problem = problem_for_error(error, settings.retry_after_s)
        assert problem is not None, error
        return problem

    return dict.fromkeys(REQUEST_ERRORS, problem_of)
