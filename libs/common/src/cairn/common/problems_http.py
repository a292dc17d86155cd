"""Problem documents (cairn.common.problems) on FastAPI: the response, the
OpenAPI schema, the handlers that turn every error into one, and the check that
a JSON body is sent as JSON.

Imported only by the programs that serve HTTP APIs (they depend on fastapi; the
storage pod does not), like cairn.common.api_docs.
"""

from __future__ import annotations

import logging
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


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods of every route matching the request's path (Starlette's 405
    names only the first route's, and several routes may share a path)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def install_problem_handlers(app: FastAPI, service: str) -> None:
    """Answer every error of `app` as a problem document: a raised Problem, a
    request that fails validation (400), the framework's own HTTP errors (404,
    405 with Allow, 413, ...), and anything unexpected (500, logged with its
    traceback; `service` names the log to read)."""

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
            headers["Allow"] = ", ".join(allowed_methods(app, request))
        return problem_response(problem_for_http_status(error.status_code, error.detail, headers))

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        detail = f"unexpected {type(error).__name__}; see the {service}'s log"
        return problem_response(Problem(Code.INTERNAL_ERROR, detail))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
