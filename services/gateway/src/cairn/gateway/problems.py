"""Errors as RFC 9457 problem documents, each with a stable `code`.

Every error the gateway answers is a `Problem`: `application/problem+json`
with `type` (https://cairn.dev/problems/<code>), `title`, `status`, `detail`
and `code`. Clients branch on `code` (or `type`); `title` is fixed per code and
`detail` says what happened this time. The mappings from the client library's
errors, from HTTP-level errors (unknown route, wrong method, body too large)
and from the controller's answers are pure functions here, so that each is
decided once.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, Field

from cairn.client.errors import (
    ClientClosed,
    ClientError,
    InvalidArgument,
    KeyNotFound,
    NamespaceNotFound,
    NotificationsTrimmed,
    OutcomeUnknown,
    PermissionDenied,
    QuotaExceeded,
    RequestTimeout,
    SessionExpired,
    Unauthenticated,
    UnexpectedVersion,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://cairn.dev/problems/"


class Code(enum.StrEnum):
    """The stable codes. Never rename one: clients match on them."""

    INVALID_ARGUMENT = "invalid-argument"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    QUOTA_EXCEEDED = "quota-exceeded"
    NOT_FOUND = "not-found"
    KEY_NOT_FOUND = "key-not-found"
    NAMESPACE_NOT_FOUND = "namespace-not-found"
    SESSION_EXPIRED = "session-expired"
    SHARD_NOT_FOUND = "shard-not-found"
    NODE_NOT_FOUND = "node-not-found"
    METHOD_NOT_ALLOWED = "method-not-allowed"
    CONFLICT = "conflict"
    NOTIFICATIONS_TRIMMED = "notifications-trimmed"
    VERSION_MISMATCH = "version-mismatch"
    PAYLOAD_TOO_LARGE = "payload-too-large"
    INVALID_CHANGE = "invalid-change"
    INTERNAL_ERROR = "internal-error"
    CONTROLLER_ERROR = "controller-error"
    UNAVAILABLE = "unavailable"
    OUTCOME_UNKNOWN = "outcome-unknown"
    CONTROLLER_UNAVAILABLE = "controller-unavailable"


# code -> (HTTP status, title)
_CODES: Mapping[Code, tuple[int, str]] = {
    Code.INVALID_ARGUMENT: (400, "Invalid argument"),
    Code.UNAUTHORIZED: (401, "Unauthorized"),
    Code.FORBIDDEN: (403, "Forbidden"),
    Code.QUOTA_EXCEEDED: (429, "Quota exceeded"),
    Code.NOT_FOUND: (404, "Not found"),
    Code.KEY_NOT_FOUND: (404, "Key not found"),
    Code.NAMESPACE_NOT_FOUND: (404, "Namespace not found"),
    Code.SESSION_EXPIRED: (404, "Session expired"),
    Code.SHARD_NOT_FOUND: (404, "Shard not found"),
    Code.NODE_NOT_FOUND: (404, "Node not found"),
    Code.METHOD_NOT_ALLOWED: (405, "Method not allowed"),
    Code.CONFLICT: (409, "Conflict"),
    Code.NOTIFICATIONS_TRIMMED: (410, "Notifications trimmed"),
    Code.VERSION_MISMATCH: (412, "Version mismatch"),
    Code.PAYLOAD_TOO_LARGE: (413, "Payload too large"),
    Code.INVALID_CHANGE: (422, "Invalid change"),
    Code.INTERNAL_ERROR: (500, "Internal error"),
    Code.CONTROLLER_ERROR: (502, "Controller error"),
    Code.UNAVAILABLE: (503, "Unavailable"),
    Code.OUTCOME_UNKNOWN: (503, "Outcome unknown"),
    Code.CONTROLLER_UNAVAILABLE: (503, "Controller unavailable"),
}


def status_of(code: Code) -> int:
    return _CODES[code][0]


def title_of(code: Code) -> str:
    return _CODES[code][1]


class Problem(Exception):
    """An error answered as a problem document; `headers` go with it (e.g.
    `Retry-After`, `WWW-Authenticate`, `Allow`)."""

    def __init__(self, code: Code, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.headers: dict[str, str] = dict(headers or {})

    @property
    def status(self) -> int:
        return status_of(self.code)

    def document(self) -> dict[str, Any]:
        return {
            "type": PROBLEM_TYPE_BASE + self.code.value,
            "title": title_of(self.code),
            "status": self.status,
            "detail": self.detail,
            "code": self.code.value,
        }


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document (the schema of every error answer)."""

    type: str = Field(description="A URI naming the problem: https://cairn.dev/problems/<code>")
    title: str = Field(description="A short summary, fixed per code")
    status: int = Field(description="The HTTP status code")
    detail: str = Field(description="What happened this time")
    code: Code = Field(description="The stable code to branch on")


@dataclass(frozen=True, slots=True)
class _Mapping:
    code: Code
    retry: bool = False


