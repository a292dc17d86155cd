"""Errors of Cairn's HTTP APIs (the gateway's and the controller's admin API) as
RFC 9457 problem documents, each with a stable `code`.

    {"type": "about:blank", "title": "Not Found", "status": 404,
     "detail": "shard 7 does not exist", "code": "shard-not-found"}

`type` is `about:blank` (the project has no web address of its own to name
problem types under), so, as RFC 9457 asks, `title` is the status's HTTP phrase.
Clients branch on the `code` extension member; `detail` says what happened this
time. Pure: the HTTP frameworks' side is cairn.common.problems_http.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE = "about:blank"
# Validation messages listed in a problem's detail, at most.
MAX_VALIDATION_MESSAGES = 10


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
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type"
    INVALID_CHANGE = "invalid-change"
    INTERNAL_ERROR = "internal-error"
    CONTROLLER_ERROR = "controller-error"
    UNAVAILABLE = "unavailable"
    OUTCOME_UNKNOWN = "outcome-unknown"
    CONTROLLER_UNAVAILABLE = "controller-unavailable"


_STATUSES: Mapping[Code, int] = {
    Code.INVALID_ARGUMENT: 400,
    Code.UNAUTHORIZED: 401,
    Code.FORBIDDEN: 403,
    Code.QUOTA_EXCEEDED: 429,
    Code.NOT_FOUND: 404,
    Code.KEY_NOT_FOUND: 404,
    Code.NAMESPACE_NOT_FOUND: 404,
    Code.SESSION_EXPIRED: 404,
    Code.SHARD_NOT_FOUND: 404,
    Code.NODE_NOT_FOUND: 404,
    Code.METHOD_NOT_ALLOWED: 405,
    Code.CONFLICT: 409,
    Code.NOTIFICATIONS_TRIMMED: 410,
    Code.VERSION_MISMATCH: 412,
    Code.PAYLOAD_TOO_LARGE: 413,
    Code.UNSUPPORTED_MEDIA_TYPE: 415,
    Code.INVALID_CHANGE: 422,
    Code.INTERNAL_ERROR: 500,
    Code.CONTROLLER_ERROR: 502,
    Code.UNAVAILABLE: 503,
    Code.OUTCOME_UNKNOWN: 503,
    Code.CONTROLLER_UNAVAILABLE: 503,
}


# What each code means, for API documentation (the documents' titles are the
# status phrases).
_SUMMARIES: Mapping[Code, str] = {
    Code.INVALID_ARGUMENT: "Invalid argument",
    Code.UNAUTHORIZED: "Unauthorized",
    Code.FORBIDDEN: "Forbidden",
    Code.QUOTA_EXCEEDED: "Quota exceeded",
    Code.NOT_FOUND: "Not found",
    Code.KEY_NOT_FOUND: "Key not found",
    Code.NAMESPACE_NOT_FOUND: "Namespace not found",
    Code.SESSION_EXPIRED: "Session expired",
    Code.SHARD_NOT_FOUND: "Shard not found",
    Code.NODE_NOT_FOUND: "Node not found",
    Code.METHOD_NOT_ALLOWED: "Method not allowed",
    Code.CONFLICT: "Conflict",
    Code.NOTIFICATIONS_TRIMMED: "Notifications trimmed",
    Code.VERSION_MISMATCH: "Version mismatch",
    Code.PAYLOAD_TOO_LARGE: "Payload too large",
    Code.UNSUPPORTED_MEDIA_TYPE: "Body not sent as JSON",
    Code.INVALID_CHANGE: "Invalid change",
    Code.INTERNAL_ERROR: "Internal error",
    Code.CONTROLLER_ERROR: "Controller error",
    Code.UNAVAILABLE: "Unavailable",
    Code.OUTCOME_UNKNOWN: "Outcome unknown",
    Code.CONTROLLER_UNAVAILABLE: "Controller unavailable",
}


def summary_of(code: Code) -> str:
    return _SUMMARIES[code]


def status_of(code: Code) -> int:
    return _STATUSES[code]


def title_of(code: Code) -> str:
    """The HTTP phrase of the code's status (RFC 9457's advice for about:blank)."""
    return HTTPStatus(status_of(code)).phrase


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
            "type": PROBLEM_TYPE,
            "title": title_of(self.code),
            "status": self.status,
            "detail": self.detail,
            "code": self.code.value,
        }


# HTTP statuses the frameworks raise on their own (routing, body limits).
_HTTP_STATUSES: Mapping[int, Code] = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHORIZED,
    403: Code.FORBIDDEN,
    404: Code.NOT_FOUND,
    405: Code.METHOD_NOT_ALLOWED,
    413: Code.PAYLOAD_TOO_LARGE,
    415: Code.UNSUPPORTED_MEDIA_TYPE,
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


def validation_detail(errors: Sequence[Any]) -> str:
    """One line from a framework's validation errors (pydantic's shape:
    `{"loc": [...], "msg": ...}` each), at most MAX_VALIDATION_MESSAGES of them."""
    messages = []
    for item in errors[:MAX_VALIDATION_MESSAGES]:
        if isinstance(item, Mapping):
            location = ".".join(str(part) for part in item.get("loc", ()))
            messages.append(f"{location}: {item.get('msg', 'invalid')}".strip(": "))
    return "; ".join(messages) or "malformed request"
