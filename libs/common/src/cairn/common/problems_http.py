"""Problem documents (cairn.common.problems) on FastAPI: the response, the
OpenAPI schema, the handlers that turn every error into one, and the check that
a JSON body is sent as JSON.

Imported only by the programs that serve HTTP APIs (they depend on fastapi; the
storage pod does not), like cairn.common.api_docs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from email.message import Message
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from cairn.common.problems import (
    PROBLEM_MEDIA_TYPE,
    Code,
    Problem,
    problem_for_http_status,
    validation_detail,
)

log = logging.getLogger(__name__)


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document (the schema of every error answer)."""

    type: str = Field(description="Always about:blank: the code tells problems apart")
    title: str = Field(description="The HTTP status phrase")
    status: int = Field(description="The HTTP status code")
    detail: str = Field(description="What happened this time")
    code: Code = Field(description="The stable code to branch on")


def problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(
        problem.document(),
        status_code=problem.status,
        headers=problem.headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def is_json_media_type(content_type: str) -> bool:
    """application/json or any application/*+json, parameters aside."""
    message = Message()
    message["content-type"] = content_type
    main, sub = message.get_content_maintype(), message.get_content_subtype()
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def json_body(request: Request) -> None:
    """A dependency of routes that take a JSON body: a body sent as another
    media type (curl's `-d` sends application/x-www-form-urlencoded) is refused
    with 415 and what to send instead, rather than failing validation as a
    string. A body with no Content-Type at all is read as JSON."""
    content_type = request.headers.get("content-type")
    if content_type is None or is_json_media_type(content_type):
        return
    if not await request.body():
        return  # nothing sent: validation says what is missing
    raise Problem(
        Code.UNSUPPORTED_MEDIA_TYPE,
        f"the body must be JSON (Content-Type: application/json), not {content_type}",
    )


# The methods a 405's Allow may name: those of RFC 9110 a route can declare.
_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")

# What answers a kind of error as a problem (the app's own exceptions).
ProblemOf = Callable[[Exception], Problem]


def allowed_methods(app: FastAPI, request: Request) -> list[str] | None:
    """The methods the app routes to an endpoint at the request's path, asked of
    its routes method by method (Starlette's 405 names only the first matching
    route's, several routes may share a path, and FastAPI keeps an included
    router's routes behind one entry that declares no methods). None: a route
    took the refused method itself, so its endpoint refused it and knows why
    (static files: GET and HEAD only)."""

    scope = request.scope
    # A mount made its own root path the request's; the app routes from its own.
    root_path = scope.get("app_root_path", scope.get("root_path", ""))

    def routed(method: str) -> bool:
        probe = {**scope, "method": method, "root_path": root_path}
        return any(route.matches(probe)[0] is Match.FULL for route in app.router.routes)

    if routed(request.method):
        return None
    return [method for method in _METHODS if routed(method)]


def install_problem_handlers(
    app: FastAPI, service: str, problems_of: Mapping[type[Exception], ProblemOf] | None = None
) -> None:
    """Answer every error of `app` as a problem document: a raised Problem, a
    request that fails validation (400), the framework's own HTTP errors (404,
    405 with Allow, 413, ...), the app's own kinds of error (`problems_of`, each
    kind's problem), and anything unexpected (500, logged with its traceback;
    `service` names the log to read)."""

    async def on_problem(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, Problem)
        return problem_response(error)

    async def on_validation(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return problem_response(Problem(Code.INVALID_ARGUMENT, validation_detail(error.errors())))

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        headers: dict[str, Any] = dict(error.headers or {})
        if error.status_code == 405:
            allowed = allowed_methods(app, request)
            if allowed is not None:
                headers["Allow"] = ", ".join(allowed)
        return problem_response(problem_for_http_status(error.status_code, error.detail, headers))

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        detail = f"unexpected {type(error).__name__}; see the {service}'s log"
        return problem_response(Problem(Code.INTERNAL_ERROR, detail))

    def answer_with(problem_of: ProblemOf) -> Callable[[Request, Exception], Any]:
        async def on_error(_: Request, error: Exception) -> JSONResponse:
            return problem_response(problem_of(error))

        return on_error

    app.add_exception_handler(Problem, on_problem)
    for kind, problem_of in (problems_of or {}).items():
        app.add_exception_handler(kind, answer_with(problem_of))
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