# Most specific first: a subclass would otherwise be caught by its base.
_CLIENT_ERRORS: tuple[tuple[type[ClientError], _Mapping], ...] = (
    (KeyNotFound, _Mapping(Code.KEY_NOT_FOUND)),
    (UnexpectedVersion, _Mapping(Code.VERSION_MISMATCH)),
    (SessionExpired, _Mapping(Code.SESSION_EXPIRED)),
    (InvalidArgument, _Mapping(Code.INVALID_ARGUMENT)),
    (NamespaceNotFound, _Mapping(Code.NAMESPACE_NOT_FOUND)),
    (NotificationsTrimmed, _Mapping(Code.NOTIFICATIONS_TRIMMED)),
    (Unauthenticated, _Mapping(Code.UNAUTHORIZED)),
    (PermissionDenied, _Mapping(Code.FORBIDDEN)),
    (QuotaExceeded, _Mapping(Code.QUOTA_EXCEEDED)),
    # The write may have applied: retrying blindly could apply it twice, so no
    # Retry-After; the caller reads back first.
    (OutcomeUnknown, _Mapping(Code.OUTCOME_UNKNOWN)),
    (RequestTimeout, _Mapping(Code.UNAVAILABLE, retry=True)),
    # Only while the gateway shuts down.
    (ClientClosed, _Mapping(Code.UNAVAILABLE, retry=True)),
)


def problem_for_client_error(error: ClientError, retry_after_s: int) -> Problem:
    """The problem answering a client library error."""
    for kind, mapping in _CLIENT_ERRORS:
        if isinstance(error, kind):
            headers = {"Retry-After": str(retry_after_s)} if mapping.retry else {}
            return Problem(mapping.code, str(error) or title_of(mapping.code), headers)
    # A ClientError subclass added to the library later: still an answer, never a 500.
    return Problem(Code.UNAVAILABLE, str(error) or type(error).__name__)


# HTTP statuses the framework raises on its own (routing, body limits).
_HTTP_STATUSES: Mapping[int, Code] = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHORIZED,
    404: Code.NOT_FOUND,
    405: Code.METHOD_NOT_ALLOWED,
    413: Code.PAYLOAD_TOO_LARGE,
    422: Code.INVALID_ARGUMENT,
}


def problem_for_http_status(
    status: int, detail: str | None, headers: Mapping[str, str] | None = None
) -> Problem:
    """The problem for an HTTP error the framework raised (unknown route, wrong
    method, body over its limit). Statuses not listed are treated as malformed
    requests (the framework raises only client errors)."""
    code = _HTTP_STATUSES.get(status, Code.INVALID_ARGUMENT)
    allowed = next((v for k, v in (headers or {}).items() if k.lower() == "allow"), None)
    if code is Code.METHOD_NOT_ALLOWED and allowed is not None:
        text = f"this path takes {allowed}"
    elif detail and detail.lower() not in _generic_phrases(status, code):
        text = detail
    else:
        # The framework's text is the status phrase: say what the code means.
        text = {
            Code.NOT_FOUND: "no such path in this API (see /docs)",
            Code.PAYLOAD_TOO_LARGE: "the request body is over this endpoint's limit",
        }.get(code, title_of(code))
    return Problem(code, text, headers)


def _generic_phrases(status: int, code: Code) -> set[str]:
    """Texts that only restate the status (Starlette's default details)."""
    phrases = {title_of(code).lower(), "content too large"}
    with contextlib.suppress(ValueError):
        phrases.add(HTTPStatus(status).phrase.lower())
    return phrases


# The controller's problem titles that name a missing thing (see its api.py).
_CONTROLLER_NOT_FOUND: Mapping[str, Code] = {
    "No such namespace": Code.NAMESPACE_NOT_FOUND,
    "No such shard": Code.SHARD_NOT_FOUND,
    "No such node": Code.NODE_NOT_FOUND,
}


def problem_for_controller(status: int, body: Any) -> Problem:
    """The problem passing on a controller's error answer (`body`: its decoded
    JSON, a problem document or FastAPI's validation error, or None)."""
    title = body.get("title") if isinstance(body, dict) else None
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, str):
        # FastAPI's validation errors: {"detail": [{"msg": ..., "loc": ...}, ...]}
        detail = _validation_detail(detail) if isinstance(detail, list) else None
    if not detail:
        detail = title if isinstance(title, str) and title else f"controller answered {status}"
    if status == 404:
        code = _CONTROLLER_NOT_FOUND.get(title if isinstance(title, str) else "", Code.NOT_FOUND)
    elif status == 401:
        code = Code.UNAUTHORIZED
    elif status == 403:
        code = Code.FORBIDDEN
    elif status == 409:
        code = Code.CONFLICT
    elif status == 422:
        code = Code.INVALID_CHANGE
    elif status == 503:
        code = Code.CONTROLLER_UNAVAILABLE
    elif 400 <= status < 500:
        code = Code.INVALID_ARGUMENT
    else:
        code = Code.CONTROLLER_ERROR
    return Problem(code, f"controller: {detail}")


def _validation_detail(errors: list[Any]) -> str:
    messages = []
    for error in errors[:10]:
        if isinstance(error, dict):
            location = ".".join(str(part) for part in error.get("loc", ()))
            messages.append(f"{location}: {error.get('msg', '')}".strip(": "))
    return "; ".join(messages)
