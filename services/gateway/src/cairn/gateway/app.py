"""The gateway's ASGI application: routers, auth, problem documents, probes."""

# No `from __future__ import annotations` here: the auth dependency's
# annotation names a local (the bearer scheme), which FastAPI must see evaluated.

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.client.errors import ClientError
from cairn.common.api_docs import serve_docs
from cairn.common.problems import validation_detail
from cairn.common.problems_http import problem_response
from cairn.gateway import admin, changes, keys, openapi, scans, sessions
from cairn.gateway.callers import caller_dependency
from cairn.gateway.cursors import CursorError
from cairn.gateway.headers import HeaderError
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import (
    Code,
    Problem,
    problem_for_client_error,
    problem_for_http_status,
)
from cairn.gateway.settings import GatewaySettings
from cairn.gateway.tokens import TokenError

log = logging.getLogger(__name__)

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
    routes = [route for api in routers for route in api.routes]
    routes += [route for route in app.router.routes if isinstance(route, APIRoute)]
    _error_handlers(app, settings, routes)
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


def _allowed_methods(request: Request, routes: Sequence[BaseRoute]) -> list[str]:
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _error_handlers(app: FastAPI, settings: GatewaySettings, routes: Sequence[BaseRoute]) -> None:
    async def on_problem(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, Problem)
        return problem_response(error)

    async def on_client_error(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ClientError)
        return problem_response(problem_for_client_error(error, settings.retry_after_s))

    async def on_bad_argument(_: Request, error: Exception) -> JSONResponse:
        return problem_response(Problem(Code.INVALID_ARGUMENT, str(error)))

    async def on_validation(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return problem_response(Problem(Code.INVALID_ARGUMENT, validation_detail(error.errors())))

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        headers: dict[str, Any] = dict(error.headers or {})
        if error.status_code == 405:
            # Starlette names the methods of the first route matching the path;
            # several routes share some paths (GET and DELETE of /keys).
            headers["Allow"] = ", ".join(_allowed_methods(request, routes))
        return problem_response(problem_for_http_status(error.status_code, error.detail, headers))

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug: logged with its traceback, answered as a problem all the same.
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        detail = f"unexpected {type(error).__name__}; see the gateway's log"
        return problem_response(Problem(Code.INTERNAL_ERROR, detail))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(ClientError, on_client_error)
    for kind in (CursorError, HeaderError, TokenError):
        app.add_exception_handler(kind, on_bad_argument)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
