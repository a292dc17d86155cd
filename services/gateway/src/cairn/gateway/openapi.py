"""The OpenAPI document, made accurate: every error is a problem document.

FastAPI documents request validation failures as 422 with its own schema; the
gateway answers them as 400 problem documents, so the document says that
instead. Routes name their error statuses (`errors(...)`); this fills in the
problem schema for each, and the statuses every route of a kind can answer
(400 for a malformed request, 401 with auth, 413 with a body).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from cairn.gateway.models import ChangeBatch
from cairn.gateway.problems import (
    PROBLEM_MEDIA_TYPE,
    Code,
    ProblemDocument,
    status_of,
    summary_of,
)

_PROBLEM_REF = {"$ref": "#/components/schemas/ProblemDocument"}
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def errors(*codes: Code) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route answering these problem codes."""
    by_status: dict[int, list[Code]] = defaultdict(list)
    for code in codes:
        by_status[status_of(code)].append(code)
    return {status: {"description": _description(listed)} for status, listed in by_status.items()}


def _description(codes: list[Code]) -> str:
    return "; ".join(f"`{code.value}`: {summary_of(code)}" for code in codes)


def install(app: FastAPI, *, auth: bool) -> None:
    """Replace the app's OpenAPI generator with one that documents problems."""

    def generate() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = fix(document, auth=auth)
        return app.openapi_schema

    setattr(app, "openapi", generate)  # noqa: B010 - FastAPI's documented override point


def fix(document: dict[str, Any], *, auth: bool) -> dict[str, Any]:
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    # Models no route names as its body: problems (every error) and the change
    # feed's event data (inside text/event-stream).
    for model in (ProblemDocument, ChangeBatch):
        definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(definition.pop("$defs", {}))
        schemas[model.__name__] = definition
    for path_item in document.get("paths", {}).values():
        for method in _METHODS:
            operation = path_item.get(method)
            if operation is not None:
                _fix_operation(operation, auth=auth)
    return document


def _fix_operation(operation: dict[str, Any], *, auth: bool) -> None:
    for parameter in operation.get("parameters", []):
        parameter["schema"] = _without_null(parameter.get("schema", {}))
    responses: dict[str, Any] = operation.setdefault("responses", {})
    validation = responses.pop("422", None)
    has_input = bool(operation.get("parameters") or operation.get("requestBody"))
    extra: list[tuple[str, Code]] = []
    if validation is not None or has_input:
        extra.append(("400", Code.INVALID_ARGUMENT))
    if operation.get("requestBody"):
        extra.append(("413", Code.PAYLOAD_TOO_LARGE))
    if auth and operation.get("security"):
        extra.append(("401", Code.UNAUTHORIZED))
    for status, code in extra:
        entry = responses.setdefault(status, {"description": ""})
        listed = entry.get("description", "")
        if f"`{code.value}`" not in listed:
            entry["description"] = "; ".join(filter(None, (listed, _description([code]))))
    for status, entry in responses.items():
        if status.isdigit() and int(status) >= 400:
            entry["content"] = {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}
            headers = _problem_headers(int(status))
            if headers:
                entry["headers"] = headers


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without FastAPI's `anyOf: [..., {"type": "null"}]`
    for optional ones: an absent parameter is how HTTP says none; a present one
    is a string (no query string or header carries a JSON null)."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) == len(options):
        return schema
    rest = {name: value for name, value in schema.items() if name != "anyOf"}
    if len(kept) == 1:
        return {**kept[0], **rest}
    return {**rest, "anyOf": kept}


def _problem_headers(status: int) -> dict[str, Any]:
    if status == 503:
        return {
            "Retry-After": {
                "description": "Seconds to wait before retrying (when a retry is safe)",
                "schema": {"type": "integer"},
            }
        }
    if status == 401:
        return {
            "WWW-Authenticate": {
                "description": "The scheme to authenticate with: Bearer",
                "schema": {"type": "string"},
            }
        }
    if status == 405:
        return {"Allow": {"description": "The methods allowed", "schema": {"type": "string"}}}
    return {}
